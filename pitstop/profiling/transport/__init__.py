"""Provides the per-process socket between an agent and its viewers: names, server and client.

One concept per private module, re-exported here (as Textual keeps one widget
per private module): `_endpoints` (where agents are: the runtime directory,
TCP endpoints and tokens), `_server` (the agent's side), `_client` (the
viewers' side), `_wire` (the lines besides events: token, command, reply).

Server to client: history (sticky events, then the recent ring) and then live
events, with the replies to commands among them (`{"kind":"reply","cmd":...,
"id":...,"message":...}`, taken out of the stream by `Client.lines`). Client
to server: a token line first over TCP, then `{"cmd": "profile", "id": 1}`.
"""

from __future__ import annotations

from pitstop.profiling.rundir import runtime_dir
from pitstop.profiling.transport._client import COMMAND_TIMEOUT_S, Client, PendingReply, ask, request
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
    "COMMAND_TIMEOUT_S",
    "AgentInfo",
    "AgentServer",
    "Client",
    "PendingReply",
    "TcpEndpoint",
    "ask",
    "list_agents",
    "parse_hostport",
    "read_token",
    "request",
    "runtime_dir",
    "socket_for_pid",
    "write_token",
]
