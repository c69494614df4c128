"""Provides the event schema: plain dataclasses, a version, JSON-lines encode/decode.

Standard library only: this module is imported by the in-process agent, by every
viewer and by the tuner. The schema is documented for users in docs/events.md;
keep the two in step. Compatibility rule: adding an optional field or a new
event kind keeps SCHEMA_VERSION; renaming, removing or changing the meaning of
a field bumps it. A reader skips kinds it does not know and ignores unknown
fields, and refuses a stream whose `hello.schema` is newer than its own.
"""

from __future__ import annotations

import dataclasses
import json
import math
import reprlib
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union

from pitstop.errors import SchemaError
from pitstop.jsonshape import ShapeError, build

SCHEMA_VERSION = 2

# Field names per event class, in order (`_Shared`): filled at a class's first repr, comparison or hash.
_NAMES: dict[type, tuple[str, ...]] = {}


class _Shared:
    """An event's `__repr__`, `__eq__` and `__hash__`, as `@dataclass(frozen=True)` makes them, shared by all.

    `@dataclass` compiles each method it makes from a string: the 21 classes here
    compiled 126, 40 ms of CPU (two thirds of this module's import) at the start of
    every pitstop process, the agent's inside each training process included. With
    these three shared (`repr=False, eq=False`), each class compiles only its
    `__init__` and the frozen `__setattr__`/`__delattr__`: 26 ms. Same results:
    `Step(t=1.0, ...)`, equal when of one class with equal fields, hashed by its fields.
    """

    __slots__ = ()

    def _values(self) -> tuple[Any, ...]:
        kind = type(self)
        names = _NAMES.get(kind)
        if names is None:
            names = _NAMES[kind] = tuple(f.name for f in dataclasses.fields(kind))  # type: ignore[arg-type]
        return tuple(getattr(self, name) for name in names)

    @reprlib.recursive_repr()
    def __repr__(self) -> str:
        kind = type(self)
        self._values()  # the names, cached
        return f"{kind.__qualname__}(" + ", ".join(f"{name}={getattr(self, name)!r}" for name in _NAMES[kind]) + ")"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._values() == other._values()  # type: ignore[attr-defined]
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._values())


@dataclass(frozen=True, repr=False, eq=False)
class Hello(_Shared):
    """First event of every stream: who is talking."""

    kind: ClassVar[str] = "hello"
    schema: int
    pitstop_version: str
    session: str  # shared by every process of one `pitstop run` (the job id)
    pid: int
    ppid: int
    host: str
    argv: list[str]  # the interpreter's original argv (sys.orig_argv)
    cwd: str
    started: float  # time.time() when the agent started
    python: str
    mode: str = "run"  # "run" | "trial"
    rank: int | None = None  # RANK from the launcher, None when not distributed
    local_rank: int | None = None
    world_size: int | None = None
    script: str = ""  # what the user ran, for display ("train.py", "-m pkg.mod")
    record: str | None = None  # where this process records its events
    # The command as the user typed it to `pitstop run` (SCRIPT ARGS, -m MODULE ARGS, -- COMMAND...),
    # the directory it was typed in and the variables it needs (PYTHONPATH, framework variables):
    # fix lines print it to run as printed. None in records of older versions and of processes
    # pitstop did not start.
    command: list[str] | None = None
    command_cwd: str | None = None
    command_env: dict[str, str] | None = None
    # A child process that trains (a multiprocessing child stepping an optimizer, as in
    # hogwild): the pid of the process it was started from. None in a main process or rank.
    parent_pid: int | None = None
    # The tuned config `pitstop run --config FILE` applied, as typed (a path relative to `command_cwd`).
    config: str | None = None
    # The job across nodes, as its launcher named it (profiling/jobenv.py); None outside torchrun,
    # Slurm and Ray Train, and in older records. Records of one job written by different `pitstop run`
    # fronts (one per node: different sessions) share `job` and read as one job.
    job: str | None = None  # "slurm:4242.0", "torchrun:<run id>@<store host:port>", "ray:<run>"
    launcher: str | None = None  # "slurm" | "torchrun" | "ray"
    node: str | None = None  # PITSTOP_NODE, SLURMD_NODENAME, else the host name
    node_rank: int | None = None  # GROUP_RANK, SLURM_NODEID, Ray's node rank
    nodes: int | None = None  # nodes the job spans, where the launcher says
    local_world_size: int | None = None  # ranks per node (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE)
    store: str | None = None  # the job's own store, "host:port" (torchrun's rendezvous: MASTER_ADDR:MASTER_PORT)


