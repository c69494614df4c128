"""Provides profiler windows: torch.profiler over K steps, scheduled or on demand, aggregated off-thread.

The agent calls `on_step(i)` on the training thread after each step, having
first read `mark` for that step, and `on_eval()` when an evaluation pass
begins. A window starts a FRESH `torch.profiler.profile` at a step boundary and
stops it K steps later (one boundary later still, so that the last step's
ranges close: `_advance`), both on the training thread (that is where torch
wants them); the rest (reading Kineto's raw events, the tables, the optional Chrome
trace) runs on one named daemon thread, one window at a time, with a finer GIL
switch interval and the cyclic GC paused (`_gentle`) so the training thread is
not starved of the GIL meanwhile. The raw trace never enters the event stream:
only a `ProfileWindow` of aggregated tables does, covering exactly the steps it
names (`_aggregate.within_steps`).

Marks, for the steps a window disturbs (kept out of step statistics):
"profiled" for the steps inside it, "after-profile" from the boundary where
its last step ended until `SETTLE_STEPS` steps after the one in which its
tables came out. An evaluation pass ends a window at the last completed step
(`on_eval`), and so does `close()`: a window never spans either.

The training run comes first: every failure is caught, reported once through
`note("warn", ...)`, and switches the windows off.
"""

from __future__ import annotations

import contextlib
import gc
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pitstop.events import ProfileWindow
from pitstop.profiling import _aggregate, _kineto

Emit = Callable[[Any], None]
Note = Callable[[str, str], None]

_NEVER = sys.maxsize
PROFILED = "profiled"
AFTER = "after-profile"
# Whole steps still marked "after-profile" once a window's tables are built:
# the two after it ran 3% and 2% slower (median of 151 windows), the third as
# the rest. docs/internals.md, "Profiler windows", has the measurement.
SETTLE_STEPS = 2
# A window ended by an evaluation pass before any step completed starts again at the next step;
# after this many in a row the loop evaluates in every step (pytorch/examples' GCN): windows then
# run through the evaluations, whose ops their tables count too (said once in a note), where no
# window had been recorded at all.
EVAL_DISCARDS_MAX = 2
_SWITCH_INTERVAL_S = 0.0005  # while aggregating: see _gentle
_GC_PAUSE_MAX_S = 5.0  # the cyclic GC is never paused longer than this
# close() waits this long for the last window's tables (~15 ms for 3,000 events;
# a big model's window has tens of times more).
_CLOSE_WAIT_S = 15.0


@dataclass
class _Open:
    """The window being recorded on the training thread."""

    prof: Any
    step_start: int  # first step inside the window
    trigger: str
    t0: float  # perf_counter at start
    marker: Any  # the open record_function("ProfilerStep#N"), or None
    current: int = 0  # the step being recorded now
    step_end: int | None = None  # set when the last step ended: the window is closing (see `_advance`)
    duration_s: float = 0.0  # from the start to the end of the last step
    quiet: bool = False  # record functions switched off on the training thread (the closing step)


@dataclass
class _Job:
    """A stopped window waiting for the processing thread."""

    prof: Any
    step_start: int
    step_end: int
    trigger: str
    duration_s: float
    t: float


def _default_factory(device_type: str) -> Callable[[], Any]:
    def make() -> Any:
        import torch.profiler as tp

        acts = [tp.ProfilerActivity.CPU]
        if device_type == "cuda":
            acts.append(tp.ProfilerActivity.CUDA)
        return tp.profile(activities=acts, record_shapes=False, profile_memory=False, with_stack=False)

    return make


def _other_profiler_active() -> bool:
    """A profiler someone else started (the user's own torch.profiler): never fight it."""
    try:
        import torch

        return bool(torch._C._autograd._profiler_enabled())
    except Exception:
        return False


