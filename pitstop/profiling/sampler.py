"""Provides the sampler thread: NVML per visible GPU and psutil for the process tree, 1-2 Hz.

Deadline-scheduled (`next_t += interval`) on a named daemon thread that stops
on an Event. Every reading that cannot be taken says why, once; a part that
keeps failing switches itself off and the rest goes on.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import Any

from pitstop.events import Gpu, Proc, Progress, Sample

INTERVAL_S = float(os.environ.get("PITSTOP_SAMPLE_INTERVAL", "1.0"))  # 1 Hz: cheap (~0.1 ms a tick)
# torch.compile's first step compiles for seconds to minutes (12.5 s for a 3-layer MLP on this
# 2-core VM). While it compiles, one of these is on the compiling thread's stack: dynamo's
# frame conversion (the forward) and inductor's compile_fx (the forward and, at the first
# backward, the backward graph). Neither is on a stack when compiled code runs: sampled at
# 20 Hz over 30 steps of that MLP, 176 and 249 of 269 samples during its first step, 0 after.
# Importing them is not compiling: `import lightning.fabric` and keras import dynamo, and
# their module frames said "compiling" for the first seconds of runs that never compiled.
COMPILE_FILES = (os.path.join("torch", "_dynamo", "convert_frame.py"),
                 os.path.join("torch", "_inductor", "compile_fx.py"))
MAX_DEPTH = 1_000  # frames looked at per thread (a compile's stack is ~200 deep)
MODULE_FILE = os.path.join("torch", "nn", "modules", "module.py")  # where `Module._call_impl` runs a forward
# Where the agent's backward wrapper runs (its code named "..._backhook.py (pitstop patch; ...)": `_patch`).
HOOKS_FILE = os.path.join("pitstop", "profiling", "_backhook.py")
# psutil's machine-wide cpu_percent over less than a few clock ticks (10 ms each) reads 0.0.
MIN_SYSTEM_S = 0.05
# A process seen for the first time reads its CPU since it started (its CPU time over its age), once it
# is this old: under it, the 10 ms clock ticks of both make the figure coarse. A DataLoader's workers
# live one epoch unless persistent: pytorch-ignite's mnist_save_resume_engine (4 workers, a new set for
# each pass over a loader) was sampled about once per worker, and every reading of a first sight
# was None: "train workers n/a (8)". Only workers: another child busy for the first second of its
# imports, then idle, would read as busy (the blind-spot note's evidence), and this process's own
# first reading would count the imports before the agent started.
MIN_AGE_S = 0.2


def compiling() -> bool:
    """True while a thread of this process is inside torch.compile's compiler (`COMPILE_FILES` on its stack)."""
    if "torch._dynamo" not in sys.modules:  # nothing compiles before dynamo is imported
        return False
    for frame in sys._current_frames().values():
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            if code.co_filename.endswith(COMPILE_FILES) and code.co_name != "<module>":
                return True  # (its `<module>` frame is an import: `import lightning`, keras import dynamo)
            frame = frame.f_back
            depth += 1
    return False


def running_calls() -> tuple[float | None, str | None]:
    """Where the training thread is, read from its stack: (the `perf_counter` at which the backward running
    now began, the class of the outermost module whose forward runs), each None where none runs.

    A first step that hangs in its first backward (a DDP rank whose peer never came: the all-reduce
    hook waits inside backward) read "1 batch fetched, no backward yet", since the backward counter
    moves when a call returns. Read from the frames only while no step has ended: nothing is added
    to the hooks. The backward is the hook's own wrapper in `HOOKS_FILE` (its `started` local); a
    forward is torch's `Module._call_impl` (its `self`).
    """
    started: float | None = None
    forward: str | None = None
    own = threading.get_ident()
    for ident, frame in sys._current_frames().items():
        if ident == own:
            continue
        depth = 0
        while frame is not None and depth < MAX_DEPTH:
            code = frame.f_code
            if code.co_name == "backward" and code.co_filename.split(" (", 1)[0].endswith(HOOKS_FILE):
                value = frame.f_locals.get("started")
                if isinstance(value, float):
                    started = value
            elif code.co_name == "_call_impl" and code.co_filename.endswith(MODULE_FILE):
                forward = type(frame.f_locals.get("self")).__name__  # outermost wins: the walk goes outward
            frame = frame.f_back
            depth += 1
    return started, forward


def run_delay(pid: int, proc_root: str = "/proc") -> int | None:
    """Nanoseconds the threads of `pid` have waited, ready to run, for a CPU (Linux schedstat); None unreadable.

    The second field of each thread's `schedstat`: a process whose threads share
    the cores with others waits here whether its steps swing or not.
    """
    try:
        tids = os.listdir(f"{proc_root}/{pid}/task")
    except OSError:
        return None
    total = 0
    read = False
    for tid in tids:
        try:
            with open(f"{proc_root}/{pid}/task/{tid}/schedstat", "rb") as handle:
                total += int(handle.read().split()[1])
            read = True
        except (OSError, IndexError, ValueError):
            continue  # a thread that just ended
    return total if read else None


