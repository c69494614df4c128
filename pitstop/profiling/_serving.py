"""Provides the agent's socket for live viewers: the server it starts, and the commands viewers send it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from pitstop.events import Hello, encode


def _local_rank() -> int:
    try:
        return int(os.environ.get("LOCAL_RANK") or 0)
    except ValueError:
        return 0


def start_server(agent: Any, hello: Hello) -> None:
    """The per-process socket live viewers connect to (and TCP with a token, with --listen)."""
    settings = agent.settings
    try:
        from pitstop.profiling.transport import AgentServer

        tcp = token = None
        if settings.listen and agent.parent_pid is None:  # its port is the parent's (unix socket only)
            from pitstop.profiling.transport import parse_hostport, read_token

            host, port = parse_hostport(settings.listen)
            # Slurm's tasks of one node have no LOCAL_RANK: their agent took SLURM_LOCALID (jobenv.py)
            tcp = (host, port + (hello.local_rank if hello.local_rank is not None else _local_rank()))
            token = read_token(Path(settings.token_file or ""))
        agent.server = AgentServer(
            lambda cmd: on_command(agent, cmd),
            {
                "pid": agent.pid,
                "session": settings.session,
                "script": hello.script,
                "started": hello.started,
                "rank": agent.rank,
                "record": hello.record,
                "cwd": hello.cwd,
            },
            tcp=tcp,
            token=token,
        )
        agent.server.publish([encode(hello)])
        if tcp is not None and hello.job is not None:
            from pitstop.profiling import jobstore

            jobstore.start(agent, tcp)  # its endpoint in the job's own store: `pitstop attach --job`
    except Exception as err:
        agent.server = None
        agent.note("warn", "socket", f"live viewers unavailable: {err}")


def on_command(agent: Any, cmd: str) -> str:
    """A viewer's command (socket thread): the reply it shows."""
    if cmd == "profile":
        if agent.windows is None:
            return "profiler windows are off in this run (started with --profile off, or torch not imported yet)"
        agent.windows.request()
        return f"profiling the next steps from step {agent.step_index}"
    if cmd == "stop":
        agent.note("info", "stop", f"stop requested by a viewer: SIGINT sent to pid {agent.pid}")
        os.kill(agent.pid, signal.SIGINT)
        return f"sent SIGINT to pid {agent.pid}"
    if cmd == "ping":
        return "pong"
    return f"unknown command {cmd!r} (known: profile, stop)"
