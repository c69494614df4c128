"""Provides the per-process socket between an agent and its viewers: names, server and client.

One concept per private module, re-exported here (as Textual keeps one widget
per private module): `_endpoints` (where agents are: the runtime directory,
TCP endpoints and tokens), `_server` (the agent's side), `_client` (the
viewers' side).

Wire format: newline-delimited JSON both ways. Server to client: history
(sticky events, then the recent ring) and then live events; replies to
commands are lines of kind "reply" (events.decode skips them). Client to
server: {"cmd": "profile"} or {"cmd": "stop"}.
"""

from __future__ import annotations

from pitstop.profiling.rundir import runtime_dir
from pitstop.profiling.transport._client import Client, request
from pitstop.profiling.transport._endpoints import (
    AgentInfo,
    TcpEndpoint,
    list_agents,
    parse_hostport,
    read_token,
    socket_for_pid,
    write_token,
)
from pitstop.profiling.transport._server import AgentServer

__all__ = [
    "AgentInfo",
    "AgentServer",
    "Client",
    "TcpEndpoint",
    "list_agents",
    "parse_hostport",
    "read_token",
    "request",
    "runtime_dir",
    "socket_for_pid",
    "write_token",
]
