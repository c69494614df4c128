"""Provides the agent's stall watch: a process that stops making progress says so, with where it waits.

After the first step, no progress for longer than max(60 s, 20x the p95
step) (or `pitstop run --stall-after SECONDS`) is a stall. Progress is a step,
and also a batch fetched, a backward, a gradient or an evaluation forward: an
evaluation pass between steps fetches batches and runs forwards, so it is not
called stuck while it moves; while one is in progress the threshold is 20x. Before the first step nothing is a stall (a slow
first step is the blind watch's and the first-step progress line's), but a
process with no step and no progress at all for max(FIRST_STEP_S, the
threshold) since torch was imported (a dataset's `__init__` on a dead mount)
says where it waits: a `Stall` with `first` set, worded as a wait, not as
stuck (`FirstStepWait`). The
watch runs on its own named daemon thread, never the training thread, ticks
once a second by deadline and stops on an Event; on a stall it reads the
stacks (`waits.py`) and sends a `Stall` event: "start" with the stacks,
"update" with fresh ones every UPDATE_S while it lasts, "end" when progress
resumes (how long it lasted), "exit" when the process ends while stuck.

While the training thread holds the GIL in native code no thread of the
process runs, this one included: such a hang is read from outside, by the
front that reads this agent's stream (`_silence.py`: it hears nothing) and by
`pitstop stacks PID` (py-spy). When this thread runs again after such a gap,
it does not call a stall at once: the stacks it could read then are not where
the process was stuck, and the front already read those.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
import time
from collections import deque
from typing import Any

from pitstop.events import Stall, ThreadStack

# 60 s: a checkpoint save, a slow epoch boundary or a first evaluation batch on a loaded machine
# stays under it; 20x the p95 step covers runs whose steps are already slow (a 10 s step).
STALL_MIN_S = 60.0
STALL_P95_TIMES = 20.0
TICK_S = 1.0
# Fresh stacks every 3 minutes while a stall lasts: a job that moves from one wait to another
# (a retry loop, a timeout that fires) shows where it waits now.
UPDATE_S = 180.0
# Step walls kept for the p95: the recent 200 training steps.
P95_STEPS = 200
# While an evaluation pass is in progress (forwards without grad since the last step) the threshold is
# 20x: pytorch/examples' mnist evaluates batches of 1,000 with no step between, and one such forward
# took 7 s on a loaded 2-core machine (3.5x its 2 s training step): with `--stall-after 3` every eval
# batch read as a stall that began and ended. A hung evaluation is still one, after 20 min by default.
EVAL_TIMES = 20.0
# Before the first step, no progress at all for 5 minutes (or the stall threshold where it is longer):
# a first step compiles, downloads or builds a model for long (HF Trainer's compiled first step: 89 s,
# time_sequence_prediction's: over 2 minutes on a loaded 2-core machine), and moves no counter meanwhile;
# 5 minutes leaves those room and still comes long before a person gives up on a silent job.
# PITSTOP_FIRST_STEP_S changes it (the tests give 3 s).
FIRST_STEP_S = float(os.environ.get("PITSTOP_FIRST_STEP_S", "300"))
# A tick this late (1.5 s past its 1 s) means this thread could not run: a thread held the GIL (the front
# reads that from outside), or the process was stopped. A thread that may run gets the GIL back within the
# interpreter's switch interval (5 ms) and a core within the scheduler's latency (a 1 s tick beside two CPU
# hogs on 2 cores, its training thread in matmuls and pure-Python loops, ran at most 2.6 ms late in 26); a ctypes.PyDLL call kept it from this one for as long as it ran. At 5 s, a GIL held
# 4 s (the stall test beside two hogs, then Ctrl-C) went unnoticed: when the GIL came back the watch
# called a stall of its own and read the stacks of the exit that was then under way, and the summary
# named `_ModuleLock.acquire` in the exit hook instead of the C call the front had read.
STARVED_S = 2.5


def _p95(values: list[float]) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]


class StallDetector:
    """The decision alone, without threads or clocks: fed steps and progress, asked at each tick."""

    def __init__(self, after_s: float | None = None) -> None:
        self.after_s = after_s
        self.walls: deque[float] = deque(maxlen=P95_STEPS)
        self.last_step: int | None = None
        self.progress_at: float | None = None  # when progress was last seen (monotonic)
        self._key: Any = None
        self.since: float | None = None  # stall start (the last progress), while stalled
        self.stalled = False
        self.next_update = 0.0

    def threshold(self) -> float:
        """max(60 s, 20x the p95 training step), or --stall-after."""
        if self.after_s is not None:
            return self.after_s
        p95 = _p95(list(self.walls))
        return max(STALL_MIN_S, STALL_P95_TIMES * p95) if p95 is not None else STALL_MIN_S

    def step(self, index: int, wall: float, training: bool) -> None:
        """A step event (the writer thread's tap): the p95 reads training steps only."""
        self.last_step = index
        if training:
            self.walls.append(wall)

    def starved(self, now: float) -> None:
        """This thread could not run until `now`: the idle clock starts again here (no stall is called for a
        time it did not see; a stall already open goes on)."""
        if not self.stalled and self.progress_at is not None:
            self.progress_at = now

    def steps(self, last: int, walls: list[float]) -> None:
        """Steps up to index `last`, the training ones' times in order (the writer thread's runs of steps)."""
        self.last_step = last
        self.walls.extend(walls)

    def check(self, key: Any, now: float, evaluating: bool = False) -> str | None:
        """At a tick with the progress counters `key`: "start", "update", "end" or None.

        Nothing before the first step: `key` None. `evaluating`: an evaluation pass is in progress
        (EVAL_TIMES the threshold)."""
        if key is None:
            return None
        if key != self._key or self.progress_at is None:
            self._key = key
            moved = self.progress_at is not None
            self.progress_at = now
            if self.stalled and moved:
                self.stalled = False
                return "end"
            return None
        over = now - self.progress_at > self.threshold() * (EVAL_TIMES if evaluating else 1.0)
        word, self.next_update = _speak(self.stalled, over, now, self.next_update)
        if word == "start":
            self.stalled = True
            self.since = self.progress_at
        return word


def _speak(open_: bool, over: bool, now: float, next_update: float) -> tuple[str | None, float]:
    """What a wait says at a tick, and when it speaks next: "start" when it goes over its threshold,
    "update" every UPDATE_S while it lasts (fresh stacks), None otherwise; its end is its owner's to say."""
    if not open_:
        return ("start", now + UPDATE_S) if over else (None, next_update)
    if now >= next_update:
        return "update", now + UPDATE_S
    return None, next_update


class FirstStepWait:
    """Before the first step: no progress at all (no batch, backward, gradient) for max(FIRST_STEP_S,
    --stall-after) since the agent started is a wait worth saying; "start", "update", "end" (the first step
    or progress came) or None, as `StallDetector.check`; once a step ended it never speaks again."""

    def __init__(self, started: float, after_s: float | None = None, first_s: float | None = None) -> None:
        self.after_s = max(FIRST_STEP_S if first_s is None else first_s, after_s or 0.0)
        self.progress_at = started
        self._key: Any = None
        self.waiting = False
        self.done = False
        self.next_update = 0.0

    def threshold(self) -> float:
        return self.after_s

    def starved(self, now: float) -> None:
        """As `StallDetector.starved`: no wait is called for a time this thread did not see."""
        if not self.waiting:
            self.progress_at = now

    def check(self, key: Any, stepped: bool, now: float) -> str | None:
        """At a tick, before or at the first step: `key` the progress counters, `stepped` a step ended."""
        if self.done:
            return None
        if stepped:
            self.done = True
            return "end" if self.waiting else None
        if key != self._key:
            first = self._key is None
            self._key = key
            if not first:  # a batch, a backward: it moves (the first read is the baseline, not progress)
                self.progress_at = now
                if self.waiting:
                    self.waiting = False
                    return "end"
                return None
        word, self.next_update = _speak(self.waiting, now - self.progress_at > self.after_s, now, self.next_update)
        if word == "start":
            self.waiting = True
        return word


class StallWatch:
    """The detector on its thread, fed by the agent (see module doc)."""

    def __init__(self, agent: Any, after_s: float | None = None) -> None:
        self.agent = agent
        self.detector = StallDetector(after_s)
        from pitstop.profiling._slowwatch import SlowdownDetector

        self.slowdown = SlowdownDetector()
        self.first = FirstStepWait(time.monotonic(), after_s)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._excepthook: Any = sys.excepthook
        self._ticked: float | None = None  # when the last tick ran (monotonic)

    def start(self) -> None:
        self.agent.step_taps.append(self.feed_steps)
        # A worker killed (SIGKILL, the OOM killer) makes torch raise in the training thread at once,
        # and multiprocessing's exit reaps it before the agent's own exit hook runs: the uncaught
        # exception is the moment its zombie can still be read.
        self._excepthook = sys.excepthook
        sys.excepthook = self._on_uncaught
        self._thread = threading.Thread(target=self._loop, name="pitstop-stall", daemon=True)
        self._thread.start()

    def feed_steps(self, columns: dict[str, list[Any]]) -> None:
        """The writer thread's step tap (`Agent.step_taps`): a run of steps as columns; steps feed the p95."""
        walls = [wall for wall, mark in zip(columns["wall"], columns["mark"]) if mark is None]
        self.detector.steps(columns["step"][-1], walls)
        self.slowdown.steps(walls)

    def key(self) -> Any:
        """What moves while the training thread works; None before the first step."""
        clock = self.agent.clock
        if clock.index < 1:
            return None
        return (clock.index, clock.batches, clock.backwards, clock.grads, clock.closures,
                getattr(clock, "_seg_n", 0), len(self.agent.stamps))

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += TICK_S
            self._stop.wait(max(0.0, next_t - time.monotonic()))
            if self._stop.is_set():
                break
            try:
                self.tick(time.monotonic())
            except Exception as err:  # never into training: this part goes off, loudly, once
                self.agent.note("warn", "stall", f"stall watch off: {type(err).__name__}: {err}")
                return

    def tick(self, now: float) -> None:
        agent = self.agent
        if agent.disabled or agent.finished:
            return
        if self._ticked is not None and now - self._ticked > STARVED_S:
            self.detector.starved(now)
            self.first.starved(now)
        self._ticked = now
        if agent.worker_pids:
            note_dead_workers(agent)
        if self.slowdown.check(now):
            from pitstop.profiling._slowwatch import capture

            capture(agent, self.slowdown, self.detector.last_step)
        if not self.first.done:
            self._first_tick(now)
        what = self.detector.check(self.key(), now, getattr(agent.clock, "_seg_t0", None) is not None)
        if what is None:
            return
        d = self.detector
        since = now - (d.since if d.since is not None else now)
        step = max(0, agent.clock.index - 1) if d.last_step is None else d.last_step
        if what == "end":
            lasted = (d.progress_at or now) - (d.since or now)
            agent.emit(Stall(t=time.time(), phase="end", step=step, since_s=lasted, threshold_s=d.threshold(),
                             lasted_s=lasted))
            return
        stacks, notes = self._stacks()
        agent.emit(Stall(t=time.time(), phase=what, step=step, since_s=since, threshold_s=d.threshold(),
                         stacks=stacks, notes=notes, flight=self._flight()))

    def first_key(self) -> Any:
        """What moves before the first step (`key` without the step index), and the modules imported: a
        script's set-up imports for long (building an SGD imported torch._dynamo's 64 frames deep of imports
        for more than 5 s on a loaded 2-core machine), and an import under way is not a wait."""
        clock = self.agent.clock
        return (clock.batches, clock.backwards, clock.grads, clock.closures, getattr(clock, "_seg_n", 0),
                len(self.agent.stamps), len(sys.modules))

    def _first_tick(self, now: float) -> None:
        """Before the first step: a process that has not moved for long says where it waits (`FirstStepWait`);
        a dormant agent (a child that may never train) and a parent whose children train say nothing."""
        agent = self.agent
        if agent.dormant:
            return
        f = self.first
        if agent.hooks is None:
            # The agent starts inside `import torch`, which took more than 3 s on a loaded 2-core machine:
            # the clock starts once torch is imported and hooked (the script's own set-up from there).
            f.progress_at = now
            return
        if not f.waiting and now - f.progress_at > f.threshold():
            from pitstop.profiling.sampler import compiling

            if compiling():  # torch.compile's first step: it works, and moves no counter until it ends
                f.progress_at = now
        what = f.check(self.first_key(), agent.clock.index >= 1, now)
        if what is None:
            return
        since = now - f.progress_at
        if what == "end":
            agent.emit(Stall(t=time.time(), phase="end", step=0, since_s=since, threshold_s=f.threshold(),
                             lasted_s=since, first=True))
            return
        if what == "start" and _children_train(agent):
            f.done = True  # its children's records are where its training is (a hogwild parent waits in join)
            return
        stacks, notes = self._stacks()
        agent.emit(Stall(t=time.time(), phase=what, step=0, since_s=since, threshold_s=f.threshold(),
                         stacks=stacks, notes=notes, first=True))

    def _stacks(self) -> tuple[list[ThreadStack], list[str]]:
        from pitstop.profiling import waits

        try:
            return waits.take(self.agent.pid, list(self.agent.worker_pids))
        except Exception as err:
            return [], [f"stacks not taken: {type(err).__name__}: {err}"]

    def _on_uncaught(self, kind: Any, value: Any, tb: Any) -> None:
        try:
            note_dead_workers(self.agent)
            note_worker_error(self.agent, value)
        except Exception:
            pass
        self._excepthook(kind, value, tb)

    def release(self) -> None:
        """sys.excepthook is the script's again, where nothing wrapped ours since (the exit watch, which
        wrapped it, gives its own back first)."""
        if sys.excepthook == self._on_uncaught:
            sys.excepthook = self._excepthook

    @staticmethod
    def _flight() -> list[str]:
        from pitstop.profiling import _flight

        try:
            return _flight.take()
        except Exception as err:  # noqa: BLE001 - said in the event
            return [f"flight recorder: {type(err).__name__}: {err}"]

    def stop(self) -> None:
        """At the agent's stop: the thread ends; a stall still going is closed with "exit" (its length)."""
        self._stop.set()
        t = self._thread
        if t is not None and t is not threading.current_thread():
            t.join(timeout=2.0)
        d = self.detector
        if d.stalled and d.since is not None:
            lasted = time.monotonic() - d.since
            step = d.last_step if d.last_step is not None else 0
            self.agent.emit(Stall(t=time.time(), phase="exit", step=step, since_s=lasted,
                                  threshold_s=d.threshold(), lasted_s=lasted))
            d.stalled = False
        f = self.first
        if f.waiting and not f.done:
            lasted = time.monotonic() - f.progress_at
            self.agent.emit(Stall(t=time.time(), phase="exit", step=0, since_s=lasted, threshold_s=f.threshold(),
                                  lasted_s=lasted, first=True))
            f.waiting = False


def _children_train(agent: Any) -> bool:
    """Children of this process record steps of their own (hogwild's workers, a spawned DDP job's ranks)."""
    from pitstop.profiling._blind import _recorded_pids

    return any(parent == agent.pid for parent in _recorded_pids(agent.record_path).values())


def note_dead_workers(agent: Any) -> None:
    """Say which DataLoader worker died, and how (a zombie's status in /proc), once each."""
    from pitstop.profiling.waits import death_text, proc_state

    for pid in list(agent.worker_pids):
        state, _, status = proc_state(pid)
        if state == "Z":
            agent.note("error", "dataloader", f"DataLoader worker {pid} died ({death_text(status)})",
                       once=f"worker-dead:{pid}")


_KILLED = re.compile(r"DataLoader worker \(pid (\d+)\) is killed by signal: ([^.]+)")
_EXITED = re.compile(r"DataLoader worker \(pid\(s\) ([\d, ]+)\) exited unexpectedly")


def _signal_named(text: str) -> str:
    """torch's strsignal text ("Killed") as the signal's name (SIGKILL), where one matches."""
    for sig in signal.Signals:
        try:
            if signal.strsignal(sig) == text.strip():
                return sig.name
        except ValueError:
            continue
    return f"signal: {text.strip()}"


def note_worker_error(agent: Any, error: BaseException | None) -> None:
    """torch's own watchdog reaped the dead worker before raising: its exception (and the one it was raised
    from) names the worker and the signal; said as the same note as a zombie read in /proc."""
    chain: list[str] = []
    while error is not None and len(chain) < 5:
        chain.append(str(error))
        error = error.__cause__ or error.__context__
    for text in chain:  # "killed by signal" first: it says more than "exited unexpectedly"
        for m in _KILLED.finditer(text):
            agent.note("error", "dataloader", f"DataLoader worker {m.group(1)} died (killed by "
                       f"{_signal_named(m.group(2))})", once=f"worker-dead:{m.group(1)}")
    for text in chain:
        for m in _EXITED.finditer(text):
            for pid in m.group(1).replace(" ", "").split(","):
                agent.note("error", "dataloader", f"DataLoader worker {pid} died (exited unexpectedly)",
                           once=f"worker-dead:{pid}")