@dataclass(frozen=True, repr=False, eq=False)
class Runtime(_Shared):
    """What torch and the machine offer, sent once torch is imported."""

    kind: ClassVar[str] = "runtime"
    t: float
    torch_version: str
    cuda_version: str | None  # None for a CPU build
    device_type: str  # "cuda" | "cpu" | "mps"
    device_names: list[str] = field(default_factory=list)
    cudnn_version: int | None = None
    cpu_count: int | None = None  # logical CPUs of the machine
    usable_cpus: int | None = None  # CPUs this process may run on (affinity)
    shm_bytes: int | None = None  # size of /dev/shm, None where there is none
    unavailable: dict[str, str] = field(default_factory=dict)  # metric -> reason
    cpu_bf16: bool | None = None  # the CPU has native bf16 (avx512_bf16 / amx_bf16); None: unknown
    torch_threads: int | None = None  # torch.get_num_threads(): at import, sent again at the first step if changed
    host_mem_total: int | None = None  # bytes the process may use: MemTotal, or a smaller cgroup limit


@dataclass(frozen=True, repr=False, eq=False)
class Step(_Shared):
    """One training step, stamped on the training thread."""

    kind: ClassVar[str] = "step"
    t: float  # time.time() at the end of the step
    step: int  # 0-based
    wall: float  # seconds since the end of the previous step
    data_wait: float  # seconds blocked in DataLoader iterators during the step
    samples: int | None = None  # leading dimension of the batches fetched, None if unknown
    source: str = "optimizer"  # "optimizer" | "backward" | "manual"
    mem_allocated: int | None = None  # torch CUDA bytes; None off CUDA
    mem_reserved: int | None = None
    mem_peak: int | None = None  # max allocated since start
    host_rss: int | None = None  # bytes
    # Why the step is kept out of training statistics (None: a training step):
    # "eval" (an evaluation pass ran in it), "rollout" (a policy's rollout: the data its updates
    # train on), "profiled" (inside a profiler window), "after-profile" (while a window's tables
    # were built). See docs/events.md.
    mark: str | None = None
    eval_s: float = 0.0  # seconds of the step spent in evaluation, or in rollouts where mark is "rollout"
    loader: int | None = None  # DataLoaderInfo.id of the loader whose batches fed the step (training loader)
    # The step's anatomy, summed over every forward/backward/optimizer step in it;
    # None when no backward or optimizer step ran in it. See docs/events.md for the bounds.
    forward_s: float | None = None  # batch in hand (or the previous boundary) to the start of each backward
    backward_s: float | None = None  # inside Tensor.backward
    optimizer_s: float | None = None  # inside optimizer.step(), every optimizer
    other_s: float | None = None  # compute - forward - backward - optimizer (at least 0)
    phase_clock: str | None = None  # "host" (perf_counter) | "cuda" (CUDA events on the training stream)
    # Evaluation passes in the step (mark "eval"), or rollouts (mark "rollout"); None in records made
    # before it was kept, where a step marked "eval" holds one.
    passes: int | None = None

    @property
    def compute(self) -> float:
        """Seconds of the step not spent waiting for data."""
        return max(0.0, self.wall - self.data_wait)


