"""The TUI in a real terminal (tmux): watch the demo, detach, training goes on, re-attach, stop; at
80x24 the overview shows the finding to act on without a key (issue 12)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import wait_for

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


class Tmux:
    """One private tmux server (its own socket), so tests never touch a user's sessions."""

    def __init__(self, name: str, env: dict[str, str]) -> None:
        self.socket = name
        self.env = env

    def tmux(self, *args: str) -> str:
        return subprocess.run(["tmux", "-L", self.socket, *args], capture_output=True, text=True,
                              env=self.env, timeout=30).stdout

    def start(self, session: str, command: str, cwd: Path | None = None, size: tuple[int, int] = (120, 40)) -> None:
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items()
                           if k.startswith(("PITSTOP_", "PYTHON")) or k in ("PATH", "HOME"))
        self.tmux("new-session", "-d", "-s", session, "-x", str(size[0]), "-y", str(size[1]),
                  f"cd {shlex.quote(str(cwd or Path.cwd()))} && env {exports} {command}; echo VIEWER-EXITED; sleep 600")

    def screen(self, session: str) -> str:
        return self.tmux("capture-pane", "-p", "-t", session)

    def keys(self, session: str, *keys: str) -> None:
        self.tmux("send-keys", "-t", session, *keys)

    def kill(self) -> None:
        self.tmux("kill-server")


def _step(screen: str) -> int:
    match = re.search(r"\bstep (\d+)\b", screen)
    return int(match.group(1)) if match else -1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_demo_in_a_terminal_detach_and_reattach(tmp_path: Path, env: dict[str, str]) -> None:
    term = Tmux(f"pitstop-test-{os.getpid()}", env)
    pitstop = f"{shlex.quote(sys.executable)} -m pitstop.cli"
    training_pid = None
    try:
        term.start("run", f"{pitstop} demo --steps 100000", cwd=tmp_path)
        wait_for(lambda: _step(term.screen("run")) >= 2, timeout=180,
                 what="the step counter in the TUI", show=lambda: term.screen("run"))
        first = _step(term.screen("run"))
        wait_for(lambda: _step(term.screen("run")) > first, timeout=60, what="the step counter to rise")
        screen = term.screen("run")
        training_pid = int(re.search(r"\bpid (\d+)", screen).group(1))  # type: ignore[union-attr]
        term.keys("run", "3")  # the Data screen: the stall is visible as a figure
        wait_for(lambda: re.search(r"share of step\s+\d+%", term.screen("run")) is not None,
                 what="the data-wait share on the Data screen")
        seen = _step(term.screen("run"))

        term.keys("run", "d")  # detach: the viewer quits, training goes on
        wait_for(lambda: "VIEWER-EXITED" in term.screen("run"), what="the viewer to exit")
        assert f"training continues (pid {training_pid})" in term.screen("run")
        assert _alive(training_pid)

        term.start("attach", f"{pitstop} attach {training_pid}")
        wait_for(lambda: _step(term.screen("attach")) >= seen, timeout=60, what="history after attach")
        assert "LIVE" in term.screen("attach")

        term.keys("attach", "k")  # stop training: asks first
        wait_for(lambda: "Stop training" in term.screen("attach") or "stop" in term.screen("attach").lower(),
                 what="the stop question")
        term.keys("attach", "y")
        wait_for(lambda: not _alive(training_pid), timeout=60, what="training to stop after k, y")
    finally:
        term.kill()
        if training_pid is not None and _alive(training_pid):
            os.kill(training_pid, signal.SIGKILL)


def test_at_80x24_the_overview_shows_the_finding_its_fix_and_the_resources_without_a_key(
        tmp_path: Path, env: dict[str, str]) -> None:
    # The demo loads every batch in the main process (num_workers=0): the data-wait finding fires
    # once 10 steps after the warm-up are measured. No key is sent until the end.
    term = Tmux(f"pitstop-test80-{os.getpid()}", env)
    pitstop = f"{shlex.quote(sys.executable)} -m pitstop.cli"
    training_pid = None
    try:
        term.start("small", f"{pitstop} demo --steps 100000", cwd=tmp_path, size=(80, 24))
        wait_for(lambda: "The DataLoader cannot keep up" in term.screen("small"), timeout=240,
                 what="the data-wait finding on the 80x24 overview", show=lambda: term.screen("small"))
        screen = term.screen("small")
        lines = screen.splitlines()
        training_pid = int(re.search(r"\bpid (\d+)", screen).group(1))  # type: ignore[union-attr]
        assert len(lines) <= 24 and all(len(line) <= 80 for line in lines)
        # Once every step's anatomy is in, at 80 columns it takes the room of "wait": "data 1.89 s (70%) ·
        # compute 953 ms (fwd 40 bwd 45 opt 5%)" (widgets/_split.py); before, "data wait ... (30%)".
        assert re.search(r"step p50 .* data (wait )?\S+ m?s \(\d+%\) · compute \S+ m?s \((fwd \d+|\d+%\))", screen), screen
        # The fix names the training loader: with the workers that pay, or (a CPU-bound loader on 2
        # busy cores, where workers measured x1.10 against no workers) as the loader to make cheaper.
        assert re.search(r"fix (DataLoader\(dataset, batch_size=32, num_workers=|# the training DataLoader \(SyntheticImages, batch_size=32\))", screen), screen
        assert re.search(r"gain (~|at most |up to )", screen), screen
        assert any(line.strip().startswith("GPU ") for line in lines)  # n/a with its reason here
        assert any(line.strip().startswith("CPU main ") for line in lines)
        assert any(line.strip().startswith("mem host rss ") for line in lines)
        assert "step time (" in screen  # and the chart in what is left
        term.keys("small", "C-c")  # ctrl+c quits the viewer, as in htop; training goes on
        wait_for(lambda: "VIEWER-EXITED" in term.screen("small"), what="the viewer to exit on ctrl+c")
        assert _alive(training_pid)
    finally:
        term.kill()
        if training_pid is not None and _alive(training_pid):
            os.kill(training_pid, signal.SIGKILL)
