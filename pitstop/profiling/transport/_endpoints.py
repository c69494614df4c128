"""Provides how a viewer names an agent: the sockets in the runtime directory, TCP endpoints and their tokens.

Layout: one per-user directory (0700, see rundir.py) holding `<pid>.sock`
(0600) and `<pid>.json` (who is behind it). An agent served over TCP
(`pitstop run --listen`) is reached with the token in a 0600 file.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pitstop.errors import TransportError
from pitstop.profiling.rundir import candidates, runtime_dirs


@dataclass(frozen=True)
class TcpEndpoint:
    """An agent served over TCP (`pitstop run --listen`), reached with its token."""

    host: str
    port: int
    token: str

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_hostport(text: str) -> tuple[str, int]:
    """'HOST:PORT' (or '[v6]:PORT') -> (host, port), with a one-line error."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise TransportError(f"{text!r} is not HOST:PORT")
    return host.strip("[]"), int(port)


def read_token(path: Path) -> str:
    """A token file's token; refuses a file others can read."""
    try:
        st = path.stat()
        token = path.read_text().strip()
    except OSError as err:
        raise TransportError(f"cannot read token file {path}: {err.strerror}") from err
    if st.st_mode & 0o077:
        raise TransportError(f"token file {path} is readable by others; chmod 600 it")
    if not token:
        raise TransportError(f"token file {path} is empty")
    return token


def write_token(path: Path) -> str:
    """Create a fresh token file (0600), or reuse the token already there."""
    import secrets

    if path.exists():
        return read_token(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another node's front on a shared home made it just now: one token for the job
        return read_token(path)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return token


@dataclass(frozen=True)
class AgentInfo:
    """One live agent found in the runtime directory."""

    pid: int
    socket: Path
    session: str
    script: str
    started: float
    rank: int | None
    record: str | None
    cwd: str


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def list_agents(clean: bool = True) -> list[AgentInfo]:
    """Live agents of this user in every socket directory, oldest first; stale entries (dead pid) are removed."""
    found = []
    metas = [meta for directory in runtime_dirs() for meta in sorted(directory.glob("*.json"))]
    for meta in metas:
        try:
            data = json.loads(meta.read_text())
            pid = int(data["pid"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        sock = Path(data.get("socket", meta.with_suffix(".sock")))
        if not _alive(pid) or not sock.exists():
            if clean:
                for stale in (meta, sock):
                    try:
                        stale.unlink(missing_ok=True)
                    except OSError:
                        pass
            continue
        found.append(
            AgentInfo(
                pid=pid,
                socket=sock,
                session=str(data.get("session", "")),
                script=str(data.get("script", "")),
                started=float(data.get("started", 0.0)),
                rank=data.get("rank"),
                record=data.get("record"),
                cwd=str(data.get("cwd", "")),
            )
        )
    return sorted(found, key=lambda a: (a.started, a.rank or 0, a.pid))


def socket_for_pid(pid: int) -> Path:
    """The socket of a pid, or a TransportError that says why there is none."""
    dirs = runtime_dirs()
    directory = next((d for d in dirs if (d / f"{pid}.sock").exists()), dirs[0] if dirs else candidates()[0])
    path = directory / f"{pid}.sock"
    if not _alive(pid):
        if path.exists():
            path.unlink(missing_ok=True)
            (directory / f"{pid}.json").unlink(missing_ok=True)
            raise TransportError(f"stale socket for pid {pid}: the process is gone (removed {path})")
        raise TransportError(f"no process with pid {pid}")
    if not path.exists():
        where = ", ".join(str(d) for d in dirs) or str(directory)
        raise TransportError(f"pid {pid} has no pitstop agent (no socket in {where}); was it started with pitstop run?")
    return path
