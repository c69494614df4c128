"""Provides Straggler: a rank the others in its job wait for, with the figures that show it and their words."""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.analysis import format as fmt
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES
from pitstop.analysis._persist import Persistence
from pitstop.analysis._rankphases import PhaseExcess
from pitstop.events import DataLoaderInfo


@dataclass(frozen=True)
class Straggler:
    """A rank the others wait for, with the numbers that show it."""

    label: str
    rank: int | None
    basis: str  # "outside-collective" (profiler windows) | "wall" | "data-wait" (steps only) | "phase" (step anatomy)
    time_s: float  # this rank's time per step on that basis
    reference_s: float  # median of the other ranks' on the same basis
    job_step_s: float  # the job's step time the share is taken of
    extra_data_s: float  # part of the extra time that is data wait
    extra_compute_s: float  # the rest
    steps: int  # measured steps the medians cover (this rank)
    windows: int  # profiler windows used (0 on a step basis)
    # Where the extra time is, from the step anatomy: the compared phase with the most extra time when it
    # counts ("optimizer", "data wait", ...), None when none does (then backward, or no anatomy).
    phase: PhaseExcess | None = None
    anatomy: bool = False  # the ranks' steps carried phases (Step.forward_s ...)
    # The same test span by span over the run (None: no span could be judged, a short run).
    persistence: Persistence | None = None
    # Cores' worth of this rank's threads that waited for a CPU over its recent steps, and the others' median.
    cpu_wait: float | None = None
    others_cpu_wait: float | None = None
    # The same for its DataLoader workers (their waits summed), and the others' median.
    workers_wait: float | None = None
    others_workers_wait: float | None = None
    # Its training DataLoader (`RunState.training_loader`): a data-wait fix names what built it (a framework's
    # own setting: HF's dataloader_num_workers), as every rank-level DataLoader fix does (_loaderfix).
    loader: DataLoaderInfo | None = None
    # The host it shares (`_job._host_cpu`): ranks of the job on it, the CPUs they may run on, and the others'
    # CPU seconds per step (every process of the rank: main and workers) over their recent steps. None: unread.
    host: str | None = None
    host_ranks: int = 0
    host_cores: int | None = None
    others_cpu_s: float | None = None
    host_free_cores: float | None = None  # host_cores less what other processes kept busy (at least 1)
    cpu_step_s: float | None = None  # the job's mean step over the same steps: what the CPU floor is a share of

    @property
    def recent(self) -> bool:
        """Slower lately (the last steps, the latest span) but not over most of the run."""
        return self.persistence is not None and not self.persistence.persistent

    @property
    def threads_waited(self) -> bool:
        """Its threads waited at least CONTENDED_WAIT_CORES for a CPU: the machine's load may be the extra time."""
        return self.cpu_wait is not None and self.cpu_wait >= CONTENDED_WAIT_CORES

    @property
    def workers_waited(self) -> bool:
        """Its extra time is data wait and its DataLoader workers waited at least CONTENDED_WAIT_CORES for a CPU."""
        return (self.cause == "data wait" and self.workers_wait is not None
                and self.workers_wait >= CONTENDED_WAIT_CORES)

    @property
    def waited_for_cores(self) -> bool:
        """Its threads, or for data wait its workers, waited for a CPU: the machine's load may be the extra time."""
        return self.threads_waited or self.workers_waited

    @property
    def over(self) -> str:
        """What the figures rest on: "its last 50 steps" or "the latest 5 profiler windows"."""
        return f"the latest {self.windows} profiler windows" if self.windows else f"its last {self.steps} steps"

    @property
    def rests_on(self) -> str:
        """"over its last 50 steps, slower in 14 of the run's 16 spans of 25 steps; its threads waited 1.2 cores' worth
        for a CPU (the others 0.9)": what the call rests on, said after its figures."""
        text = f"over {self.over}"
        p = self.persistence
        if p is not None and p.spans >= 2:  # one span is the figures above again
            text += f", {p.text}" + ("" if p.persistent else " (the excess is recent)")
        if self.threads_waited:
            others = f" (the others {self.others_cpu_wait:.1f})" if self.others_cpu_wait is not None else ""
            text += f"; its threads waited {self.cpu_wait:.1f} cores' worth for a CPU{others}"
        if self.workers_waited:
            others = f" (the others' {self.others_workers_wait:.1f})" if self.others_workers_wait is not None else ""
            text += f"; its DataLoader workers waited {self.workers_wait:.1f} cores' worth for a CPU{others}"
        return text

    @property
    def extra_s(self) -> float:
        """Seconds per step this rank spends beyond the others."""
        return self.time_s - self.reference_s

    @property
    def excess_frac(self) -> float:
        """Extra time relative to the others' (1.0 = twice theirs)."""
        return self.extra_s / self.reference_s if self.reference_s > 0 else float("inf")

    @property
    def share(self) -> float:
        """Extra time as a fraction of the job's step: what the job waits on this rank."""
        return self.extra_s / self.job_step_s if self.job_step_s > 0 else 0.0

    @property
    def cpu_floor_s(self) -> float | None:
        """The least a job step can take once every rank on its host does only the others' work: their CPU per step
        times the ranks on the host, over the cores other processes leave them (`host_free_cores`). None on a host
        of its own or without CPU readings.

        The others' pace while this rank straggles is no reference on a shared host: they computed while it
        was busy, and once it keeps pace every rank computes at once on the same cores. On 2 cores, 2 gloo
        ranks at 1 thread each, rank 1 with 8 extra 256x256 matmuls a step: rank 0 ran 18.4 ms a step outside
        collectives while rank 1 straggled, its 0.56 cores of a 37.9 ms mean step are 21.2 ms of CPU a step,
        and both ranks at that need 21.2 ms a step on the 2 cores (measured after the fix: 16.4-24.0 ms).
        """
        if self.host_ranks < 2 or not self.host_cores or self.others_cpu_s is None:
            return None
        return self.host_ranks * self.others_cpu_s / (self.host_free_cores or self.host_cores)

    @property
    def floor_binds(self) -> bool:
        """The host's cores, not the others' pace, set the step after the fix (`cpu_floor_s`)."""
        floor = self.cpu_floor_s
        return floor is not None and bool(self.cpu_step_s) and floor / (self.cpu_step_s or 1.0) > 1.0 - self.share

    @property
    def gain_share(self) -> float:
        """The job step's share the fix gives back: `share`, or less where the host's cores bound the fixed step."""
        if not self.floor_binds:
            return self.share
        return max(0.0, 1.0 - (self.cpu_floor_s or 0.0) / (self.cpu_step_s or 1.0))

    @property
    def gain(self) -> str:
        """"up to 45% shorter job steps if rank 1 kept pace (the 2 ranks on host vm share its 2 cores: at the
        others' 21.0 ms of CPU a step they need 42.0 ms of CPU a step, so at least 21.0 ms a step; the others'
        pace alone would say 55%)"; on a host of its own, or where the floor does not bind, the first clause."""
        text = f"up to {fmt.pct(self.gain_share)} shorter job steps if {self.label} kept pace"
        if self.floor_binds:
            free = self.host_free_cores or float(self.host_cores or 0)
            left = "" if free >= (self.host_cores or 0) - 0.05 else f", {free:.1f} of them left by other processes"
            text += (f" (the {self.host_ranks} ranks on host {self.host or '?'} share its {self.host_cores} cores{left}: "
                     f"at the others' {fmt.duration(self.others_cpu_s or 0.0)} of CPU a step they need "
                     f"{fmt.duration(self.host_ranks * (self.others_cpu_s or 0.0))} of CPU a step, so at least "
                     f"{fmt.duration(self.cpu_floor_s or 0.0)} a step; the others' pace alone would say "
                     f"{fmt.pct(self.share)})")
        return text

    @property
    def cause(self) -> str:
        """"data wait" when most of the extra time is spent waiting for batches, else "compute"."""
        return "data wait" if self.extra_data_s >= 0.5 * self.extra_s else "compute"

    @property
    def where(self) -> str:
        """The phase the extra time is in: "optimizer", "data wait", or "backward" when no compared phase
        shows it (backward is not compared: DDP's all-reduce waits in it); "" without a step anatomy."""
        if self.phase is not None:
            return self.phase.phase
        return "data wait" if self.cause == "data wait" else ("backward" if self.anatomy else "")

    @property
    def text(self) -> str:
        """One line: "rank 1: 34.9 ms per step outside collectives vs median 4.0 ms (+766%), extra time is compute
        (data +0.0 ms, compute +30.9 ms), in optimizer +29.0 ms per step"; on the phase basis
        "rank 1: optimizer +9.6 ms per step (10.0 ms vs median 0.4 ms of the other ranks), 23% of the job's step"."""
        if self.basis == "phase" and self.phase is not None:
            return (f"{self.label}: {self.phase.phase} {signed_ms(self.extra_s)} per step "
                    f"({fmt.duration(self.time_s)} vs median {fmt.duration(self.reference_s)} of the other ranks), "
                    f"{fmt.pct(self.share)} of the job's {fmt.duration(self.job_step_s)} step; {self.rests_on}")
        where = ""
        if self.phase is not None:
            # Medians do not add up: a phase's own median can exceed the whole's (+103.9 ms in optimizer
            # beside compute +91.9 ms on a loaded gloo job). A part is given a figure only within its whole.
            whole = self.extra_data_s if self.phase.phase == "data wait" else self.extra_compute_s
            figure = f" {signed_ms(self.phase.extra_s)} per step" if self.phase.extra_s <= whole + 1e-9 else ""
            where = f", in {self.phase.phase}{figure}"
        elif self.where:
            where = f", in {self.where}"
        what = {
            "outside-collective": "per step outside collectives",
            "wall": "per step",
            "data-wait": "data wait per step",
        }.get(self.basis, "per step")
        rel = fmt.change(self.excess_frac) if self.reference_s > 0 else "from 0"
        return (
            f"{self.label}: {fmt.duration(self.time_s)} {what} vs median {fmt.duration(self.reference_s)} ({rel}), "
            f"extra time is {self.cause} (data {signed_ms(self.extra_data_s)}, "
            f"compute {signed_ms(self.extra_compute_s)}){where}; {self.rests_on}"
        )


def signed_ms(seconds: float) -> str:
    """"+3.2 ms", "-0.4 ms": a difference with its sign."""
    return f"{'+' if seconds >= 0 else '-'}{fmt.duration(abs(seconds))}"

