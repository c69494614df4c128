"""Provides the tuner's plain data: a candidate configuration, what a baseline taught us, and a trial's result."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from pitstop.config import ComputeSettings, Config, DataLoaderSettings

# Canonical knob names, in the order a label lists them.
KNOBS = (
    "num_workers",
    "pin_memory",
    "persistent_workers",
    "prefetch_factor",
    "batch_size",
    "amp",
    "cudnn_benchmark",
    "channels_last",
    "threads",
)
DATA_KNOBS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")
COMPUTE_KNOBS = ("amp", "cudnn_benchmark", "channels_last", "threads")

# Names a person may type in --knobs, and the short names progress lines use.
ALIASES = {
    "workers": "num_workers",
    "pin": "pin_memory",
    "persistent": "persistent_workers",
    "prefetch": "prefetch_factor",
    "batch": "batch_size",
    "cudnn": "cudnn_benchmark",
    "autocast": "amp",
    "omp_num_threads": "threads",
    **{k: k for k in KNOBS},
}
SHORT = {
    "num_workers": "workers",
    "pin_memory": "pin",
    "persistent_workers": "persistent",
    "prefetch_factor": "prefetch",
    "batch_size": "batch",
    "amp": "amp",
    "cudnn_benchmark": "cudnn",
    "channels_last": "channels_last",
    "threads": "threads",
}

# AMP: the median loss of the measured steps may differ from the baseline's
# (same steps) by 10% of its magnitude plus 0.02 absolute (losses near zero);
# bf16 keeps ~3 significant digits, so honest AMP lands within ~1-3%. The same
# tolerance tells whether two runs of the script's own settings agree: a script
# that draws its own seed each run (a GAN printed three different seeds in three
# trials) gives losses that differ by more, and AMP cannot be judged by them.
DIVERGE_RELATIVE = 0.10
DIVERGE_ABSOLUTE = 0.02

# Statuses of a trial. Only "ok" can win; every other one is a rejection with a reason.
OK = "ok"
FAILED = ("oom", "nan", "crash", "hang", "unstable", "diverged", "rejected", "short")


def _show(value: Any) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


@dataclass(frozen=True)
class Candidate:
    """The knobs a trial changes from the script's own settings (empty: the baseline)."""

    settings: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(cls, values: dict[str, Any]) -> Candidate:
        order = {k: i for i, k in enumerate(KNOBS)}
        return cls(tuple(sorted(values.items(), key=lambda kv: order[kv[0]])))

    def as_dict(self) -> dict[str, Any]:
        return dict(self.settings)

    @classmethod
    def from_config(cls, config: Config) -> Candidate:
        """The knobs a tuned config sets (its training loader and compute sections)."""
        values = {**dataclasses.asdict(config.dataloader), **dataclasses.asdict(config.compute)}
        return cls.of({k: v for k, v in values.items() if v is not None and k in KNOBS})

    def get(self, knob: str, default: Any = None) -> Any:
        return self.as_dict().get(knob, default)

    def with_(self, knob: str, value: Any, own: dict[str, Any] | None = None) -> Candidate:
        """This candidate with one knob set; a value equal to the script's own is no change at all."""
        values = self.as_dict()
        if own is not None and own.get(knob, _MISSING) == value:
            values.pop(knob, None)
        else:
            values[knob] = value
        return Candidate.of(values)

    @property
    def changes(self) -> int:
        return len(self.settings)

    def cost(self) -> tuple[int, int, int]:
        """Simplicity order: fewer changed knobs, then fewer workers, then smaller batches."""
        return (self.changes, int(self.get("num_workers") or 0), int(self.get("batch_size") or 0))

    def label(self) -> str:
        if not self.settings:
            return "baseline"
        return " ".join(f"{SHORT[k]}={_show(v)}" for k, v in self.settings)

    def key(self) -> str:
        """Stable identity for the journal."""
        return ",".join(f"{k}={v!r}" for k, v in self.settings) or "baseline"

    def to_config(self, provenance: dict[str, Any] | None = None,
                  guidance: dict[str, Any] | None = None) -> Config:
        values = self.as_dict()
        return Config(
            dataloader=DataLoaderSettings(**{k: values[k] for k in DATA_KNOBS if k in values}),
            compute=ComputeSettings(**{k: values[k] for k in COMPUTE_KNOBS if k in values}),
            provenance=dict(provenance or {}),
            guidance=dict(guidance or {}),
        )


_MISSING = object()