@contextlib.contextmanager
def _gentle() -> Iterator[None]:
    """While a window is aggregated: a finer GIL switch interval and no cyclic GC.

    Made when torch's own event list was built here (~60-310 ms of Python for
    3,000 events on the 2-core VM): against a thread that runs Python without
    pause, the training thread waited up to the switch interval (5 ms) for the
    GIL after every torch op it called (190 ms steps); at 0.5 ms the two
    interleaved, and the thousands of objects torch created no longer set off
    a full collection of the heap (~150 ms, GIL held). Reading Kineto's raw
    events takes ~15 ms, and 0.1, 0.5 and 5 ms intervals now cost a window the
    same (51-54 ms, docs/internals.md); kept, as cheap insurance for windows of
    big models. Both settings are process-wide: each is put back as found,
    unless the script changed it meanwhile; collection is never paused longer
    than `_GC_PAUSE_MAX_S`.
    """
    old_interval = sys.getswitchinterval()
    interval = min(old_interval, _SWITCH_INTERVAL_S)
    sys.setswitchinterval(interval)
    collecting = gc.isenabled()
    gc.disable()
    guard = None
    if collecting:  # however long torch takes, collection resumes after a few seconds
        guard = threading.Timer(_GC_PAUSE_MAX_S, gc.enable)
        guard.daemon = True
        guard.start()
    try:
        yield
    finally:
        if guard is not None:
            guard.cancel()
        if collecting:
            gc.enable()
        if sys.getswitchinterval() == interval:
            sys.setswitchinterval(old_interval)


def _record_functions(enabled: bool) -> bool:
    """Switch torch's record functions on or off for this thread; False where this torch cannot."""
    try:
        import torch

        torch._C._autograd._enable_record_function(enabled)
        return True
    except Exception:
        return False


def _marker(step: int) -> Any:
    """Open a ProfilerStep#N annotation, as torch.profiler.profile.step() does, so the
    trace shows step boundaries and the aggregation finds the training thread."""
    from torch.autograd.profiler import record_function

    rf = record_function(f"ProfilerStep#{step}")
    rf.__enter__()
    return rf