@dataclass(frozen=True, repr=False, eq=False)
class Loss(_Shared):
    """Loss values read lazily, in batches, so reading never syncs the GPU per step."""

    kind: ClassVar[str] = "loss"
    t: float
    steps: list[int]
    values: list[float | None]  # None encodes NaN/inf as JSON cannot (see `finite`)
    nonfinite: list[int] = field(default_factory=list)  # steps whose loss was NaN or inf
    # Whose loss: 1 the step's (the clock's optimizer: a GAN's D); 2 the second optimizer's that stepped in it
    # (a GAN's G), filed under the step its backward followed (the one before the step that holds it).
    optimizer: int = 1


@dataclass(frozen=True, repr=False, eq=False)
class Gpu(_Shared):
    """One NVML reading of one GPU; a None field is unavailable (reason in `unavailable`)."""

    index: int
    name: str
    util: float | None = None  # percent
    mem_used: int | None = None  # bytes
    mem_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    temp_c: float | None = None
    sm_clock_mhz: float | None = None
    pcie_tx_kbs: float | None = None
    pcie_rx_kbs: float | None = None
    unavailable: dict[str, str] = field(default_factory=dict)
    # NVML GPM (Hopper and newer): percent over the sampler's last interval. NVML's `util` counts
    # any kernel running, so a GPU at 100% can have its math units 10% busy: these say
    # how busy. SMs with a warp resident, warps resident of the SMs' maximum, tensor pipes active
    # (any precision), DRAM bandwidth used of the peak. None: the reason is under unavailable["gpm"].
    sm_active: float | None = None
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_bw_util: float | None = None


@dataclass(frozen=True, repr=False, eq=False)
class Proc(_Shared):
    """CPU and memory of one process of the training process tree."""

    pid: int
    role: str  # "main" | "worker" (DataLoader) | "child"
    cpu: float | None  # percent of one core
    rss: int | None  # bytes
    loader: int | None = None  # for a worker: DataLoaderInfo.id of its DataLoader, when known
    # Cores' worth of its threads that waited, ready to run, for a CPU since the previous sample (as
    # `Sample.cpu_wait`, which is the main process's); None for the main process, at a process's first
    # sample, or where unreadable.
    cpu_wait: float | None = None


@dataclass(frozen=True, repr=False, eq=False)
class Progress(_Shared):
    """What the training thread has done while no training step has ended yet.

    The sampler thread reads counters the hooks keep: a first step that takes
    minutes (LBFGS's closures, a compile, a big model) must not look like a hang.
    """

    batches: int  # batches fetched from DataLoaders, every loader (which one trains is known at the first step)
    backwards: int  # Tensor.backward calls
    closures: int  # backward calls inside a running optimizer step: LBFGS evaluates its closure ~20 times a step
    optimizer_s: float | None = None  # seconds the optimizer step running now has run; None: none is running
    optimizer: str | None = None  # that optimizer's class ("LBFGS"); None: none running, or not known
    compiling_s: float | None = None  # seconds torch.compile has been compiling (its frames on a stack); None: not now
    grads: int = 0  # torch.autograd.grad calls (torch.func's grad too): gradients a loop takes without backward()
    backward_s: float | None = None  # seconds the backward call running now has run; None: none is running
    forward: str | None = None  # the module class whose forward runs now (the outermost); None: none, or not seen


@dataclass(frozen=True, repr=False, eq=False)
class Sample(_Shared):
    """A sampler-thread reading (1-2 Hz): GPUs, the process tree, the machine."""

    kind: ClassVar[str] = "sample"
    t: float
    gpus: list[Gpu] = field(default_factory=list)
    gpu_unavailable: str | None = None  # why there is no GPU reading at all
    procs: list[Proc] = field(default_factory=list)
    system_cpu: float | None = None  # percent of the whole machine
    alloc_retries: int | None = None  # torch CUDA allocator retries since start
    ooms: int | None = None  # torch CUDA OOMs since start
    # Cores' worth of the main process's threads that were ready to run but waited for
    # a CPU since the previous sample (Linux schedstat run delay); None where unreadable.
    cpu_wait: float | None = None
    progress: Progress | None = None  # until the first training step ends (then None): what training does


