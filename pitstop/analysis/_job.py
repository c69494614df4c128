"""Provides job-level analysis over every rank of one job: JobSummary, stragglers, job findings."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

from pitstop.analysis import format as fmt
from pitstop.analysis._context import WARMUP, Advice, Finding, RuleFailure
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, run_delay, workers_delay
from pitstop.analysis._ended import gone_fix, outside_stop, rank_status, stopped_with_the_job
from pitstop.analysis._persist import Persistence, step_persistence, window_persistence
from pitstop.analysis._rankphases import (
    PhaseExcess,
    lagging_phases,
    main_phase,
    phase_counts,
    phase_excesses,
    rank_phases,
)
from pitstop.analysis._jobstate import JobState
from pitstop.analysis._loaderfix import loader_fix
from pitstop.analysis._state import RunState
from pitstop.analysis._stats import percentile
from pitstop.analysis._straggler import Straggler
from pitstop.analysis._summary import summarize
from pitstop.errors import reason_of
from pitstop.events import ProfileWindow, Sample, Step

# A rank is named over the last 50 measured steps of each rank: a median over
# 50 steps ignores a GC pause or a checkpoint, and is still recent enough (a
# few seconds of fast steps) to follow a rank that just became slow. Whether
# it persists is then judged over the whole run (`_persist`).
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
    status: str  # "running" | "finished" | "gone" | "stopped" (by a signal after the job was stopped from outside)
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
class JobSummary:
    """Figures of a whole job: throughput, one row per rank, stragglers."""

    session: str | None
    script: str | None
    world_size: int | None  # what the launcher said; `len(rows)` is what pitstop saw
    samples_per_s: float | None  # sum over ranks (each DDP rank consumes its own batch)
    steps_per_s: float | None  # the slowest rank's
    rows: tuple[RankRow, ...]
    stragglers: tuple[Straggler, ...]
    stopped: str | None = None  # the front's note: the job was stopped from outside (`_ended`)

    @property
    def ranks(self) -> int:
        """Ranks (processes) seen."""
        return len(self.rows)

    @property
    def gone(self) -> tuple[RankRow, ...]:
        """Ranks whose stream ended abnormally."""
        return tuple(r for r in self.rows if r.status == "gone")

    @property
    def stopped_ranks(self) -> tuple[RankRow, ...]:
        """Ranks ended by a signal after the job was stopped from outside (`stopped`): with it, not failed."""
        return tuple(r for r in self.rows if r.status == "stopped")



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


def job_summary(job: JobState, warmup: int = WARMUP, threshold: float = STRAGGLER_THRESHOLD) -> JobSummary:
    """Summary of every rank of a job; a rank without a measured step adds no throughput."""
    rows = []
    session = script = None
    world = None
    rates: list[float | None] = []
    step_rates = []
    runs = list(job.runs.values())
    stop = outside_stop(runs)
    for stream, label, run in _streams(job):
        if _spawns_ranks(run, runs):
            continue  # the process that only started the ranks (`torch.multiprocessing.spawn`): not a rank
        s = summarize(run, warmup)
        status, why = rank_status(run, stream in job.closed, job.exits.get(stream))
        if status == "gone" and stop is not None and stopped_with_the_job(run, why or "", stop):
            # Ctrl-C to pitstop over a torchrun job: torchrun ends its ranks with SIGINT or SIGTERM, and each
            # read "[high] rank N is gone ... find the first rank that failed", where none had.
            status = "stopped"
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
        stopped=stop.message if stop is not None else None,
    )


@dataclass(frozen=True)
class _Evidence:
    label: str
    run: RunState
    steps: int
    wall: float  # p50 over the rolling window
    data: float
    outside: float | None  # median over shared windows of window wall - collective, seconds
    window_wall: float | None  # median over the same windows of their wall per step
    windows: int
    phases: dict[str, float]  # rank_phases of its recent measured steps
    since: float  # when its first recent step began (the CPU readings taken from then on)


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


def _window_figures(run: RunState) -> dict[int, tuple[float, float]]:
    """{window start step: (outside-collective seconds per step, wall per step)} of the run's usable windows."""
    walls = {s.step: s.wall for s in run.steps}
    out = {}
    for w in run.profiles:
        value = _window_outside(w, walls)
        if value is not None:
            out[w.step_start] = (value, w.duration_s / (w.step_end - w.step_start))
    return out


