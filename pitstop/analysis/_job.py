"""Provides job-level analysis over every rank of one job: JobSummary, stragglers, job findings."""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.analysis import format as fmt
from pitstop.analysis._context import WARMUP, Advice, Finding, RuleFailure
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, run_delay
from pitstop.analysis._rankphases import PhaseExcess, lagging_phases, main_phase, phase_excesses, rank_phases
from pitstop.analysis._state import JobState, RunState
from pitstop.analysis._stats import percentile
from pitstop.analysis._summary import exit_code_text, summarize
from pitstop.errors import reason_of
from pitstop.events import ProfileWindow

# "Persistently" means over the last 50 measured steps of each rank: a median
# over 50 steps ignores a GC pause or a checkpoint, and is still recent enough
# (a few seconds of fast steps) to follow a rank that just became slow.
ROLLING_STEPS = 50
# A p50 over fewer than 10 steps moves with one slow batch (as in _context.MIN_STEPS).
MIN_STEPS = 10
# Profiler windows used per rank: those of the latest 5 step ranges that every
# compared rank profiled (windows start at the same step index on all ranks).
# The median over 5 windows of 5 steps ignores two disturbed ones: on the
# 2-core gloo job one window in 5-10 had a rank's outside time 2-4x its usual.
MAX_WINDOWS = 5
# See _window_outside: a window longer than this times its steps' walls was cut by the run's end.
WINDOW_MAX_OVERRUN = 1.25
# A rank is a straggler when its time per step outside collectives is more than
# STRAGGLER_THRESHOLD above the median of the other ranks (1.0 = twice theirs)
# AND its extra time is at least MIN_SHARE of the job's step time (what the job
# would gain if it kept pace). Tuned on the real 2-rank gloo job on a 2-core
# box (docs/distributed.md): without a slow rank the worst rank was +66% above
# the other in 4 runs (its outside time is only 2-7 ms of a 4-9 ms step, and 2
# ranks, 2 workers and the launcher share 2 cores); with SLOW_RANK=1 (30 ms
# sleep per step) rank 1 was +590% to +900%, at 80-90% of the job's step.
STRAGGLER_THRESHOLD = 1.0
MIN_SHARE = 0.25
# Below this the extra time is noise in any basis (a timer tick on a 1 ms step).
MIN_EXCESS_S = 0.0005
# ...and below a scheduler timeslice when the ranks waited for a free core (the median rank's
# threads ready to run but waiting, as cpu-contended reads it): the balanced 2-rank gloo job in a
# quiet test-suite run on 2 cores, its ranks waiting ~0.3 cores' worth, had rank 1 at 4.2 ms a step
# outside collectives against rank 0's 2.1 ms (+103%, 30% of the job's step).
TIMESLICE_S = 0.003


@dataclass(frozen=True)
class RankRow:
    """One rank of a job: who it is, its figures over the measured steps, and whether it is alive."""

    label: str  # "rank 1", or "pid 4242" outside a launcher
    rank: int | None
    local_rank: int | None
    pid: int | None
    host: str | None
    status: str  # "running" | "finished" | "gone"
    status_reason: str | None  # why "gone": "killed: no End event", "signal (exit code 137)"
    exit_code: int | None  # from the End event; None when it never came
    steps: int  # every step seen
    measured_steps: int
    last_step: int | None
    samples_per_s: float | None
    steps_per_s: float | None
    step_p50_s: float | None
    data_wait_p50_s: float | None
    data_wait_frac: float | None
    compute_p50_s: float | None
    peak_mem_allocated: int | None  # torch CUDA bytes; None off CUDA
    peak_rss: int | None
    gpu_util_mean: float | None  # percent
    collective_ms: float | None  # per step, latest profiler window
    collective_overlap: float | None  # fraction overlapped with compute (NCCL only)


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
            return (f"{self.label}: {self.phase.phase} {_signed_ms(self.extra_s)} per step "
                    f"({fmt.duration(self.time_s)} vs median {fmt.duration(self.reference_s)} of the other ranks), "
                    f"{fmt.pct(self.share)} of the job's {fmt.duration(self.job_step_s)} step")
        where = ""
        if self.phase is not None:
            where = f", in {self.phase.phase} {_signed_ms(self.phase.extra_s)} per step"
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
            f"extra time is {self.cause} (data {_signed_ms(self.extra_data_s)}, "
            f"compute {_signed_ms(self.extra_compute_s)}){where}"
        )