@dataclass(frozen=True)
class Facts:
    """What the baseline run taught us about the script and the machine."""

    device_type: str = "cpu"
    torch_version: str | None = None
    cuda_version: str | None = None
    device_names: list[str] = field(default_factory=list)
    usable_cpus: int | None = None
    shm_bytes: int | None = None
    has_dataloader: bool = False
    loader: dict[str, Any] = field(default_factory=dict)  # the script's own settings of its first DataLoader
    batch_sampler: bool = False
    conv2d: int = 0
    grad_scaler: bool = False
    script_autocast: bool = False
    memory_limit: int | None = None  # bytes of the device the batch lives on (GPU or host)
    world_size: int | None = None
    local_ranks: int = 1
    torch_threads: int | None = None  # intra-op threads the script trains with (at its first step)
    cpu_count: int | None = None  # the machine's logical CPUs

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Facts:
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class TrialResult:
    """One finished trial: what ran, how fast, and whether it may win."""

    candidate: Candidate
    steps: int  # measured steps asked for
    stage: str  # "baseline" | "compute" | "batch" | "workers" | "data" | "confirm"
    status: str  # "ok" or one of FAILED
    reason: str = ""
    throughput: float | None = None  # median over measured windows
    spread: float | None = None  # relative spread of the window throughputs (IQR / median)
    unit: str = "samples/s"
    # The same, counting only compute time (step wall minus data wait): what the
    # model alone could do if the loader kept up. Compute and batch stages rank by it.
    compute_throughput: float | None = None
    compute_spread: float | None = None
    jitter: float | None = None  # relative IQR of measured step times
    step_time: float | None = None  # median seconds per measured step
    measured_seconds: float = 0.0  # wall time of the measured steps
    other_cpu: float | None = None  # cores other processes kept busy meanwhile (median)
    peak_mem: int | None = None  # bytes
    mem_kind: str = "host"  # "gpu" | "host"
    duration: float = 0.0  # seconds of wall time the trial took (start to exit)
    measured_steps: int = 0
    losses: list[float] = field(default_factory=list)  # finite losses of the measured steps, in order
    facts: Facts | None = None  # filled for the baseline
    record: str | None = None
    notes: list[str] = field(default_factory=list)
    steps_seen: int = 0  # training steps the script ran, warm-up included
    script_ended: bool = False  # the script ended by itself before the planned steps
    # AMP's loss check: "" (passed, or not AMP), "pending" (differs from the one run of the
    # script's own settings so far: whether its losses repeat is not known yet), "unjudged"
    # (the script's own runs disagree with each other: AMP cannot be judged by losses).
    loss_check: str = ""
    # Knobs the run's own findings name, with the value their fix suggests (the baseline's):
    # the tuner measures these first.
    evidence: dict[str, Any] = field(default_factory=dict)
    from_journal: bool = False

    @property
    def ok(self) -> bool:
        return self.status == OK and self.throughput is not None

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["candidate"] = self.candidate.as_dict()
        data["facts"] = self.facts.to_dict() if self.facts else None
        data.pop("from_journal")
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialResult:
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in data.items() if k in known}
        values["candidate"] = Candidate.of(dict(data.get("candidate") or {}))
        values["facts"] = Facts.from_dict(data["facts"]) if data.get("facts") else None
        values["from_journal"] = True
        return cls(**values)

    def replace(self, **changes: Any) -> TrialResult:
        return dataclasses.replace(self, **changes)


def loss_gap(mine: list[float], ref: list[float]) -> str:
    """How the median of `mine` differs from `ref`'s over the same number of steps, when beyond the tolerance."""
    n = min(len(mine), len(ref))
    if n == 0:
        return ""
    a = sorted(ref[:n])[n // 2]
    b = sorted(mine[:n])[n // 2]
    limit = DIVERGE_RELATIVE * abs(a) + DIVERGE_ABSOLUTE
    if abs(b - a) > limit:
        return f"median loss {b:.4g} vs baseline {a:.4g} (tolerance ±{limit:.3g})"
    return ""


def judge_losses(mine: list[float], references: list[list[float]]) -> tuple[str, str]:
    """(verdict, why) of losses against the runs of the script's own settings.

    verdict: "" (within tolerance, or nothing to compare), "diverged", "pending"
    (differs from the only run so far), "unjudged" (those runs disagree among themselves).
    """
    if not references or not mine:
        return "", ""
    gap = loss_gap(mine, references[0])
    if not gap:
        return "", ""
    if len(references) < 2:
        return "pending", (f"loss check pending: {gap}; the script's own settings ran once so far, so "
                           "whether its losses repeat from run to run is not known yet")
    spread = next((g for g in (loss_gap(r, references[0]) for r in references[1:]) if g), "")
    if spread:
        return "unjudged", ("AMP stability could not be judged: the script's losses differ from run to run "
                            f"(its own seed?): two runs of its own settings: {spread}")
    return "diverged", gap