def _alive(job: JobState, warmup: int) -> list[tuple[str, RunState, list[Step]]]:
    """(label, run, its last ROLLING_STEPS steps past warm-up) of the ranks compared: alive, with MIN_STEPS of them.

    Only the recent steps: a live front asks on every refresh, and a 64-rank job keeps up to 20,000 steps
    a rank; the whole run is walked only for a rank named (`_persistence`)."""
    alive = []
    for stream, label, run in _streams(job):
        status, _ = rank_status(run, stream in job.closed)
        if status == "gone":  # a dead rank holds nobody up any more
            continue
        recent = [s for s in run.recent_steps(ROLLING_STEPS + warmup) if s.step >= warmup][-ROLLING_STEPS:]
        if len(recent) >= MIN_STEPS:
            alive.append((label, run, recent))
    return alive


def _evidence(alive: list[tuple[str, RunState, list[Step]]],
              usable: list[dict[int, tuple[float, float]]]) -> list[_Evidence]:
    common = set.intersection(*(set(u) for u in usable)) if usable else set()
    # Windows start at the same step on every rank: compare the same steps.
    starts = sorted(common)[-MAX_WINDOWS:]
    out = []
    for (label, run, recent), windows in zip(alive, usable):
        outside = percentile((windows[s][0] for s in starts), 50) if starts else None
        window_wall = percentile((windows[s][1] for s in starts), 50) if starts else None
        out.append(
            _Evidence(
                label=label,
                run=run,
                steps=len(recent),
                wall=percentile((s.wall for s in recent), 50),
                data=percentile((s.data_wait for s in recent), 50),
                outside=outside,
                window_wall=window_wall,
                windows=len(starts) if outside is not None else 0,
                phases=rank_phases([s for s in recent if s.mark is None]),
                since=recent[0].t - recent[0].wall,
            )
        )
    return out


def _waited_for_cores(ev: list[_Evidence]) -> bool:
    """Whether the job's median rank, or its DataLoader workers, waited for a free core (Linux run delay) at least
    CONTENDED_WAIT_CORES."""
    for read in (run_delay, workers_delay):
        waits = [w for e in ev if (w := read(e.run)) is not None]
        if waits and percentile(waits, 50) >= CONTENDED_WAIT_CORES:
            return True
    return False


def _persistence(s: Straggler, i: int, alive: list[tuple[str, RunState, list[Step]]],
                 usable: list[dict[int, tuple[float, float]]], threshold: float, floor: float,
                 warmup: int) -> Persistence | None:
    """How `s` (rank index `i`) fared span by span over the run, on the basis that named it."""
    def total(time_s: float, ref: float, job_step: float) -> bool:
        extra = time_s - ref
        return extra >= floor and extra >= threshold * ref and extra >= MIN_SHARE * job_step

    ranks = [[x for x in run.steps if x.step >= warmup] for _, run, _ in alive]
    if s.basis == "outside-collective":
        by_windows = window_persistence(usable, i, total)
        if (by_windows is not None and by_windows.spans >= 2) or s.phase is None:
            return by_windows
        # Too few windows to tell: the phase that holds the extra time is judged over the steps instead.
    if s.phase is not None and s.basis in ("phase", "outside-collective"):
        name = s.phase.phase

        def phase(time_s: float, ref: float, job_step: float) -> bool:
            return phase_counts(PhaseExcess(name, time_s, ref), job_step, floor)

        return step_persistence(ranks, i, "phase", name, phase)
    return step_persistence(ranks, i, s.basis, None, total)


def _host(run: RunState) -> str | None:
    """The host a rank runs on: its node where the launcher names one (the 2-node test's namespaces), else its host."""
    return (run.hello.node or run.hello.host) if run.hello is not None else None


def _readings(e: _Evidence, recent: list[Step]) -> list[Sample]:
    """The sampler's readings of the rank's process tree taken while its recent steps ran; where none was (50
    steps of 19 ms, pytorch/examples' multigpu_torchrun on gloo, fell between two readings 1 s apart), the
    latest one within 2 s before them: each reading covers the second or so before it."""
    end = recent[-1].t
    read = [s for s in e.run.samples if any(p.role == "main" and p.cpu is not None for p in s.procs)]
    within = [s for s in read if e.since < s.t <= end + 1.0]
    return within or [s for s in read if e.since - 2.0 <= s.t <= e.since][-1:]