@dataclass(frozen=True)
class JobSummary:
    """Figures of a whole job: throughput, one row per rank, stragglers."""

    session: str | None
    script: str | None
    world_size: int | None  # what the launcher said; `len(rows)` is what pitstop saw
    samples_per_s: float | None  # sum over ranks (each DDP rank consumes its own batch)
    steps_per_s: float | None  # the slowest rank's
    rows: tuple[RankRow, ...]
    stragglers: tuple[Straggler, ...]

    @property
    def ranks(self) -> int:
        """Ranks (processes) seen."""
        return len(self.rows)

    @property
    def gone(self) -> tuple[RankRow, ...]:
        """Ranks whose stream ended abnormally."""
        return tuple(r for r in self.rows if r.status == "gone")


def _signed_ms(seconds: float) -> str:
    return f"{'+' if seconds >= 0 else '-'}{fmt.duration(abs(seconds))}"


def stream_label(job: JobState, stream: str) -> str:
    """How fronts name a stream: "rank 1", "pid 4242", or the stream id before its Hello."""
    run = job.runs.get(stream)
    return next((label for label, r in job.ranks() if r is run), stream)


def _streams(job: JobState) -> list[tuple[str, str, RunState]]:
    """(stream, label, run) in `job.ranks()` order."""
    by_id = {id(run): stream for stream, run in job.runs.items()}
    return [(by_id[id(run)], label, run) for label, run in job.ranks()]


def _spawns_ranks(run: RunState, runs: list[RunState]) -> bool:
    """A process without a rank or a step whose children are ranks: pytorch/examples' multigpu.py's
    parent, which only calls mp.spawn, read as a third rank of a 2-rank job ("3 seen of world size 2")."""
    if run.rank is not None or run.total_steps or run.pid is None:
        return False
    return any(r.rank is not None and r.hello is not None and r.hello.parent_pid == run.pid for r in runs)


def rank_status(run: RunState, closed: bool, exit_code: int | None = None) -> tuple[str, str | None]:
    """("running" | "finished" | "gone", why gone). A stream is only gone once it closed.
    `exit_code`: how the process ended where the front that started it saw it (no End in its record)."""
    end = run.end
    if end is None:
        if closed and exit_code is not None:
            return "gone", f"killed before it could record its end ({exit_code_text(exit_code)})"
        if closed:
            return "gone", "stream ended without an End event (killed, e.g. SIGKILL or OOM killer)"
        return "running", None
    # "trial-complete" is the tuner ending a trial on purpose, with exit code 0.
    if end.reason == "terminated" and run.hello is not None and run.hello.parent_pid is not None:
        # A child that trained (hogwild), ended by SIGTERM from its parent: `with Pool()` ends
        # its workers that way once their work is done. Called "gone" (high), it read as a crash.
        return "finished", None
    if end.reason == "signal" and end.exit_code is not None:  # its launcher recorded it (`runflow.record_end`)
        return "gone", f"killed before it could record its end ({exit_code_text(end.exit_code)})"
    if end.reason not in ("exit", "trial-complete"):
        code = f", exit code {end.exit_code}" if end.exit_code is not None else ""
        return "gone", f"ended by {end.reason}{code}"
    if end.exit_code not in (None, 0):
        return "gone", f"exit code {end.exit_code}"
    return "finished", None


