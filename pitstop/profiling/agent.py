"""Provides the in-process agent: step clock, bounded event queue, writer, lifecycle.

Construct, then start (coverage.py's `Coverage()` then `start()`): `Agent()`
only stores its settings and builds pure objects (the queue, the step clock);
`start()` opens the record, binds the socket, starts the writer and sampler
threads and chains the exit hooks; `stop()` ends the record and gives all of
it back, and may be called any number of times. The bootstrap does both in
the main process of every rank (`start_from_env`). Until torch is imported the
agent only holds its queue, writer thread and socket; `_hooks` installs the
torch hooks when torch finishes importing. On the training thread the hooks
stamp times and append them to a deque (`stamps`); the writer thread takes
them in (`_take_held`), runs the step clock, whose `_on_step` appends one
tuple per step to a queue that drops the oldest on overflow, builds the events
(steps, and the losses read on the CPU), does all encoding and I/O, and takes
the readings that need not be per step. The training thread runs the clock
itself where it must decide at once (`flush_stamps`, `may_batch`), and on CUDA
once a probe (`_cuda.PROBE_S`).

Every part fails closed: an error is logged once as a Note and that part
switches off; nothing raises into the training loop.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any

from pitstop.events import Event, Hello, Note, Step
from pitstop.profiling import (_children, _cuda, _ending, _losses, _plainsteps, _raydriver, _serving, _watch,
                               _writepass)
from pitstop.profiling._blind import BlindWatch
from pitstop.profiling._exits import ExitWatch
from pitstop.profiling._hello import env_int, job_identity, make_hello, ray_train_identity
from pitstop.profiling._hotflag import HotFlag
from pitstop.profiling._lastsignal import SignalTrace
from pitstop.profiling._ray import storage_record_base
from pitstop.profiling._stepevents import StepEvents
from pitstop.profiling.launch import SESSION_ENV, SessionSettings
from pitstop.profiling.phases import PhaseClock
from pitstop.profiling.record import RecordWriter, record_path_for
from pitstop.profiling.stepclock import StepClock

_perf = time.perf_counter

QUEUE_MAX = 65_536  # events held for the writer; ~20 s of a 1 kHz step loop with samples
LOSS_BATCH, LOSS_MAX_AGE_S = _losses.LOSS_BATCH, _losses.LOSS_MAX_AGE_S

_current: Agent | None = None


def current() -> Agent | None:
    """The agent of this process, if one started or waits for this process's first step (a child)."""
    return _current if _current is not None and (_current.dormant or not _current.disabled) else None