def proc_children(pid: int, proc_root: str = "/proc") -> list[int] | None:
    """Every descendant of `pid` from Linux's per-thread `children` files; None where there are none.

    psutil's `children(recursive=True)` reads the parent of every process on the
    machine (0.85 ms a call with 118 processes here, ~10 ms on a busy server);
    this reads one small file per thread of each descendant.
    """
    found: list[int] = []
    todo = [pid]
    while todo:
        parent = todo.pop()
        try:
            tids = os.listdir(f"{proc_root}/{parent}/task")
        except OSError:
            if parent == pid:
                return None
            continue  # a child that just exited
        for tid in tids:
            try:
                with open(f"{proc_root}/{parent}/task/{tid}/children", "rb") as handle:
                    kids = [int(k) for k in handle.read().split()]
            except FileNotFoundError:
                if parent == pid and tid == str(pid):
                    return None  # a kernel without CONFIG_PROC_CHILDREN
                continue
            except (OSError, ValueError):
                continue
            found.extend(kids)
            todo.extend(kids)
    return found


def _visible(gpus: list[Gpu]) -> list[Gpu]:
    """Only the GPUs this process may use (CUDA_VISIBLE_DEVICES by index)."""
    spec = os.environ.get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return gpus
    wanted: list[int] = []
    for part in spec.split(","):
        part = part.strip()
        if part.isdigit():
            wanted.append(int(part))
        elif part:  # UUIDs or MIG names: keep all rather than guess
            return gpus
    by_index = {g.index: g for g in gpus}
    return [by_index[i] for i in wanted if i in by_index]