def job_summary(job: JobState, warmup: int = WARMUP, threshold: float = STRAGGLER_THRESHOLD) -> JobSummary:
    """Summary of every rank of a job; a rank without a measured step adds no throughput."""
    rows = []
    session = script = None
    world = None
    rates: list[float | None] = []
    step_rates = []
    runs = list(job.runs.values())
    for stream, label, run in _streams(job):
        if _spawns_ranks(run, runs):
            continue  # the process that only started the ranks (`torch.multiprocessing.spawn`): not a rank
        s = summarize(run, warmup)
        status, why = rank_status(run, stream in job.closed, job.exits.get(stream))
        hello = run.hello
        if hello is not None:
            session = session or hello.session
            script = script or hello.script or None
            world = world if world is not None else hello.world_size
        window = run.profiles[-1] if run.profiles else None
        rows.append(
            RankRow(
                label=label,
                rank=run.rank,
                local_rank=hello.local_rank if hello is not None else None,
                pid=run.pid,
                host=(hello.node or hello.host) if hello is not None else None,  # a job over nodes: its node
                status=status,
                status_reason=why,
                exit_code=run.end.exit_code if run.end is not None else None,
                steps=s.steps,
                measured_steps=s.measured_steps,
                last_step=run.last_step,
                samples_per_s=s.samples_per_s,
                steps_per_s=s.steps_per_s,
                step_p50_s=s.step_p50_s,
                data_wait_p50_s=s.data_wait_p50_s,
                data_wait_frac=s.data_wait_frac,
                compute_p50_s=s.compute_p50_s,
                peak_mem_allocated=s.peak_mem_allocated,
                peak_rss=s.peak_rss,
                gpu_util_mean=s.gpu_util_mean,
                collective_ms=window.collective_ms if window is not None else None,
                collective_overlap=window.collective_overlap if window is not None else None,
            )
        )
        if s.measured_steps:
            rates.append(s.samples_per_s)
            if s.steps_per_s is not None:
                step_rates.append(s.steps_per_s)
    # One rank that did not report its batch size makes the sum unknown, not smaller.
    samples = sum(r for r in rates if r is not None) if rates and all(r is not None for r in rates) else None
    return JobSummary(
        session=session,
        script=script,
        world_size=world,
        samples_per_s=samples,
        steps_per_s=min(step_rates) if step_rates else None,
        rows=tuple(rows),
        stragglers=tuple(stragglers(job, threshold=threshold, warmup=warmup)),
    )


@dataclass(frozen=True)
class _Evidence:
    label: str
    run: RunState
    steps: int
    wall: float  # p50 over the rolling window
    data: float
    outside: float | None  # median over shared windows of window wall - collective, seconds
    windows: int
    phases: dict[str, float]  # rank_phases of its recent measured steps


def _window_outside(w: ProfileWindow, walls: dict[int, float]) -> float | None:
    """Seconds per step outside collectives in one window; None for a window that cannot be used."""
    n = w.step_end - w.step_start
    if n <= 0 or w.collective_ms is None or w.duration_s <= 0:
        return None
    steps = [walls.get(i) for i in range(w.step_start, w.step_end)]
    if any(x is None for x in steps):
        return None  # its steps left the bounded deque, or never came
    # A window stopped by the run's end rather than by its schedule also timed
    # the shutdown: 1.9-70x the wall of its steps on the gloo job, where
    # complete windows were 0.98-1.13x. It would make any rank look slow.
    if w.duration_s > WINDOW_MAX_OVERRUN * sum(x or 0.0 for x in steps):
        return None
    # The window's own wall per step, not the run's p50: profiling slows the
    # window's steps (5 ms steps became 10-15 ms on the gloo job), and the
    # collective time was measured in those same steps.
    return max(0.0, w.duration_s / n - w.collective_ms / 1e3)


def _usable_windows(run: RunState) -> dict[int, float]:
    """{window start step: outside-collective seconds per step} of the run's usable windows."""
    walls = {s.step: s.wall for s in run.steps}
    out = {}
    for w in run.profiles:
        value = _window_outside(w, walls)
        if value is not None:
            out[w.step_start] = value
    return out


