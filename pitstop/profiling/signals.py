"""Provides how a pitstop front passes the signals it gets on to the training it started, and reaps orphans.

`pitstop run` is a launcher, as torchrun is: a `kill -TERM` of pitstop (a
preemption, `docker stop`, Slurm's scancel of the step) must reach the
training's own SIGTERM handler, where a checkpoint is saved, and pitstop must
end with the training's exit code. Without forwarding, a SIGTERM one second
after the start killed pitstop alone and left the training running with
parent pid 1, its handler never run.

Where the signal goes:

* The training leads a process group of its own (the TUI's child, a tune
  trial): the whole group, as torchrun's `killpg` of each worker's session.
* It shares pitstop's group (headless in a terminal, so that it keeps the
  terminal's job control: Ctrl-Z, stdin): the training's pid only. A
  `killpg` there would signal pitstop itself and whatever shares the
  terminal job (a `| tee`). A Ctrl-C or Ctrl-\\ typed in the terminal
  already reached every process of the foreground group, the training
  included: when pitstop's group is the terminal's foreground group a
  SIGINT or SIGQUIT is taken for the terminal's and not sent again (a
  Python script would otherwise see two KeyboardInterrupts). A `kill -INT`
  of pitstop's pid alone, from a script or a job scheduler (no terminal,
  or pitstop in the background), is passed on.

Every signal is passed on as often as it comes; pitstop never escalates to
SIGKILL on a timer. torchrun waits 30 s and then SIGKILLs its workers, but a
checkpoint of a large model can take longer than that, and whoever sent the
SIGTERM (Slurm's KillWait, Kubernetes' grace period, `docker stop -t`) has its
own deadline and SIGKILL. A second Ctrl-C reaches the training as the first.

As a container's PID 1 (or a child subreaper), orphaned processes are
reparented to pitstop: `Reaper` collects their zombies, never pitstop's own
children's (their `Popen` reads their exit code).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import threading
import time
from collections.abc import Callable, Collection, Iterator
from types import FrameType
from typing import Any, Protocol

# What a launcher passes on: torchrun's four but SIGHUP, and the two that Slurm
# (--signal) and Lightning's SLURMEnvironment use to ask for a requeue.
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
# Those that end a run: a viewer in front of it closes (SIGUSR1/2 ask the training for something and it goes on).
STOPPING = (signal.SIGTERM, signal.SIGINT, signal.SIGQUIT)
# Signals a terminal sends to its whole foreground process group.
FROM_TERMINAL = (signal.SIGINT, signal.SIGQUIT)
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37


class Child(Protocol):
    """The started training command (a `subprocess.Popen`)."""

    pid: int
    returncode: int | None


def terminal_foreground() -> bool:
    """Whether this process's group is the foreground group of its controlling terminal (Ctrl-C reaches it)."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:
        return False  # no controlling terminal: nobody typed the signal
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


class Forwarder:
    """Pass FORWARDED signals on to the training: install before launching it, `attach` it, `restore` at the end.

    Signals that come before `attach` are kept and passed on once the training
    exists (they may reach it before its own handler is installed: then they
    act as on any process, a SIGTERM ends it with exit code 143).
    `on_stop(signum)` runs after a STOPPING signal was passed on: a viewer
    closes so that the terminal is restored while pitstop waits for the training.
    """

    def __init__(
        self,
        on_stop: Callable[[int], None] | None = None,
        *,
        signals: Collection[int] = FORWARDED,
        from_terminal: Callable[[], bool] = terminal_foreground,
    ) -> None:
        self.on_stop = on_stop
        self.signals = tuple(signals)
        self.received: list[int] = []  # every signal that came, in order
        self.received_t: list[float] = []  # when each came (time.time()), in the same order
        self.sent: list[int] = []  # those passed on
        self._from_terminal = from_terminal
        self._child: Child | None = None
        self._group = False  # the child leads its own process group: signal the group
        self._early: list[int] = []
        self._old: dict[int, Any] = {}

    def install(self) -> Forwarder:
        """Take the signals over (main thread only: elsewhere Python cannot, and nothing is forwarded)."""
        if threading.current_thread() is not threading.main_thread():
            return self
        for sig in self.signals:
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except (OSError, ValueError):
                continue
        return self

    def attach(self, child: Child) -> None:
        """From now on signals go to `child`; those that came before go now."""
        try:
            pgid = os.getpgid(child.pid)
        except OSError:
            pgid = -1
        self._group = pgid == child.pid and pgid != os.getpgrp()
        self._child = child
        early, self._early = self._early, []
        for sig in early:
            self._pass_on(sig, early=True)

    def restore(self) -> None:
        """Give the signals back to what handled them before `install`."""
        old, self._old = self._old, {}
        for sig, handler in old.items():
            with contextlib.suppress(OSError, ValueError, TypeError):
                signal.signal(sig, handler)

    def __enter__(self) -> Forwarder:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)
        self.received_t.append(time.time())
        if self._child is None:
            self._early.append(signum)
        else:
            self._pass_on(signum, early=False)
        if signum in STOPPING and self.on_stop is not None:
            try:
                self.on_stop(signum)
            except Exception:  # noqa: BLE001 - a viewer that cannot close must not stop the forwarding
                pass

    def _pass_on(self, signum: int, *, early: bool) -> None:
        child = self._child
        if child is None or child.returncode is not None:
            return  # reaped: its pid may be another process's by now
        # A signal typed in the terminal before the child existed reached pitstop alone.
        if not early and not self._group and signum in FROM_TERMINAL and self._from_terminal():
            return
        try:
            if self._group:
                os.killpg(child.pid, signum)
            else:
                os.kill(child.pid, signum)
            self.sent.append(signum)
        except OSError:
            pass  # gone meanwhile