class ProfilerWindows:
    """Scheduled and on-demand torch.profiler windows, one `ProfileWindow` event per window."""

    def __init__(
        self,
        every: int | None,
        active: int,
        first: int,
        trace_dir: str | os.PathLike[str] | None,
        device_type: str,
        emit: Emit,
        note: Note,
        *,
        top: int = 25,
        profiler_factory: Callable[[], Any] | None = None,
    ) -> None:
        self.every = every if every and every > 0 else None
        self.active = max(1, int(active))
        self.first = max(0, int(first))
        self.trace_dir = Path(trace_dir) if trace_dir is not None else None
        self.device = "cuda" if device_type == "cuda" else "cpu"
        self.top = top
        self._emit = emit
        self._note = note
        self._factory = profiler_factory or _default_factory(self.device)

        # Hot-path state: on_step returns at once while step < _wake (one compare).
        # _wake is _next_start when idle, 0 while anything is under way (a window
        # open, tables being built, steps to mark, a demand).
        self._next_start = self.first if self.every is not None else _NEVER
        self._wake = self._next_start
        self._demand = False
        self._demand_trigger: str | None = None  # what asked for the pending demand ("demand", "slowdown")
        self._open: _Open | None = None
        self._off: str | None = None  # the reason the windows are off
        # The mark of the step now running, read by the agent at its end before
        # on_step: None, PROFILED or AFTER. Written on the training thread only.
        self.mark: str | None = None
        self._settle_end = 0  # steps before this one are still "after-profile"
        self._processed = False  # set by the processing thread when a window's tables are out

        self.windows = 0  # windows emitted
        self.skipped = 0  # scheduled windows skipped: the previous one was still being processed
        self.discarded = 0  # windows ended by an evaluation pass before any step completed
        self._discards_in_row = 0  # ...since the last window that recorded a step (EVAL_DISCARDS_MAX)
        self._through = False  # the open window ran on through an evaluation pass
        self._noted: set[str] = set()

        self._cv = threading.Condition()
        self._job: _Job | None = None
        self._busy = False  # a job is queued or being processed
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------ training thread

    @property
    def idle(self) -> bool:
        """No window open, no tables being built, no steps to mark: nothing happens before `wake_step`."""
        return self._open is None and not self._busy and self.mark is None and not self._demand

    @property
    def wake_step(self) -> int:
        """The first step whose `on_step` may do anything (0 while anything is under way)."""
        return self._wake

    def on_step(self, step: int) -> None:
        """Call right after step `step` (0-based) ended, after reading `mark`. One compare when idle."""
        if step < self._wake:
            return
        if self._off is not None or self._closed:
            if self._open is not None:
                self._abort()  # switched off by the processing thread mid-window
            self.mark = None
            self._wake = _NEVER
            return
        try:
            if self._open is not None:
                self._advance(step)
            else:
                self._between(step)
        except Exception as err:  # never into the training loop
            self._fail("profiler window failed", err)
        self._rearm()

    def on_eval(self) -> None:
        """An evaluation pass began in the step now running (training thread): end an open
        window at the last completed step, or discard it if none completed. Never raises."""
        opened = self._open
        if opened is None or self._off is not None or self._closed:
            return
        if self._discards_in_row >= EVAL_DISCARDS_MAX:
            self._note_once("eval-each-step", "warn",
                            f"{EVAL_DISCARDS_MAX} profiler windows in a row ended at an evaluation pass before "
                            "any step completed: every step evaluates here, so windows now run through the "
                            "evaluations and their op tables count its ops too")
            self._through = True
            return
        try:  # in the closing step every named step has completed
            self._finish(opened.step_end if opened.step_end is not None else opened.current)
        except Exception as err:
            self._fail("profiler window failed at an evaluation pass", err)
        self._rearm()

    def _rearm(self) -> None:
        idle = self._open is None and not self._busy and self.mark is None
        self._wake = self._next_start if idle and self._off is None else 0
        if self._demand:  # request() sets _demand then _wake: a demand is never lost
            self._wake = 0

    def _between(self, step: int) -> None:
        """No window open: mark the steps a finished window still disturbs, maybe start one."""
        if self._busy:
            self.mark = AFTER  # its tables are being built during the next step
        else:
            if self._processed:  # set before _busy was cleared
                self._processed = False
                self._settle_end = step + SETTLE_STEPS
            self.mark = AFTER if step < self._settle_end else None
        self._maybe_start(step)

    def _maybe_start(self, step: int) -> None:
        scheduled = step >= self._next_start
        if not scheduled and not self._demand:
            return
        if scheduled:
            while self._next_start <= step:  # windows missed while busy are not made up
                self._next_start += self.every or _NEVER
        if self._busy:
            # One window is processed at a time: skip a scheduled one, keep a demand pending.
            if scheduled and not self._demand:
                self.skipped += 1
                self._note_once(
                    "skip",
                    "info",
                    f"profiler window after step {step} skipped: the previous window is still "
                    "being aggregated (later skips are counted, not reported)",
                )
            return
        if _other_profiler_active():
            if scheduled and not self._demand:
                self.skipped += 1
            # Said on screen (a warning): accelerate's profiler example ran its own all along, and the
            # headless summary had no window and no word of why.
            self._note_once("foreign", "warn", "another torch profiler is active (the script's own?); pitstop's "
                            "profiler windows wait for it: no kernel or op tables until it stops")
            return
        trigger = (self._demand_trigger or "demand") if self._demand else "schedule"
        self._demand = False
        self._demand_trigger = None
        prof = self._factory()
        prof.start()
        opened = _Open(prof, step + 1, trigger, time.perf_counter(), None, step + 1)
        self._open = opened
        self.mark = PROFILED
        opened.marker = _marker(step + 1)

    def _advance(self, step: int) -> None:
        opened = self._open
        assert opened is not None
        if opened.step_end is not None:  # the closing step ended: stop now
            self._finish(opened.step_end)
            return
        if opened.marker is not None:
            opened.marker.__exit__(None, None, None)
            opened.marker = None
        if step + 1 < opened.step_start + self.active:
            opened.current = step + 1
            opened.marker = _marker(step + 1)
            return
        # The last step ended, but not every range it opened: the step boundary is
        # the optimizer's post-hook, which runs inside torch's "Optimizer.step#"
        # range, and a range still open when the profiler stops is lost (every
        # window showed one optimizer step fewer than it had steps). So the
        # profiler stops at the next boundary, with torch's record functions off
        # on this thread meanwhile: ranges already open still end and are
        # recorded, nothing new is, and `within_steps` drops what other threads add.
        opened.step_end = step + 1
        opened.duration_s = time.perf_counter() - opened.t0
        opened.quiet = _record_functions(False)
        if not opened.quiet:
            self._finish(step + 1)
            return
        self.mark = AFTER

    def _finish(self, step_end: int) -> None:
        """Stop the open profiler; hand its steps step_start..step_end-1 to the processing thread."""
        opened = self._open
        assert opened is not None
        self._open = None
        self.mark = AFTER  # the stop (and the tables, if any) land on the next step
        try:
            if opened.marker is not None:
                opened.marker.__exit__(None, None, None)
                opened.marker = None
            opened.prof.stop()  # on CUDA this synchronizes once per window (torch does it)
        finally:
            if opened.quiet:
                _record_functions(True)
        if step_end <= opened.step_start:
            self.discarded += 1  # no step completed inside the window: nothing to report
            self._discards_in_row += 1
            self._next_start = min(self._next_start, opened.step_start)  # again once this step ends
            return
        if not self._through:  # (one that ran through evaluations: the loop still evaluates every step)
            self._discards_in_row = 0
        self._through = False
        if opened.step_end is None:
            opened.duration_s = time.perf_counter() - opened.t0
        job = _Job(opened.prof, opened.step_start, step_end, opened.trigger, opened.duration_s, time.time())
        self._submit(job)

    def request(self, trigger: str = "demand") -> str:
        """Profile the next `active` steps now ("demand", or "slowdown" from the stall watch); thread-safe.
        Returns a reply for a person."""
        if self._off is not None:
            return f"profiler windows are off: {self._off}"
        if self._closed:
            return "profiler windows are closed"
        opened = self._open
        if opened is not None:
            return f"a profiler window is already recording (from step {opened.step_start})"
        self._demand_trigger = trigger
        self._demand = True  # bool and int stores are atomic under the GIL; on_step reads them
        self._wake = 0
        return f"profiling the next {self.active} steps"

    def close(self, timeout: float = _CLOSE_WAIT_S) -> None:
        """Stop an open window (reporting the steps it completed), wait for processing; idempotent.

        Call it on the training thread, as the agent does at exit: a window in its
        closing step switched record functions off on that thread, and only a call
        there switches them back on."""
        if self._closed:
            return
        try:
            opened = self._open
            if opened is not None and self._off is None:
                # Whatever ran after the last step (an evaluation, the end of the script) is not a step.
                self._finish(opened.step_end if opened.step_end is not None else opened.current)
        except Exception as err:
            self._fail("profiler window failed at close", err)
        self._closed = True
        self._next_start = _NEVER
        self._wake = _NEVER
        self._demand = False
        self.mark = None
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    # ------------------------------------------------------------ processing thread

    def _submit(self, job: _Job) -> None:
        with self._cv:
            self._job = job
            self._busy = True
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pitstop-profiler", daemon=True)
                self._thread.start()
            self._cv.notify_all()

    def _run(self) -> None:
        while True:
            with self._cv:
                while self._job is None and not self._stopping:
                    self._cv.wait()
                job, self._job = self._job, None
            if job is None:
                return
            try:
                self._process(job)
            except Exception as err:
                self._fail("profiler window aggregation failed", err, training=False)
            finally:
                job = None  # drop the profiler before waiting for the next one
                with self._cv:
                    self._processed = True  # before _busy: see _between
                    self._busy = self._job is not None
                    self._cv.notify_all()

    def _process(self, job: _Job) -> None:
        with _gentle():
            self._process_job(job)

    def _process_job(self, job: _Job) -> None:
        prof = job.prof
        job.prof = None
        trace_path = self._export(prof, job.step_start)
        use_device = self.device == "cuda"
        try:
            raw = _kineto.raw_events(prof)
            if raw is not None:
                evs = _kineto.read(raw[0], use_device, raw[1])
            else:  # a torch without Kineto results: its own (slower) event list
                events = prof.events()
                try:
                    evs = _aggregate.extract(events, use_device=use_device)
                finally:
                    _aggregate.release(events)
                    del events
        finally:
            raw = None
            self._drop(prof)
            del prof
        evs = _aggregate.within_steps(evs, job.step_start, job.step_end)
        tables = _aggregate.aggregate(evs, steps=job.step_end - job.step_start, device=self.device, top=self.top)
        if tables.copies is not None and tables.copies.h2d_count + tables.copies.d2h_count and not tables.copy_bytes_known:
            self._note_once("bytes", "info", "this torch reports no memcpy sizes: copy bytes show as 0")
        window = ProfileWindow(
            t=job.t,
            step_start=job.step_start,
            step_end=job.step_end,
            device=self.device,
            trigger=job.trigger,
            duration_s=round(job.duration_s, 6),
            ops=tables.ops,
            kernels=tables.kernels,
            kernels_unavailable=tables.kernels_unavailable,
            copies=tables.copies,
            syncs_per_step=tables.syncs_per_step,
            phases_ms=tables.phases_ms,
            collective_ms=tables.collective_ms,
            collective_overlap=tables.collective_overlap,
            trace_path=trace_path,
        )
        self.windows += 1
        self._emit(window)

    def _export(self, prof: Any, step_start: int) -> str | None:
        if self.trace_dir is None:
            return None
        path = self.trace_dir / f"window-{step_start}-{os.getpid()}.json"
        try:
            self.trace_dir.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(path))
        except Exception as err:
            # A full disk must not cost the tables: stop writing traces, keep the windows.
            self.trace_dir = None
            self._note_once("trace", "warn", f"profiler traces off: cannot write {path}: {type(err).__name__}: {err}")
            return None
        return str(path)

    @staticmethod
    def _drop(prof: Any) -> None:
        """Free the profiler now, by refcount, rather than at the next full GC.

        torch's `profile` objects sit in reference cycles (their action map holds
        bound methods of themselves), so a stopped profiler lived on until a
        full collection, and while it lived the training steps ran ~2-5% slower
        (measured: 50-step blocks before vs after one window, in fresh
        processes; gone when the objects were collected). Emptying both objects'
        attributes breaks every cycle through them: nothing is left for the GC.
        """
        inner = getattr(prof, "profiler", None)
        for obj in (inner, prof):
            if obj is None:
                continue
            try:
                vars(obj).clear()
            except Exception:
                pass

    # ------------------------------------------------------------ failure

    def _note_once(self, key: str, level: str, message: str) -> None:
        if key in self._noted:
            return
        self._noted.add(key)
        try:
            self._note(level, message)
        except Exception:
            pass

    def _abort(self) -> None:
        """Stop the open profiler without reporting it (training thread only)."""
        opened, self._open = self._open, None
        self.mark = None
        if opened is None:
            return
        try:
            if opened.marker is not None:
                opened.marker.__exit__(None, None, None)
            opened.prof.stop()
        except Exception:
            pass
        if opened.quiet:
            _record_functions(True)

    def _fail(self, what: str, err: BaseException, *, training: bool = True) -> None:
        """Switch the windows off and say so once. Only the training thread may stop
        the profiler it started; the processing thread leaves that to the next on_step."""
        reason = f"{what}: {type(err).__name__}: {err}"
        first = self._off is None
        self._off = reason
        self._next_start = _NEVER
        self._demand = False
        if training:
            self._abort()
        if first:
            self._note_once("off", "warn", f"profiler windows off: {reason}")