def _evidence(job: JobState, warmup: int) -> list[_Evidence]:
    alive = []
    for stream, label, run in _streams(job):
        status, _ = rank_status(run, stream in job.closed)
        if status == "gone":  # a dead rank holds nobody up any more
            continue
        recent = [s for s in run.recent_steps(ROLLING_STEPS + warmup) if s.step >= warmup][-ROLLING_STEPS:]
        if len(recent) >= MIN_STEPS:
            alive.append((label, run, recent))
    usable = [_usable_windows(run) for _, run, _ in alive]
    common = set.intersection(*(set(u) for u in usable)) if usable else set()
    # Windows start at the same step on every rank: compare the same steps.
    starts = sorted(common)[-MAX_WINDOWS:]
    out = []
    for (label, run, recent), windows in zip(alive, usable):
        outside = percentile((windows[s] for s in starts), 50) if starts else None
        out.append(
            _Evidence(
                label=label,
                run=run,
                steps=len(recent),
                wall=percentile((s.wall for s in recent), 50),
                data=percentile((s.data_wait for s in recent), 50),
                outside=outside,
                windows=len(starts) if outside is not None else 0,
                phases=rank_phases([s for s in recent if s.mark is None]),
            )
        )
    return out


def _waited_for_cores(ev: list[_Evidence]) -> bool:
    """Whether the job's median rank waited for a free core (Linux run delay) at least CONTENDED_WAIT_CORES."""
    waits = [w for e in ev if (w := run_delay(e.run)) is not None]
    return bool(waits) and percentile(waits, 50) >= CONTENDED_WAIT_CORES


def stragglers(job: JobState, threshold: float = STRAGGLER_THRESHOLD, warmup: int = WARMUP) -> list[Straggler]:
    """Ranks persistently slower than the median of the other ranks, slowest first.

    In DDP every rank waits in the all-reduce for the slowest, so wall step
    times come out equal: what differs is the time a rank spends OUTSIDE the
    collective. With profiler windows on every rank that time is the window's
    wall per step minus its collective time, and it is compared. Without
    windows only step figures exist: the data-wait p50 (measured in the
    DataLoader, so never equalised) and the wall p50 (which differs only when
    ranks do not synchronise). The reference is the median of the OTHER ranks,
    so in a 2-rank job a rank is compared with its peer and a straggler does
    not raise its own bar. See STRAGGLER_THRESHOLD for the threshold.
    """
    ev = _evidence(job, warmup)
    if len(ev) < 2:
        return []
    windowed = all(e.outside is not None for e in ev)
    job_step = percentile((e.wall for e in ev), 50)
    floor = TIMESLICE_S if _waited_for_cores(ev) else MIN_EXCESS_S
    excesses = phase_excesses([e.phases for e in ev])
    anatomy = all("forward" in e.phases for e in ev)
    found: dict[int, Straggler] = {}
    for i, e in enumerate(ev):
        others = ev[:i] + ev[i + 1:]
        ref_data = percentile((o.data for o in others), 50)
        extra_data = e.data - ref_data
        candidates: list[tuple[str, float, float]] = []  # (basis, time, reference)
        if windowed:
            candidates.append(("outside-collective", e.outside or 0.0, percentile((o.outside or 0.0 for o in others), 50)))
        else:
            candidates.append(("wall", e.wall, percentile((o.wall for o in others), 50)))
            candidates.append(("data-wait", e.data, ref_data))
        for basis, time_s, ref in candidates:
            extra = time_s - ref
            if extra < floor or extra < threshold * ref or extra < MIN_SHARE * job_step:
                continue
            data_part = min(max(extra_data, 0.0), extra)
            found[i] = Straggler(
                label=e.label, rank=e.run.rank, basis=basis, time_s=time_s, reference_s=ref, job_step_s=job_step,
                extra_data_s=data_part, extra_compute_s=extra - data_part, steps=e.steps, windows=e.windows,
                phase=main_phase(excesses[i], job_step, MIN_EXCESS_S), anatomy=anatomy,
            )
            break  # one entry per rank: the first basis that shows it
    # The mild ones: extra work in one phase, hidden in the totals (see _rankphases). Where profiler
    # windows show the time outside collectives, a rank that is not above the others there waits for
    # them: on the balanced gloo job rank 1's spawned loader worker gave it data wait 5.5 ms against
    # 1.8 ms, while it spent 35.9 ms a step in collectives waiting for rank 0.
    named = {i: s.extra_s for i, s in found.items()}
    if windowed:
        ahead = {i for i, e in enumerate(ev)
                 if (e.outside or 0.0) <= percentile(((o.outside or 0.0) for o in ev[:i] + ev[i + 1:]), 50)}
        excesses = [[] if i in ahead else xs for i, xs in enumerate(excesses)]
    # The same floor as the totals': where the ranks waited for a core, a phase moves by a timeslice
    # (the balanced gloo job in a loaded suite named rank 1's forward at +0.6 ms of a 5.8 ms step).
    for i, x in lagging_phases(excesses, job_step, floor, named).items():
        e = ev[i]
        data = x.extra_s if x.phase == "data wait" else 0.0
        found[i] = Straggler(
            label=e.label, rank=e.run.rank, basis="phase", time_s=x.time_s, reference_s=x.reference_s,
            job_step_s=job_step, extra_data_s=data, extra_compute_s=x.extra_s - data, steps=e.steps, windows=0,
            phase=x, anatomy=anatomy,
        )
    return sorted(found.values(), key=lambda s: -s.extra_s)