class Agent(HotFlag):  # (`disabled`, `batching` and the held counts keep the hooks' flag: `_hotflag.py`)
    """Everything pitstop runs inside one training process."""

    def __init__(self, settings: SessionSettings, reason: str = "", parent_pid: int | None = None) -> None:
        """Settings and pure objects only: nothing is opened, bound, started or replaced until `start()`."""
        self.settings = settings
        self.reason = reason  # the bootstrap's start decision (sitecustomize.decide)
        self.disabled = False
        # A child process (hogwild) is armed dormant and starts at its first step (_children.py).
        self.dormant = False
        self.parent_pid = parent_pid
        self._fork_hooked = False
        self._hooks_installing = False
        self.blind = BlindWatch()
        self.failed = False  # switched off by an internal error (fail): the record still gets its End
        self.pid = os.getpid()
        self.rank = env_int("RANK")
        # The job across nodes (jobenv.py); under `srun python train.py` a task's rank is SLURM_PROCID.
        self.job = job_identity()
        if self.rank is None and self.job is not None:
            self.rank = self.job.rank
        self._trial_steps = settings.trial_steps  # a tune trial ends the process after this many steps
        # Tuples: steps (`_on_step`); `_plainsteps.PlainRun`s: the plain steps of the writer's own takes.
        self._queue: deque[Any] = deque(maxlen=QUEUE_MAX)
        self.dropped = 0
        self._stop = threading.Event()
        self._noted: set[str] = set()
        self._write_lock = threading.Lock()
        # step clock (training thread; the hooks' held calls on the writer, under `_stamps_lock`).
        # Step 0 goes to `_on_first_step`, which hands the clock on to `_on_step`: no "is this
        # the first step?" test per step.
        self.clock = StepClock(self._on_first_step, self._on_eval, self._new_optimizer)
        self.first_backward = True  # the hooks hand backward calls to the clock directly after the first
        # Held hook calls (`flush_stamps`): the hooks append (clock method, its arguments) here
        # while `batching`; the writer thread takes them in at each pass (`_take_held`). The
        # hooks hold this deque: it is emptied, never replaced.
        self.stamps: deque[tuple[Any, ...]] = deque()
        self.batching = False
        self.step_open = False  # while batching: an optimizer step began and its post-hook has not come
        # The training thread's count (the writer's takes leave both alone): the clock's index when
        # it last took the calls in itself, and the primary optimizer's steps held since then.
        self.held_base = 0
        self.batched_steps = 0
        self._taking = False  # the held calls are being taken in (by either thread): no step is direct
        # On CUDA: when the hooks hand the next step to the training thread (a probe: `_cuda.time_next`),
        # and when the last one was. Never on the CPU.
        self.probe_due = float("inf")
        self._probed_at = float("-inf")
        # One taker at a time, the training thread or the writer. Reentrant: a signal handler's
        # `stop` (a child's SIGTERM) may run on the training thread while it takes calls in.
        self._stamps_lock = threading.RLock()
        self.phases = PhaseClock(self.clock, self.note)  # the steps' phases on CUDA (profiling/phases.py)
        self._steps = StepEvents(self.phases)  # the writer's side of the queue: steps and CPU losses to events
        self._model_optimizers = 0  # optimizers counted in the last Model event
        self._pending_losses: dict[int, Any] = {}  # step -> loss tensor (GPU), copied in batches (_losses.flush)
        # The second optimizer's losses (a GAN's G, `StepCut.other_loss`): step -> a float or tensor, read as above.
        self._pending_other: dict[int, Any] = {}
        # (steps, values, done event, parts per step, whose: 1 the step's, 2 the second optimizer's)
        self._loss_reads: list[tuple[list[int], Any, Any, Any, int]] = []
        self._last_loss_flush = _perf()
        self._rss_fd: int | None = None
        self._page = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
        self.rss_now: int | None = None  # refreshed by the writer thread; stamped on each step
        # CUDA memory (`_cuda.py`): the hooks set `cuda_device` (a CUDA build with a GPU),
        # the writer thread `cuda_mem` once the script itself initialised CUDA.
        self.cuda_device = False
        self.cuda_mem = False
        self.cuda_index: int | None = None  # the training thread's device, read at its first CUDA step
        self.cuda_allocated: int | None = None  # allocated bytes at the latest probe's step (training thread)
        self._mem_probe: float | None = None  # the probe whose step last read them (`_probed_at`)
        self.cuda_stats: dict[str, Any] = {}  # torch.cuda.memory_stats(cuda_index), writer thread, 2 Hz
        self.cuda_reserved: int | None = None
        self.cuda_peak: int | None = None
        self.torch: Any = None
        self.windows: Any = None
        self.hooks: Any = None
        self.worker_pids: dict[int, int | None] = {}  # DataLoader worker pid -> its DataLoader's id
        self.finished = False
        # Callables fed every batch of events on the writer thread (exporters); one
        # that raises is removed and noted.
        self.taps: list[Any] = []
        # Callables fed each run of steps as columns (`StepEvents.columns`: a list a `Step` field) on the
        # writer thread: the stall watch's. A `Step` built a step for a tap cost the writer ~2.5 us a step.
        self.step_taps: list[Any] = []
        # Made by start(): the record, the socket server, the threads.
        self.record_path: Path | None = None
        self.hello: Hello | None = None
        self.server: Any = None
        self.sampler: Any = None
        self._writer: RecordWriter | None = None
        self._writer_thread: threading.Thread | None = None
        self._started = False
        self._exits = ExitWatch()  # how the process ends (End.reason, End.exit_code)
        self.stallwatch: Any = None  # no progress for too long: a Stall event with the stacks (_stallwatch.py)
        self._last_signal = SignalTrace()  # a SIGTERM that ends it: the stacks beside the record

    def start(self) -> None:
        """Open the record, bind the socket, start the threads, chain the exit hooks; once.

        A record that cannot be created raises (the bootstrap says so in one line
        and the script runs without pitstop); every later part that fails is
        switched off with a Note and the rest goes on.
        """
        if self._started:
            return
        self._started = True
        settings = self.settings
        # A rank a script started itself (Lightning's DDP) has LOCAL_RANK but no RANK yet.
        named = self.rank if self.rank is not None else env_int("LOCAL_RANK")
        ranked = _children.distributed() if self.parent_pid is not None else None
        ray = ray_train_identity() if self.parent_pid is not None else None
        if ray is not None:  # a Ray Train worker: its run and world rank (its env may hold the driver's Slurm ids)
            self.job = ray
            if ranked is None and ray.rank is not None and ray.world_size:
                ranked = (ray.rank, ray.world_size)
        if self.parent_pid is not None:  # a child that trains: its own file, named with its rank, else its pid
            self.rank = named = ranked[0] if ranked is not None else None
        base = (storage_record_base(settings.session) if ray is not None else None) or settings.record
        self.record_path = record_path_for(base, named, self.pid)
        self._writer = RecordWriter(self.record_path)
        try:
            self._rss_fd = os.open("/proc/self/statm", os.O_RDONLY)
        except OSError:
            self._rss_fd = None
        self.rss_now = _writepass.rss(self)

        self.hello = hello = make_hello(self, ranked)
        self._writer.write(self.hello)
        if settings.socket:
            _serving.start_server(self, self.hello)
        self._writer_thread = threading.Thread(target=_writepass.loop, args=(self,), name="pitstop-writer", daemon=True)
        self._writer_thread.start()
        try:
            from pitstop.profiling.sampler import Sampler

            self.sampler = Sampler(self)
            self.sampler.start()
        except Exception as err:
            self.sampler = None
            self.note("warn", "sampler", f"sampler off: {err}")
        try:
            from pitstop.profiling._stallwatch import StallWatch

            self.stallwatch = StallWatch(self, settings.stall_after)
            self.stallwatch.start()
        except Exception as err:
            self.stallwatch = None
            self.note("warn", "stall", f"stall watch off: {err}")
        if settings.prometheus is not None and self.parent_pid is None:  # a child would take its parent's port
            try:
                from pitstop.profiling.prometheus import start_exporter

                start_exporter(self, settings.prometheus + (hello.local_rank or 0))
            except Exception as err:
                self.note("warn", "prometheus", f"metrics endpoint off: {err}")
        self._exits.install(lambda message: self.note("warn", "agent", message))
        if self.parent_pid is None:  # a child that trains writes its End on SIGTERM (`_children`)
            self._last_signal.install(self.record_path, lambda message: self.note("warn", "agent", message))
        self._hook_fork()
        atexit.register(self.stop)

    def arm(self) -> None:
        """A dormant agent (a multiprocessing child): hooks only, started by its first step (`wake`)."""
        self.dormant = self.disabled = True
        self._hook_fork()

    def wake(self) -> None:
        """The first backward or optimizer step of a dormant agent's process: start it for real."""
        _children.wake(self)

    def _hook_fork(self) -> None:
        if not self._fork_hooked:  # inherited by a forked child with the rest of the interpreter
            self._fork_hooked = True
            os.register_at_fork(after_in_child=self._after_fork_child)  # cannot be undone: the child checks

    # ---- the writer thread's pass (`_writepass.py`) ---------------------------
    def _read_slow(self) -> None:
        _writepass.read_slow(self)

    def _drain(self, final: bool = False) -> None:
        _writepass.drain(self, final)

    def _step_event(self, item: tuple[Any, ...], offset: float, final: bool = False) -> Step:
        """The `Step` event of a tuple queued by `_on_step` (writer thread)."""
        return self._steps.step(item, offset, final)

    # ---- emitting -------------------------------------------------------
    def emit(self, event: Event) -> None:
        """Queue an event; never blocks. A full queue drops its oldest event and counts it.

        A dormant child's events (its model, its DataLoaders, built before its first step)
        wait in the queue and are written once it wakes."""
        if self.disabled and not self.dormant:
            return
        queue = self._queue
        if len(queue) == QUEUE_MAX:
            self.dropped += 1
        queue.append(event)

    def note(self, level: str, source: str, message: str, once: str | None = None) -> None:
        """Tell the person something (once per `once` key)."""
        key = once or f"{source}:{message}"
        if key in self._noted:
            return
        self._noted.add(key)
        self.emit(Note(t=time.time(), level=level, source=source, message=message))

    # ---- the step clock (training thread) ------------------------------
    @property
    def step_index(self) -> int:
        """Steps emitted so far (the index of the step being accumulated)."""
        return self.clock.index

    def _new_optimizer(self) -> None:
        """A new optimizer stepped (rare): say so when the Model event was already sent without it.

        The first optimizer's first step is also step 0, whose Model event already
        counts it: a second, identical Model event followed in every record."""
        if self._model_optimizers and self._model_optimizers != len(self.clock.optimizers) and self.hooks is not None:
            self.hooks.report_model()

    def on_backward(self, loss: Any, started: float | None = None, token: Any = None, tensor: Any = None,
                    now: float | None = None) -> None:
        """A backward call (the hooks') of `tensor`, begun at `started` (`token`: the clock's marker's
        token then); the first one also finds the model and picks the phases' clock, then hands over."""
        # The first backward finds the model; the hooks hand later ones to the clock
        # themselves (`first_backward`): a call less per step.
        now = _perf() if now is None else now
        if self.first_backward:
            self.first_backward = False
            if self.cuda_device and tensor is not None:
                self.phases.start(self.torch, tensor)
            self.clock.on_backward(now, loss, started, token)
            if self.hooks is not None:
                self.hooks.watch_model()
            return
        self.clock.on_backward(now, loss, started, token)

    def manual_step(self, samples: int | None = None) -> None:
        if self.dormant:
            self.wake()
        if self.disabled:
            return
        now = _perf()
        self.flush_stamps()
        self.clock.manual(samples, now)

    # ---- held hook calls (training thread) ---------------------------------
    def flush_stamps(self, step_end: float | None = None) -> None:
        """The clock takes in the hook calls held in `stamps`, in order; then whether to go on holding them.

        Why hold them: the training thread only stamps and pushes to a queue (DESIGN
        rule 1); and each call into the clock right after the step's own work finds the
        interpreter's caches cold and costs several times its tight-loop time
        (docs/internals.md, "What the agent costs the training thread"). The writer
        thread takes them in at each pass (`_take_held`). The clock sees the same calls,
        with the same stamps, in the same order, so it decides the same. The hooks hold
        calls only between plain steps of the clock's optimizer (`may_batch`) and hand
        the clock at once, after this, what must be decided when it happens: a backward
        inside a running optimizer step (is it still on the stack?), another optimizer's
        step, a manual step, the step a profiler window starts at; `stop` takes the rest in.
        `step_end`: called where a held step just ended (the hooks, when a probe is due on
        CUDA): the next step may be the probe (`_cuda.time_next`).
        """
        with self._stamps_lock:
            self._take_stamps()
            self.batched_steps = 0
            self.held_base = self.clock.index
            if step_end is not None:
                _cuda.time_next(self, step_end)
            self.batching = self.may_batch()

    def _take_stamps(self, writer: bool = False) -> None:
        stamps = self.stamps
        take = stamps.popleft
        cut = self.clock.on_optimizer_step
        windows = self.windows
        # One at a time: a signal's `stop` in between takes in the rest, none twice. The writer
        # takes what was there when it began: the training thread appends meanwhile.
        self._taking = True
        try:
            left = len(stamps)
            while left > 0:
                stop_at = windows.wake_step if writer and windows is not None else None
                # Where `_on_step` would only queue a held step's tuple, `_plainsteps` queues it itself: no
                # profiler windows, or idle ones and the writer's take, which stops short of `wake_step`
                # (their `mark` None, their `on_step` returns at once before it: default runs have windows).
                quiet = windows is None or (stop_at is not None and windows.idle)
                queues = quiet and not self.cuda_mem and self.phases.marker is None \
                    and self._trial_steps is None and not self.finished and self.clock.on_step == self._on_step
                # Plain steps' calls in one pass (`_plainsteps`); what else comes, one call at a time. The
                # writer, which drains the queue next, queues them as runs (bounded by its takes).
                taken = _plainsteps.take(self.clock, stamps, left, stop_at, self if queues else None, writer)
                left -= taken
                # The writer leaves a step in flight held for its next pass, where it is cut whole into
                # the run: taken a call at a time it became a tuple and the drain's second kind of
                # columns, in 12 of 17 passes of a real run (writer's drain ~1.3 us a step more).
                if left <= 0 or (writer and taken and left < 5):
                    break
                if stop_at is not None and stamps[0][0] == cut and self.clock.index >= stop_at:
                    break  # a step a profiler window starts at: the training thread's to cut
                call = take()
                call[0](*call[1:])
                left -= 1
        finally:
            self._taking = False

    def _take_held(self) -> None:
        """Writer thread: the calls the hooks hold, taken in at each pass (before the queue is written).

        The clock is safe here: the training thread takes the lock before it calls the
        clock while the hooks hold calls, and a held call is one the clock may take
        whenever (`may_batch`: no profiler window due, nothing that must be decided on
        the training thread). A step's calls may be taken in two passes: the clock
        holds a step open between its calls as it does between the hooks'.
        """
        if self.stamps:
            with self._stamps_lock:
                try:
                    self._take_stamps(writer=True)
                except Exception as err:
                    self.fail("the step clock (held calls)", err)

    def may_batch(self) -> bool:
        """True while the hooks may hold their calls: after step 0, steps cut by the clock's optimizer,
        none running, no phase tokens (a probe, on CUDA), no trial, profiler windows idle. Not where the
        calls would be taken in at every step anyway (a second optimizer's steps, a closure's backward
        inside each step): held a step at a time they cost more than taken at once."""
        if self._trial_steps is not None or self.disabled or self.finished:
            return False
        clock = self.clock
        if clock.mode != "optimizer" or clock.index == 0 or clock.marker is not None or clock.open_steps \
                or clock.closure or len(clock.optimizers) > 1:
            return False
        windows = self.windows
        return windows is None or windows.idle

    def fail(self, where: str, err: BaseException) -> None:
        """An error of ours reached a hook: switch the agent off, loudly, once; training goes on."""
        self.note("error", "agent", f"pitstop switched itself off after an internal error in {where}: "
                  f"{type(err).__name__}: {err}", once="agent-failed")
        try:
            sys.stderr.write(f"pitstop: internal error in {where} ({type(err).__name__}: {err}); "
                             "pitstop stopped measuring, training goes on\n")
        except Exception:
            pass
        self.failed = True
        self.disabled = True  # every hook passes through from now on

    def _on_eval(self) -> None:
        """The clock saw an evaluation pass begin: a profiler window must not record it."""
        windows = self.windows
        if windows is not None:
            try:
                windows.on_eval()
            except Exception as err:
                self.windows = None
                self.note("warn", "profiler", f"profiler windows off: {err}")

    def _on_first_step(self, index: int, start: float, now: float, wait: float, samples: int | None, source: str,
                       mark: str | None, eval_s: float, loader: Any, loss: Any, phases: Any, passes: int = 0) -> None:
        """Step 0: the model and the rank are reported (before a trial of one step ends the process)."""
        self.clock.on_step = self._on_step
        if self.hooks is not None and not (self.disabled or self.finished):
            self.hooks.report_model()
            self.hooks.report_rank()
        self._on_step(index, start, now, wait, samples, source, mark, eval_s, loader, loss, phases, passes)

    def _on_step(self, index: int, start: float, now: float, wait: float, samples: int | None, source: str,
                 mark: str | None, eval_s: float, loader: Any, loss: Any, phases: Any, passes: int = 0) -> None:
        """A step ended (the clock calls this): what each step costs after its stamps and the clock.

        Measured in place (caches cold from the step's own work) every Python
        operation costs several times its tight-loop time: building the `Step`
        here took ~11 us of ~38. The step goes to the queue as a tuple and the
        writer thread builds the event (`_stepevents.py`). A step whose calls the hooks
        held is recorded when the writer takes them in, even where the agent was switched
        off since (an internal error; the benchmarks switch it off and on). A held step
        (`_taking`) reads nothing of CUDA's and starts no copy: the training thread's probes do.
        """
        if self.finished:
            return
        direct = not self._taking
        mem = None
        if self.cuda_mem:  # reserved and peak: as the writer thread last read them (`_cuda.read_cuda`)
            if direct and self._mem_probe != self._probed_at:  # the first step since a probe began
                _cuda.read_allocated(self)
            if self.cuda_allocated is not None:
                mem = (self.cuda_allocated, self.cuda_reserved, self.cuda_peak)
        if phases is not None and not phases[3] and self.phases.marker is not None:
            phases = None  # on CUDA, a step not timed on the GPU: its host stamps time launches
        windows = self.windows
        if self.clock.releasing:  # held steps emitted at once (`StepClock._release`): no window's business
            windows = None
        if mark is None and windows is not None:
            mark = getattr(windows, "mark", None)
        queue = self._queue
        if len(queue) == QUEUE_MAX:
            self.dropped += 1
        # A CPU loss (a float) rides in the tuple: the writer thread gathers it into a `Loss` event.
        queue.append((index, now, now - start, wait, samples, source, mem, self.rss_now, mark, eval_s, loader, phases,
                      loss, passes))
        if loss is not None and type(loss) is not float:  # a tensor (GPU): copied in batches, from this thread
            pending = self._pending_losses
            pending[index] = loss
            if direct and (len(pending) >= LOSS_BATCH or now - self._last_loss_flush > LOSS_MAX_AGE_S):
                self.flush_losses(block=False)
        other = self.clock.other_loss
        if other is not None:  # a GAN's G loss, filed under the step its backward followed (rare: never held)
            self.clock.other_loss = None
            others = self._pending_other
            others[max(0, index - 1)] = other
            if len(others) >= LOSS_BATCH or now - self._last_loss_flush > LOSS_MAX_AGE_S:
                self.flush_losses(block=False)
        if windows is not None:
            try:
                windows.on_step(index)
            except Exception as err:
                self.windows = None
                self.note("warn", "profiler", f"profiler windows off: {err}")
        if direct and self.cuda_device:
            _cuda.time_next(self, now)
        trial = self._trial_steps
        if trial is not None and index + 1 >= trial:
            self.finish_trial()

    # ---- losses -----------------------------------------------------------
    def flush_losses(self, block: bool) -> None:
        """Read pending losses without a per-step sync: one async copy per batch (`_losses.flush`)."""
        _losses.flush(self, block)

    # ---- lifecycle ---------------------------------------------------------
    def finish_trial(self) -> None:
        """Trial mode: the measured steps are done; end the process ourselves (exit 0)."""
        self.finished = True
        self.stop(reason="trial-complete", exit_code=0)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        try:
            import psutil

            for child in psutil.Process().children(recursive=True):
                child.kill()
        except Exception:
            pass
        os._exit(0)

    def stop(self, reason: str | None = None, exit_code: int | None = None) -> None:
        """End the record (`End`: `reason`, else how the process is ending), close everything; idempotent.

        Runs at exit. Stopped, the agent gives back what start() took: the threads
        end, the socket closes, sys.excepthook and sys.exit are the script's again
        (where nothing wrapped them after ours).
        """
        if not self._started or (self.disabled and not self.failed) or self._stop.is_set():
            return
        _ending.end(self, reason, exit_code)

    def _after_fork_child(self) -> None:
        # A forked child (a DataLoader worker, a hogwild trainer) inherits our objects
        # but not our threads: dormant there until it steps, touching no lock.
        global _current
        try:
            self.stamps.clear()  # the parent's held calls (the hooks hold this deque)
            self.batching = self.step_open = False
            self.probe_due = float("inf")  # CUDA is not the child's (`_children.reset_after_fork`)
            self._stamps_lock = threading.RLock()  # it may have been held by the parent's writer
            _children.reset_after_fork(self)
            self._steps = StepEvents(self.phases)  # the parent's losses held are not ours
        except Exception:
            self.disabled, self.dormant = True, False
        _current = self


def start_from_env(reason: str = "", parent_pid: int | None = None) -> Agent | None:
    """Called by the bootstrap once it decided this process gets the agent; with `parent_pid`
    (a multiprocessing child of that process) a dormant one, started by its first step."""
    global _current
    if _current is not None:
        return _current
    settings = SessionSettings.from_env(os.environ[SESSION_ENV])
    if settings.profile and "torch" not in sys.modules:
        # Kineto (torch 2.13) prints two "USDT: ... profiler_start/stop" lines on
        # stderr for every profiler session; level 6 silences them. It is read once,
        # when torch loads, so it must be set now; a user's own value wins.
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    agent = Agent(settings, reason, parent_pid)
    if parent_pid is None:
        agent.start()
    else:
        agent.arm()
    _current = agent
    try:
        _watch.install_when_torch_imported(agent)
    except Exception as err:
        agent.note("error", "hooks", f"torch hooks not installed: {err}")
    if parent_pid is None:  # a Ray driver: its workers get the agent on a cluster started apart too
        try:
            _raydriver.install(agent)
        except Exception as err:
            agent.note("warn", "ray", f"Ray workers not given pitstop's agent: {err}")
    return agent
