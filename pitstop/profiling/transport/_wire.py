"""Provides the lines viewers and agents exchange besides events: tokens, commands and replies.

Newline-delimited JSON both ways. A viewer sends `{"token": ...}` first over
TCP, then commands `{"cmd": "profile", "id": 3}`; the agent answers each with
`{"kind":"reply","cmd":"profile","id":3,"message":"..."}` in its event
stream. The id pairs a reply with its request, so a viewer can wait for its
own answer among the events (an agent of an older pitstop sends no id: its
reply is paired by the command's name).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# Both spellings: json.dumps' default separators (older agents) and the compact ones sent now.
REPLY_PREFIXES = (b'{"kind":"reply"', b'{"kind": "reply"')


@dataclass(frozen=True)
class Reply:
    """An agent's answer to one command."""

    cmd: str
    message: str
    id: int | None = None


def command_line(cmd: str, request_id: int) -> bytes:
    return json.dumps({"cmd": cmd, "id": request_id}, separators=(",", ":")).encode() + b"\n"


def parse_command(line: bytes) -> tuple[str, int | None]:
    """(command, request id) of a viewer's line; ("", None) for garbage, which gets an "unknown command" reply."""
    try:
        data = json.loads(line)
    except ValueError:
        return "", None
    if not isinstance(data, dict):
        return "", None
    request_id = data.get("id")
    return str(data.get("cmd", "")), request_id if isinstance(request_id, int) else None


def reply_line(cmd: str, message: str, request_id: int | None = None) -> bytes:
    body: dict[str, object] = {"kind": "reply", "cmd": cmd}
    if request_id is not None:
        body["id"] = request_id
    body["message"] = message
    return json.dumps(body, separators=(",", ":")).encode() + b"\n"


def is_reply(line: bytes) -> bool:
    return line.startswith(REPLY_PREFIXES)


def parse_reply(line: bytes) -> Reply | None:
    """The reply a line carries; None when it is not a well-formed reply."""
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("kind") != "reply":
        return None
    request_id = data.get("id")
    return Reply(str(data.get("cmd", "")), str(data.get("message", "")),
                 request_id if isinstance(request_id, int) else None)


def token_line(token: str) -> bytes:
    return json.dumps({"token": token}).encode() + b"\n"


def parse_token(line: bytes) -> str:
    """The token a TCP viewer sent first; "" when the line holds none."""
    try:
        data = json.loads(line)
    except ValueError:
        return ""
    return str(data.get("token", "")) if isinstance(data, dict) else ""