JOB_RULE_IDS = ("rank-gone", "straggler")


def job_advice(job: JobState, warmup: int = WARMUP, summary: JobSummary | None = None) -> Advice:
    """The job's findings (`job_findings`); never raises: a failure is reported for both job rules.

    `summary`: the job's `job_summary`, when the caller has it already (over 64 ranks it is ~0.2 s).

    Advice is never worth breaking a viewer over, and never silently empty
    (issue 13: `job_findings` returned [] on any exception, and no front knew).
    """
    try:
        return Advice(tuple(job_findings(job, warmup, summary)))
    except Exception as err:  # noqa: BLE001 - reported in Advice.failures
        return Advice(failures=tuple(RuleFailure(rule, reason_of(err)) for rule in JOB_RULE_IDS))


def job_findings(job: JobState, warmup: int = WARMUP, summary: JobSummary | None = None) -> list[Finding]:
    """Findings about the job as a whole: stragglers ("straggler") and dead ranks ("rank-gone").

    Raises what `job_summary` raises on broken data: `job_advice` is the front's call.
    """
    out = []
    if summary is None:
        summary = job_summary(job, warmup)
    for row in summary.gone:
        last = f", last step {row.last_step}" if row.last_step is not None else ", before its first step"
        out.append(
            Finding(
                rule="rank-gone",
                title=f"{row.label} is gone",
                severity="high",
                evidence=[f"{row.label} (pid {row.pid}): {row.status_reason}{last}"],
                cause="A rank that dies makes the other ranks hang in their next collective "
                "until the launcher tears the job down.",
                fix="# read the dead rank's own output (torchrun prints its exit code);\n"
                "# exit code 137 / -9 is SIGKILL, often the kernel OOM killer: check `dmesg`",
            )
        )
    for s in summary.stragglers:
        over = f"{s.windows} profiler windows" if s.windows else f"the last {s.steps} steps"
        evidence = [
            s.text,
            f"measured over {over}; the job waits {fmt.pct(s.share)} of its "
            f"{fmt.duration(s.job_step_s)} step on {s.label}",
        ]
        if s.cause == "data wait":
            fix = ("# give that rank's DataLoader more workers or faster storage, e.g.\n"
                   "DataLoader(..., num_workers=8, pin_memory=True, persistent_workers=True)")
            cause = f"{s.label} waits longer for its batches than the other ranks, and they wait for it in every all-reduce."
        else:
            fix = ("# on that rank's machine: check the GPU's clocks and temperature (nvidia-smi -q -d CLOCK,TEMPERATURE),\n"
                   "# other processes on its GPU or CPUs, and work done only on that rank (logging, eval, checkpoints)")
            where = f" in its {s.where} phase" if s.where else ""
            if s.where and s.where != "backward":
                fix = f"# look for work that only {s.label} does in its {s.where} phase, e.g. under `if rank == ...:`\n" + fix
            cause = (f"{s.label} computes longer per step than the other ranks{where}, and they wait for it in every "
                     "all-reduce.")
        out.append(
            Finding(
                rule="straggler",
                title=f"{s.label} is a straggler ({s.cause})",
                severity="high" if s.share >= 0.5 else "medium",
                evidence=evidence,
                cause=cause,
                fix=fix,
                gain=f"up to {fmt.pct(s.share)} shorter job steps if {s.label} kept pace",
            )
        )
    return out
