"""The signal forwarder and the orphan reaper, on real processes (pitstop/profiling/signals.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from pitstop.profiling.signals import Forwarder

# A child subreaper gets the orphans of its descendants, as a container's PID 1 does.
REAPER_CHILD = textwrap.dedent("""
    import json, subprocess, sys, time
    from pitstop.profiling.signals import Reaper, become_subreaper

    assert become_subreaper()
    own = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    # A parent that exits at once leaves its child (sleep) to us: an orphan.
    parent = subprocess.Popen(["sh", "-c", "sleep 0.3 & echo $!"], stdout=subprocess.PIPE, text=True)
    orphan = int(parent.stdout.read())
    parent.wait()

    def state(pid):
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rpartition(")")[2].split()[0]
        except OSError:
            return "gone"

    deadline = time.monotonic() + 30
    while (state(orphan) != "Z" or state(own.pid) != "Z") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert state(orphan) == "Z" and state(own.pid) == "Z", (state(orphan), state(own.pid))
    reaper = Reaper(own=lambda: [own.pid])
    assert reaper.needed()
    first = reaper.reap_once()   # a zombie is taken on its second scan
    second = reaper.reap_once()
    print(json.dumps({"first": first, "second": second, "orphan": orphan, "state": state(orphan),
                      "own_code": own.wait()}))
""")


def test_a_subreaper_collects_an_orphans_zombie_and_leaves_its_own_childs_exit_code() -> None:
    if sys.platform != "linux":
        pytest.skip("PR_SET_CHILD_SUBREAPER is Linux's")
    out = subprocess.run([sys.executable, "-c", REAPER_CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["first"] == []
    assert seen["second"] == [seen["orphan"]]
    assert seen["state"] == "gone"  # no zombie left under the subreaper
    assert seen["own_code"] == 3  # its own child's exit code still read by its Popen, not taken to 0


class Sleeper:
    """A real child process that notes every SIGUSR1 it gets on its stdout."""

    def __init__(self, new_group: bool) -> None:
        code = ("import signal, sys, time\n"
                "signal.signal(signal.SIGUSR1, lambda s, f: print('usr1', flush=True))\n"
                "print('ready', flush=True)\n"
                "time.sleep(60)\n")
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                                     start_new_session=new_group)
        assert self.proc.stdout is not None and self.proc.stdout.readline() == "ready\n"

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    def line(self) -> str:
        assert self.proc.stdout is not None
        return self.proc.stdout.readline()

    def end(self) -> None:
        self.proc.kill()
        self.proc.wait()


@pytest.mark.parametrize("new_group", [False, True])
def test_a_signal_before_the_child_exists_reaches_it_once_it_does(new_group: bool) -> None:
    stops: list[int] = []
    with Forwarder(stops.append, from_terminal=lambda: False) as fwd:
        os.kill(os.getpid(), signal.SIGUSR1)  # to pitstop, before anything started: kept
        child = Sleeper(new_group)
        try:
            fwd.attach(child)
            assert child.line() == "usr1\n"
            os.kill(os.getpid(), signal.SIGUSR1)
            assert child.line() == "usr1\n"
        finally:
            child.end()
    assert fwd.received == [signal.SIGUSR1, signal.SIGUSR1] and fwd.sent == fwd.received
    assert stops == []  # SIGUSR1 asks the training for something: a viewer stays
    assert signal.getsignal(signal.SIGUSR1) is signal.SIG_DFL  # given back


def test_a_terminals_ctrl_c_is_not_sent_again_to_a_child_of_the_same_group() -> None:
    with Forwarder(from_terminal=lambda: True) as fwd:
        child = Sleeper(new_group=False)
        try:
            fwd.attach(child)
            os.kill(os.getpid(), signal.SIGINT)  # as if typed: the terminal gave the child its own
            assert fwd.received == [signal.SIGINT] and fwd.sent == []
            os.kill(os.getpid(), signal.SIGTERM)  # a terminal never sends this one: passed on
            assert child.proc.wait(timeout=30) == -signal.SIGTERM
            assert fwd.sent == [signal.SIGTERM]
        finally:
            child.end()


def test_nothing_is_sent_to_a_child_already_reaped() -> None:
    with Forwarder(from_terminal=lambda: False) as fwd:
        child = Sleeper(new_group=True)
        child.end()
        fwd.attach(child)
        os.kill(os.getpid(), signal.SIGTERM)
    assert fwd.received == [signal.SIGTERM] and fwd.sent == []