@dataclass(frozen=True, repr=False, eq=False)
class DataLoaderInfo(_Shared):
    """A DataLoader the script built, with what pitstop changed in it."""

    kind: ClassVar[str] = "dataloader"
    t: float
    id: int
    num_workers: int
    batch_size: int | None
    pin_memory: bool
    persistent_workers: bool
    prefetch_factor: int | None
    dataset_len: int | None = None
    batch_sampler: bool = False  # a custom batch_sampler: batch_size cannot be overridden
    overrides: dict[str, Any] = field(default_factory=dict)  # knob -> value pitstop applied
    skipped: dict[str, str] = field(default_factory=dict)  # knob -> why it did not apply
    dataset: str = ""  # class name of the dataset
    shuffle: bool | None = None  # its sampler shuffles (RandomSampler, a shuffling DistributedSampler)
    # The framework whose code was on the stack as it was built, the outermost ("transformers" for HF
    # Trainer through accelerate, "keras" for fit(x, y), "lightning"); "" when the script built it.
    framework: str = ""


@dataclass(frozen=True, repr=False, eq=False)
class Applied(_Shared):
    """Process-wide overrides from a tuned config (autocast, cudnn, channels-last)."""

    kind: ClassVar[str] = "applied"
    t: float
    applied: dict[str, Any] = field(default_factory=dict)
    skipped: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, repr=False, eq=False)
class Model(_Shared):
    """What the agent learned about the script's model and loop (for advice and the tuner)."""

    kind: ClassVar[str] = "model"
    t: float
    conv2d: int = 0  # Conv2d modules built
    optimizers: int = 0  # distinct optimizers that stepped
    grad_scaler: bool = False  # an enabled torch.amp GradScaler was built (torch disables it without CUDA)
    grad_clip: bool = False  # clip_grad_norm_ or clip_grad_value_ was called by the time of this event
    autocast: bool = False  # autocast is on: entered by the script, or applied from a config
    data_parallel: bool = False  # nn.DataParallel in use
    ddp: bool = False  # DistributedDataParallel in use
    channels_last_params: int = 0  # 4-D parameters in channels_last
    cudnn_benchmark: bool | None = None  # torch.backends.cudnn.benchmark at first step
    dtype: str | None = None  # most parameters of the model are of it: "float32", "float64", "bfloat16"...; None: unknown


@dataclass(frozen=True, repr=False, eq=False)
class OpStat(_Shared):
    """One operator aggregated over a profiler window."""

    name: str
    calls: int
    self_us: float  # self CPU time
    total_us: float  # CPU time including children
    device_self_us: float | None = None  # self CUDA time; None on CPU
    # Where it ran: "data" (inside the DataLoader's __next__ in the main process: the dataset's
    # own ops with num_workers=0), "forward" (the rest of the training thread: forward, loss),
    # "backward", "optimizer"; None on another thread outside those, or in a record made before
    # phases were kept. An op that ran in several phases has one row per phase.
    phase: str | None = None


@dataclass(frozen=True, repr=False, eq=False)
class KernelStat(_Shared):
    """One CUDA kernel aggregated over a profiler window."""

    name: str
    calls: int
    total_us: float
    mean_us: float


@dataclass(frozen=True, repr=False, eq=False)
class Copies(_Shared):
    """Host/device copies in a profiler window."""

    h2d_bytes: int = 0
    h2d_us: float = 0.0
    h2d_count: int = 0
    h2d_pageable: int = 0  # copies whose host side was pageable memory
    d2h_bytes: int = 0
    d2h_us: float = 0.0
    d2h_count: int = 0
    d2h_pageable: int = 0