def _cores_used(e: _Evidence, recent: list[Step]) -> float | None:
    """Mean cores the rank's whole process tree (main and workers) kept busy over its recent steps."""
    cores = [sum(p.cpu for p in s.procs if p.cpu is not None) / 100.0 for s in _readings(e, recent)]
    return sum(cores) / len(cores) if cores else None


def _host_cpu(s: Straggler, i: int, ev: list[_Evidence], alive: list[tuple[str, RunState, list[Step]]]) -> Straggler:
    """`s` with its host's ranks, the cores they may have and the others' CPU per step (`Straggler.cpu_floor_s`).

    The others' CPU per step: the cores each kept busy over its recent steps times their mean step. The cores
    they may have: the CPUs they may run on less what other processes kept busy (the machine's busy cores less
    every rank's on the host, as `other_cores` reads it for one process): 3 gloo ranks on the 2-core VM beside
    other engineers' work read 0.3-0.6 cores each of a machine at 94%, about 0.6 cores taken by others.
    """
    host = _host(ev[i].run)
    rt = ev[i].run.runtime
    cores = (rt.usable_cpus or rt.cpu_count) if rt is not None else None
    if host is None or not cores or rt is None:
        return s
    sharing = [j for j, e in enumerate(ev) if _host(e.run) == host]
    s = dataclasses.replace(s, host=host, host_ranks=len(sharing), host_cores=cores)
    used = {j: c for j in sharing if (c := _cores_used(ev[j], alive[j][2])) is not None}
    per_step = [c * (alive[j][2][-1].t - ev[j].since) / len(alive[j][2]) for j, c in used.items() if j != i]
    if not per_step:
        return s
    recent = alive[i][2]
    free: float = cores
    busy = [x.system_cpu / 100.0 * rt.cpu_count for x in _readings(ev[i], recent)
            if x.system_cpu is not None and rt.cpu_count]
    if busy and len(used) == len(sharing):
        free = max(1.0, cores - max(0.0, sum(busy) / len(busy) - sum(used.values())))
    return dataclasses.replace(s, others_cpu_s=percentile(per_step, 50), host_free_cores=free,
                               cpu_step_s=(recent[-1].t - ev[i].since) / len(recent))


