"""`p` shows each process's own answer from a real agent socket, not "sent" (issue 13, seam 1)."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import FIXED, hello, run, steps, wait_for

from pitstop.events import encode
from pitstop.profiling.sources import SocketSource
from pitstop.profiling.transport import AgentServer
from pitstop.tui.app import PitstopApp

OFF = "profiler windows are off in this run (started with --profile off, or torch not imported yet)"


def test_p_shows_the_agents_own_answer(rundir: Path) -> None:
    asked: list[str] = []

    def on_command(cmd: str) -> str:  # what the agent says when it runs without profiler windows
        asked.append(cmd)
        return OFF

    server = AgentServer(on_command, {"pid": os.getpid()})
    server.publish([encode(hello(pid=os.getpid(), rank=0)), *(encode(s) for s in steps(5))])
    source = SocketSource("train.py", sockets=[server.path], poll_s=0.05)

    async def scenario() -> None:
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_for(pilot, lambda: app.current_run()[1] is not None)
            await pilot.press("p")
            await wait_for(pilot, lambda: any(n.message == f"profile: rank 0: {OFF}" for n in app._notifications))
            assert not any("sent" in n.message for n in app._notifications)

    try:
        run(scenario())
    finally:
        source.close()
        server.close()
    assert asked == ["profile"]