@dataclass(frozen=True, repr=False, eq=False)
class ProfileWindow(_Shared):
    """Aggregated tables of one torch.profiler window (never a raw trace)."""

    kind: ClassVar[str] = "profile"
    t: float
    step_start: int
    step_end: int  # exclusive
    device: str  # "cuda" | "cpu": where the time figures come from
    trigger: str = "schedule"  # "schedule" | "demand" | "slowdown" (steps slowed down: profiling/_slowwatch.py)
    duration_s: float = 0.0
    ops: list[OpStat] = field(default_factory=list)  # top ops by self time
    kernels: list[KernelStat] = field(default_factory=list)
    kernels_unavailable: str | None = None
    copies: Copies | None = None
    syncs_per_step: dict[str, float] = field(default_factory=dict)  # op name -> calls per step
    phases_ms: dict[str, float] = field(default_factory=dict)  # data/forward/backward/optimizer per step
    collective_ms: float | None = None  # per step, NCCL/gloo
    collective_overlap: float | None = None  # fraction of collective time overlapped with compute
    trace_path: str | None = None


@dataclass(frozen=True, repr=False, eq=False)
class Rank(_Shared):
    """The process's distributed rank, learned after start: a framework (Lightning's DDP)
    set up torch.distributed itself, without RANK in the environment. Readers apply it
    to the stream's `hello`."""

    kind: ClassVar[str] = "rank"
    t: float
    rank: int
    world_size: int | None = None
    local_rank: int | None = None


@dataclass(frozen=True, repr=False, eq=False)
class Note(_Shared):
    """Something the agent wants a person to know (a part switched off, a knob skipped)."""

    kind: ClassVar[str] = "note"
    t: float
    level: str  # "info" | "warn" | "error"
    source: str  # the agent part: "sampler", "profiler", "overrides", ...
    message: str


@dataclass(frozen=True, repr=False, eq=False)
class Frame(_Shared):
    """One Python frame of a stack: where it is, and whether it is library code (folded in display)."""

    function: str
    file: str
    line: int | None = None
    library: bool = False  # the standard library or an installed package (torch included)
    code: str = ""  # the source line, where it could be read


@dataclass(frozen=True, repr=False, eq=False)
class ThreadStack(_Shared):
    """Where one thread of one process waits: its Python frames (outermost first) and its kernel state."""

    pid: int
    role: str  # "main" (the training thread) | "worker" (a DataLoader worker) | "pin-memory" | "thread"
    thread: str = ""  # the thread's name
    how: str = "in-process"  # "in-process" (sys._current_frames) | "py-spy" (py-spy dump) | "none": not taken
    frames: list[Frame] = field(default_factory=list)
    state: str | None = None  # /proc/PID/stat state: "R", "S", "D" (uninterruptible sleep), "Z" (dead)
    wchan: str | None = None  # /proc/PID/wchan: the kernel function a sleeping process waits in
    note: str | None = None  # why the stack is missing or partial ("py-spy is not installed: ...")
    native: bool = False  # py-spy saw the thread holding the GIL (in native code: no in-process stack)


@dataclass(frozen=True, repr=False, eq=False)
class Stall(_Shared):
    """The process stopped making progress: no step, batch or backward for longer than `threshold_s`.

    `phase` "start" is sent once, when the stall is detected (with the stacks);
    "update" every few minutes while it lasts (fresh stacks); "end" when steps
    resume (`lasted_s` says how long it lasted); "exit" when the process ends
    while stuck. See docs/events.md."""

    kind: ClassVar[str] = "stall"
    t: float
    phase: str  # "start" | "update" | "end" | "exit"
    step: int  # the last step that ended before the stall
    since_s: float  # seconds without progress, at `t`
    threshold_s: float  # the threshold crossed: max(60 s, 20x the p95 step), or --stall-after
    lasted_s: float | None = None  # "end" / "exit": the stall's whole length
    stacks: list[ThreadStack] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what could not be seen ("py-spy is not installed ...")
    flight: list[str] = field(default_factory=list)  # the CUDA Flight Recorder's summary, where it is on
    # "agent": the process's own stall watch; "front": `pitstop run`, which read it from outside (py-spy)
    # because the agent went silent (its training thread held the GIL, so no thread of it ran).
    by: str = "agent"
    # No step yet: the process has not moved since its agent started (`step` is 0); said as a wait for the
    # first step, not as stuck (a first step may compile or download for minutes).
    first: bool = False