@contextlib.contextmanager
def forwarding(on_stop: Callable[[int], None] | None = None) -> Iterator[Forwarder]:
    """`with forwarding() as fwd: proc = launch(...); fwd.attach(proc); ...`: the signals, then given back."""
    fwd = Forwarder(on_stop).install()
    try:
        yield fwd
    finally:
        fwd.restore()


def signal_names(signums: Collection[int]) -> str:
    """"SIGTERM", or "SIGINT, SIGTERM": each signal once, in the order they came."""
    return ", ".join(signal.Signals(s).name for s in dict.fromkeys(signums)) or "no signal"


def _prctl(option: int, arg: int = 0) -> int | None:
    """prctl(2) through libc, or None where it cannot be called (not Linux, no libc)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        if option == PR_GET_CHILD_SUBREAPER:
            value = ctypes.c_int(0)
            if libc.prctl(option, ctypes.byref(value), 0, 0, 0) != 0:
                return None
            return value.value
        return int(libc.prctl(option, arg, 0, 0, 0))
    except (OSError, AttributeError):
        return None


def become_subreaper() -> bool:
    """Make orphaned descendants this process's children (Linux); False where that is not possible."""
    return _prctl(PR_SET_CHILD_SUBREAPER, 1) == 0


def _zombie_children(me: int) -> set[int]:
    found: set[int] = set()
    try:
        names = os.listdir("/proc")
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat.rpartition(b")")[2].split()  # the command name may hold spaces and parentheses
        if len(fields) >= 2 and fields[0] == b"Z" and fields[1] == str(me).encode():
            found.add(int(name))
    return found


class Reaper:
    """Collects the zombies of orphans reparented to this process (PID 1 in a container, or a subreaper).

    A zombie is collected once it was one on two scans in a row and is not one
    of `own()` (the children pitstop started and waits for itself): a
    `subprocess.run` elsewhere in pitstop reads its child's exit code within
    microseconds, and a zombie taken from under it would read exit code 0.
    """

    def __init__(self, own: Callable[[], Collection[int]] = tuple, interval_s: float = 1.0) -> None:
        self._own = own
        self.interval_s = interval_s
        self.reaped: list[int] = []
        self._seen: set[int] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @staticmethod
    def needed() -> bool:
        """Orphans come to this process: it is a PID namespace's init or a child subreaper."""
        return os.getpid() == 1 or bool(_prctl(PR_GET_CHILD_SUBREAPER))

    def reap_once(self) -> list[int]:
        """One scan: collect the zombies seen on the last scan too that are not our own; returns their pids."""
        zombies = _zombie_children(os.getpid())
        ripe = (zombies & self._seen) - set(self._own())
        self._seen = zombies - ripe
        done = []
        for pid in sorted(ripe):
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    done.append(pid)
            except ChildProcessError:
                continue
        self.reaped.extend(done)
        return done

    def start(self) -> Reaper:
        """Scan every `interval_s` on a daemon thread, only where orphans can come to us."""
        if self._thread is None and self.needed():
            self._thread = threading.Thread(target=self._loop, name="pitstop-reaper", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.reap_once()
            except Exception:  # noqa: BLE001 - a failing scan must not end pitstop; the next one may work
                continue

    def stop(self) -> None:
        self._stop.set()


@contextlib.contextmanager
def reaping(own: Callable[[], Collection[int]]) -> Iterator[Reaper]:
    """A `Reaper` scanning while the block runs, where orphans can come to this process (else it does nothing)."""
    reaper = Reaper(own).start()
    try:
        yield reaper
    finally:
        reaper.stop()


__all__ = ["FORWARDED", "STOPPING", "Forwarder", "Reaper", "become_subreaper", "forwarding", "reaping", "signal_names",
           "terminal_foreground"]