class Sampler:
    """Periodic readings of the process tree and the GPUs."""

    def __init__(self, agent: Any) -> None:
        import psutil  # imported here: the bootstrap must not pay for it when no agent starts

        self.agent = agent
        self.psutil = psutil
        self.me = psutil.Process()
        self._procs: dict[int, Any] = {}
        self._primed: set[int] = set()
        self._stop = threading.Event()
        self._nvml_off: str | None = None
        self._proc_children = True  # Linux's children files; psutil's scan of every process if absent
        self._delay: tuple[float, int] | None = None  # (monotonic time, run delay ns) at the last reading
        self._delays: dict[int, tuple[float, int]] = {}  # the same for each other process of the tree, by pid
        self._name: tuple[float, str | None] | None = None  # (the running step's start, its optimizer's class)
        self._compiling_since: float | None = None  # when a reading first saw torch.compile compiling, in a row
        self._thread = threading.Thread(target=self._loop, name="pitstop-sampler", daemon=True)
        psutil.cpu_percent(None)  # prime: the first system reading is relative to this call
        self._system_at = time.monotonic()  # when the machine's CPU was last read (or primed)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=2.0)
        try:
            from pitstop.profiling import nvml

            nvml.release_gpm()  # the GPM samples the readings took turns in
        except Exception:
            pass

    def _loop(self) -> None:
        next_t = time.monotonic()
        while not self._stop.is_set():
            next_t += INTERVAL_S
            self._stop.wait(max(0.0, next_t - time.monotonic()))
            if self._stop.is_set():
                return
            if self.agent.disabled:  # switched off (a fork's child has no sampler thread anyway)
                continue
            try:
                self.agent.emit(self.read())
            except Exception as err:
                self.agent.note("warn", "sampler", f"sampler stopped: {err}")
                return

    def _proc(self, pid: int) -> Any:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self.me if pid == self.me.pid else self.psutil.Process(pid)
            proc.cpu_percent(None)  # prime; the first reading of a new process is 0 by definition
            self._procs[pid] = proc
        return proc

    def read_procs(self) -> list[Proc]:
        psutil = self.psutil
        procs: list[Proc] = []
        children = proc_children(self.me.pid) if self._proc_children else None
        if children is None:
            self._proc_children = False
            try:
                children = [c.pid for c in self.me.children(recursive=True)]
            except psutil.Error:
                children = []
        seen = {self.me.pid}
        for pid in [self.me.pid, *children]:
            seen.add(pid)
            try:
                proc = self._proc(pid)
                fresh = pid not in self._primed
                cpu = proc.cpu_percent(None)
                rss = proc.memory_info().rss
            except psutil.Error:
                continue
            loader = None
            if pid == self.me.pid:
                role = "main"
            elif pid in self.agent.worker_pids:
                role = "worker"
                loader = self.agent.worker_pids.get(pid)
            else:
                role = "child"
            if fresh:  # a worker: since it started; others wait for a second reading (`MIN_AGE_S`)
                cpu = self._since_start(proc) if role == "worker" else None
            wait = None if role == "main" else self._waited(pid)  # (the main process's: `Sample.cpu_wait`)
            procs.append(Proc(pid=pid, role=role, cpu=cpu, rss=rss, loader=loader, cpu_wait=wait))
            self._primed.add(pid)
        self.agent.blind.seen(procs)  # children busy while this process never stepped (_blind.py)
        for gone in set(self._procs) - seen:
            self._procs.pop(gone, None)
            self._primed.discard(gone)
        for gone in set(self._delays) - seen:
            del self._delays[gone]
        return procs

    def _waited(self, pid: int) -> float | None:
        """Cores' worth of `pid`'s threads that waited for a CPU since its previous reading; None at the first.

        A DataLoader worker starved of a core makes its rank wait for batches while the rank's own
        threads wait for nothing: on the balanced 2-rank gloo job beside two CPU hogs, rank 0 read
        +4.0 ms of data wait a step with its main process's wait under a quarter of a core.
        """
        now, delay = time.monotonic(), run_delay(pid)
        last = self._delays.pop(pid, None)
        if delay is None:
            return None
        self._delays[pid] = (now, delay)
        if last is None or now <= last[0]:
            return None
        return round(max(0, delay - last[1]) / 1e9 / (now - last[0]), 3)

    def _since_start(self, proc: Any) -> float | None:
        """A process's CPU (% of one core) from its start to now; None while it is younger than `MIN_AGE_S`."""
        try:
            times = proc.cpu_times()
            age = time.time() - proc.create_time()
        except self.psutil.Error:  # gone since: no reading, as for any first sight before
            return None
        if age < MIN_AGE_S:
            return None
        return 100.0 * (times.user + times.system) / age

    def read_gpus(self) -> tuple[list[Gpu], str | None]:
        if self._nvml_off is not None:
            return [], self._nvml_off
        try:
            from pitstop.profiling import nvml

            gpus, reason = nvml.read_gpus()
        except Exception as err:
            self._nvml_off = f"NVML reading failed: {err}"
            return [], self._nvml_off
        if reason and not gpus:
            self._nvml_off = reason  # no driver / no GPU does not change during a run
        return _visible(gpus), reason

    def read(self) -> Sample:
        gpus, reason = self.read_gpus()
        retries = ooms = None
        # The allocator's counters as the agent's writer thread last read them, on the
        # training thread's device: torch.cuda.memory_stats() here would read this
        # thread's current device (device 0), not the rank's, and flatten the dict again.
        stats = self.agent.cuda_stats
        if stats:
            retries = int(stats.get("num_alloc_retries", 0))
            ooms = int(stats.get("num_ooms", 0))
        return Sample(
            t=time.time(),
            gpus=gpus,
            gpu_unavailable=reason if not gpus else None,
            procs=self.read_procs(),
            system_cpu=self._system_cpu(),
            alloc_retries=retries,
            ooms=ooms,
            cpu_wait=self.read_cpu_wait(),
            progress=self.read_progress(),
        )

    def read_cpu_wait(self) -> float | None:
        """Cores' worth of this process's threads waiting for a CPU since the previous reading."""
        now, delay = time.monotonic(), run_delay(self.me.pid)
        last, self._delay = self._delay, (now, delay) if delay is not None else None
        if last is None or delay is None or now <= last[0]:
            return None
        return round((delay - last[1]) / 1e9 / (now - last[0]), 3)

    def _system_cpu(self) -> float | None:
        """The machine's CPU since the last reading; None within a clock tick of it (psutil then
        says 0.0: a spawned rank's first sample read "machine 0.00 of 2 cores" on a busy machine)."""
        value = self.psutil.cpu_percent(None)
        now = time.monotonic()
        short, self._system_at = now - self._system_at < MIN_SYSTEM_S, now
        return None if short else value

    def read_progress(self) -> Progress | None:
        """What training has done so far, while no step has ended (None once steps flow, or before torch).

        The step clock's counters, read here: the step path only increments them.
        Once the first step ended, this costs one compare a sample.
        """
        agent = self.agent
        clock = agent.clock
        if agent.hooks is None or clock.index > 0:
            return None
        # The list first: the clock stamps `opened_at` before it adds a step, so the stamp read
        # after is that step's start (or a later one's), never an older step's.
        running = list(clock.open_steps)  # [key, token]
        opened_at = clock.opened_at
        seconds = name = None
        if running:
            seconds = max(0.0, time.perf_counter() - opened_at)
            name = self._optimizer_name(opened_at, running[0][1])
        backward_at, forward = running_calls()
        now = time.perf_counter()
        since = self._compiling_since = (self._compiling_since or now) if compiling() else None
        return Progress(batches=clock.batches, backwards=clock.backwards, closures=clock.closures,
                        optimizer_s=seconds, optimizer=name, compiling_s=now - since if since is not None else None,
                        grads=clock.grads, backward_s=max(0.0, now - backward_at) if backward_at is not None else None,
                        forward=forward)

    def _optimizer_name(self, opened_at: float, frame: Any) -> str | None:
        """The class of the optimizer whose step began at `opened_at` and runs in `frame` (torch's
        step wrapper, which binds `self`): read once per step.

        The optimizer-step pre-hook hands the clock only this frame; learning the
        name there would cost every step of the run.
        """
        cached = self._name
        if cached is not None and cached[0] == opened_at:
            return cached[1]
        try:
            optimizer = frame.f_locals.get("self")
            name = type(optimizer).__name__ if optimizer is not None else None
        except Exception:
            name = None
        self._name = (opened_at, name)
        return name