@dataclass(frozen=True, repr=False, eq=False)
class End(_Shared):
    """Last event of a stream that ended cleanly."""

    kind: ClassVar[str] = "end"
    t: float
    steps: int
    dropped: int  # events dropped by the bounded queue
    # "exit" | "exception" | "interrupted" | "terminated" | "trial-complete" | "signal" (docs/events.md)
    reason: str = "exit"
    exit_code: int | None = None
    # Seconds of an evaluation pass after the last step (in no step: HF Trainer's final
    # evaluation); 0.0 when there was none. See docs/events.md.
    eval_s: float = 0.0
    eval_passes: int | None = None  # its passes; None: one where eval_s > 0 (records made before it was kept)
    rollouts: int = 0  # rollouts after the last step, and their seconds
    rollout_s: float = 0.0


Event = Union[
    Hello, Runtime, Step, Loss, Sample, DataLoaderInfo, Applied, Model, ProfileWindow, Rank, Note, Stall, End
]

EVENT_TYPES: dict[str, type] = {
    cls.kind: cls
    for cls in (Hello, Runtime, Step, Loss, Sample, DataLoaderInfo, Applied, Model, ProfileWindow, Rank, Note, Stall,
                End)
}

_FLAT = frozenset({Hello, Runtime, Step, Loss, DataLoaderInfo, Applied, Model, Rank, Note, End})


def to_dict(event: Event) -> dict[str, Any]:
    """The JSON object of one event, with its `kind`."""
    # `kind` first: the socket server classifies lines by their prefix without decoding.
    if type(event) in _FLAT:
        # No nested dataclasses: the instance dict is already the JSON object, and
        # this is ~4x cheaper than asdict's deep copy (6 vs 21 us a Step here),
        # which matters at ~1,000 steps/s on the writer thread.
        return {"kind": event.kind, **vars(event)}
    return {"kind": event.kind, **dataclasses.asdict(event)}


def encode(event: Event) -> str:
    """One JSON line (no trailing newline). Non-finite floats become null."""
    try:
        return json.dumps(to_dict(event), separators=(",", ":"), allow_nan=False)
    except ValueError:
        return json.dumps(_finite(to_dict(event)), separators=(",", ":"), allow_nan=False)


def _finite(value: Any) -> Any:
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def from_dict(data: dict[str, Any]) -> Event | None:
    """Rebuild an event; None for a kind this version does not know.

    Raises SchemaError for a `hello` of a newer schema or a malformed object: a
    missing field, a value of the wrong type, a malformed nested object (one
    line, naming the field: "malformed 'sample' event: procs[0]: missing 'pid'").
    """
    kind = data.get("kind")
    cls = EVENT_TYPES.get(kind) if isinstance(kind, str) else None
    if cls is None:
        return None
    if cls is Hello:
        schema = data.get("schema")
        if not isinstance(schema, int):
            raise SchemaError("hello event has no integer 'schema'")
        if schema > SCHEMA_VERSION:
            raise SchemaError(
                f"written by a newer pitstop (event schema {schema}, this pitstop reads up to "
                f"{SCHEMA_VERSION}); upgrade pitstop to read it"
            )
    try:
        return build(cls, data)
    except (ShapeError, TypeError) as err:  # TypeError: a value the checks let through that the class refuses
        raise SchemaError(f"malformed {kind!r} event: {err}") from err


def decode(line: str | bytes) -> Event | None:
    """Decode one JSON line; None for an unknown kind. Raises SchemaError if malformed."""
    try:
        data = json.loads(line)
    except ValueError as err:
        raise SchemaError(f"not a JSON event line: {err}") from err
    if not isinstance(data, dict):
        raise SchemaError("event line is not a JSON object")
    return from_dict(data)