def _cpu_waits(ev: list[_Evidence], i: int, read: Callable[..., float | None] = run_delay
               ) -> tuple[float | None, float | None]:
    """(rank i's, the median of the others') cores' worth of threads that waited for a CPU over their recent steps:
    the ranks' own threads (`run_delay`), or their DataLoader workers' (`workers_delay`)."""
    waits = [read(e.run, since=e.since) for e in ev]
    others = [w for j, w in enumerate(waits) if j != i and w is not None]
    return waits[i], (percentile(others, 50) if others else None)


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

    The last ROLLING_STEPS steps (or MAX_WINDOWS windows) name a rank; the run
    then judges it span by span on the same basis (`_persist`): slower in most
    spans, it is a straggler of the run; in fewer but the latest, its excess is
    recent (`Straggler.recent`); not in the latest, the slowdown has passed and
    it is not named.
    """
    alive = _alive(job, warmup)
    usable = [_window_figures(run) for _, run, _ in alive]
    ev = _evidence(alive, usable)
    if len(ev) < 2:
        return []
    windowed = all(e.outside is not None for e in ev)
    job_step = percentile((e.wall for e in ev), 50)
    # What a rank's excess in the profiler windows is a share of: the job's step in those same windows.
    # Their steps are not the last steps': Lightning's BoringModel under DDP on 2 CPU ranks, rank 1's data
    # slow, had a job step of 46.2 ms in its profiler window and 28.8 ms over the last 50 steps, and rank 1's
    # 33.4 ms excess in the window read "up to 116% shorter job steps" (72% of the window's step; giving
    # rank 1 the fix's workers measured 38.6 -> 20.0 ms, 48% shorter).
    window_step = percentile((e.window_wall or 0.0 for e in ev), 50) if windowed else job_step
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
                label=e.label, rank=e.run.rank, basis=basis, time_s=time_s, reference_s=ref,
                job_step_s=window_step if basis == "outside-collective" else job_step,
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
    kept = []
    for i, s in found.items():
        if s.basis == "outside-collective" and s.windows < 2 and s.anatomy and s.phase is None:
            # One profiler window is one sample of a few steps: on the balanced gloo job beside a CPU hog
            # (load 19) one window put rank 0 at 42.0 ms outside collectives against 20.7 ms, while no
            # compared phase of its steps showed extra time. Named by one window, the steps must agree.
            continue
        persistence = _persistence(s, i, alive, usable, threshold, floor, warmup)
        if persistence is not None and not persistence.persistent and not persistence.latest:
            continue  # slower for a while, and no longer: a passing slowdown
        mine, others_wait = _cpu_waits(ev, i)
        workers, others_workers = _cpu_waits(ev, i, workers_delay)
        s = _host_cpu(s, i, ev, alive)
        kept.append(dataclasses.replace(s, persistence=persistence, cpu_wait=mine, others_cpu_wait=others_wait,
                                        workers_wait=workers, others_workers_wait=others_workers,
                                        loader=ev[i].run.training_loader()))
    return sorted(kept, key=lambda s: -s.extra_s)


JOB_RULE_IDS = ("rank-gone", "straggler")


def job_advice(job: JobState, warmup: int = WARMUP, summary: JobSummary | None = None) -> Advice:
    """The job's findings (`job_findings`); never raises: a failure is reported for both job rules.

    `summary`: the job's `job_summary`, when the caller has it already (over 64 ranks it is ~0.2 s).

    Advice is never worth breaking a viewer over, and never silently empty
    (`job_findings` returned [] on any exception, and no front knew).
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
                fix=gone_fix(row.status_reason or ""),
            )
        )
    for s in summary.stragglers:
        evidence = [
            s.text,
            f"the job waits {fmt.pct(s.share)} of its {fmt.duration(s.job_step_s)} step on {s.label} "
            f"(p50s over {s.over}; the rank table's p50s are over every measured step)",
        ]
        more_workers = loader_fix(s.loader, ["...", "num_workers=8", "pin_memory=True", "persistent_workers=True"])
        if s.cause == "data wait":
            fix = "# give that rank's DataLoader more workers or faster storage, e.g.\n" + more_workers
            cause = f"{s.label} waits longer for its batches than the other ranks, and they wait for it in every all-reduce."
        else:
            fix = ("# on that rank's machine: check the GPU's clocks and temperature (nvidia-smi -q -d CLOCK,TEMPERATURE),\n"
                   "# other processes on its GPU or CPUs, and work done only on that rank (logging, eval, checkpoints)")
            where = f" in its {s.where} phase" if s.where else ""
            if s.where and s.where != "backward":
                fix = f"# look for work that only {s.label} does in its {s.where} phase, e.g. under `if rank == ...:`\n" + fix
            cause = (f"{s.label} computes longer per step than the other ranks{where}, and they wait for it in every "
                     "all-reduce.")
        if s.waited_for_cores:
            # A rank whose threads wait for a core is slowed by the machine, not by its own work: the loaded
            # 2-core box made the balanced job's rank 1 look slow while its threads waited 0.6-1.7 cores' worth.
            whose = "Its threads" if s.threads_waited else "Its DataLoader workers"
            wait = s.cpu_wait if s.threads_waited else s.workers_wait
            cause += (f" {whose} waited {wait or 0.0:.1f} cores' worth for a CPU meanwhile: the machine's "
                      "other processes may be what slows it; re-measure with fewer processes beside it.")
            if s.cause == "data wait" and not s.threads_waited:
                # More workers where the workers wait for a core: more processes waiting for the same cores.
                fix = ("# its DataLoader workers wait for a CPU: first free that machine's cores (other processes: "
                       "top, ps), then re-measure; more workers only help where cores are free, e.g.\n" + more_workers)
        title = f"{s.label} is a straggler ({s.cause})"
        severity = "high" if s.share >= 0.5 else "medium"
        gain = s.gain
        if s.recent and s.persistence is not None:
            title = f"{s.label} is slower lately ({s.cause})"
            severity = "medium" if severity == "high" else "low"
            cause += (f" Over the run it kept pace: {s.persistence.text}, the latest among them; "
                      "it may be a passing slowdown.")
            gain += " (while the slowdown lasts)"
        out.append(
            Finding(
                rule="straggler",
                title=title,
                severity=severity,
                evidence=evidence,
                cause=cause,
                fix=fix,
                gain=gain,
            )
        )
    return out
