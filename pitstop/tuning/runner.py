"""Provides the trial runner: one fresh process per trial, a time limit, and a classified result."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pitstop.errors import LaunchError, PitstopError, SchemaError
from pitstop.events import Progress, Sample, Step, decode
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling.launch import SessionSettings, Target, child_env, launch, new_session_id
from pitstop.profiling.record import ReadResult, iter_record, siblings
from pitstop.tuning.evidence import evidence_of
from pitstop.tuning.guard import FileGuard, Restored
from pitstop.tuning.held import held_signals
from pitstop.tuning.measure import Measurement, measure
from pitstop.tuning.results import Candidate, TrialResult, judge_losses

# Stability thresholds (documented in docs/tuning.md; change both together).
# Window throughputs whose IQR is above 25% of their median do not measure one
# speed: on a quiet machine fresh-process windows agree within ~2-5%.
UNSTABLE_WINDOW_SPREAD = 0.25
# Step time averaged over groups of 2N steps (N workers; see measure.py) whose
# IQR exceeds 60% of the median group alternates between stalls and bursts
# beyond what round-robin loading explains: the mean would hide it.
UNSTABLE_STEP_JITTER = 0.60
# Jitter measured while other processes kept at least a quarter of a core busy
# (a shared machine; our 2-core CI box runs other suites beside ours) is not
# blamed on the configuration: the trial stays ok, with its wide spread.
BUSY_MACHINE_CORES = 0.25
# Any CUDA allocator retry during measured steps means the run lives at the
# memory edge: the next, longer batch or fragmentation OOMs it in production.
UNSTABLE_ALLOC_RETRIES = 1
# The fewest measured steps a trial needs to cut into windows.
MIN_MEASURED_STEPS = 10  # five windows of two
# Until the baseline has set a pace, a trial gets this long in all (imports, dataset set-up)...
FIRST_TRIAL_LIMIT = 600.0
# ... and this long to reach its first training step (--first-step-timeout): a
# script stuck before training (a download that stalls, a wrong data path it
# waits on) is ended with that reason instead of after ten silent minutes.
FIRST_STEP_TIMEOUT = 300.0
# How often a running trial's record is read for its step count (progress).
TICK_S = 0.5
# Seconds between the sampler's readings in a trial (1 s in `pitstop run`): a 20-step trial of
# 30 ms steps gets 6 readings while it trains (the data-wait rule's I/O bound needs 2).
TRIAL_SAMPLE_S = "0.1"

_OOM = re.compile(r"out of memory|OutOfMemoryError|can't allocate memory|Cannot allocate memory", re.I)
_ERROR_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Interrupt|Exit|Warning)?)(: .*)?$")


@dataclass
class TrialSpec:
    """How to run trials of one target."""

    target: Target
    cwd: Path  # the user's working directory (where relative paths mean something)
    records: Path  # directory for trial records and logs
    warmup: int = 5
    scratch: bool = False  # run in an empty scratch directory instead of `cwd` (--scratch)
    guard: FileGuard | None = None  # puts back what a trial changes in `cwd` (None: unguarded)
    extra_env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Tick:
    """A running trial, as its progress shows it."""

    index: int  # trials started by this runner, this one included
    label: str
    stage: str
    steps_done: int  # training steps seen so far (warm-up included)
    steps_planned: int  # warm-up + buffered + measured
    elapsed: float
    limit: float  # seconds it may take in all
    first_step_limit: float | None  # seconds it may take to its first step (the baseline), else None
    done: bool = False
    progress: Progress | None = None  # before its first step: what the training process has done (the agent's)


class TrialRunner:
    """Runs candidates as fresh processes and classifies what happened."""

    def __init__(self, spec: TrialSpec, timeout: float | None = None,
                 first_step_timeout: float = FIRST_STEP_TIMEOUT,
                 on_tick: Callable[[Tick], None] | None = None) -> None:
        self.spec = spec
        self.timeout = timeout  # None: adaptive, from the baseline's duration
        self.first_step_timeout = first_step_timeout
        self.on_tick = on_tick
        self.baseline: TrialResult | None = None
        # Losses of every successful run of the script's own settings: two that disagree
        # mean the script's losses do not repeat, and AMP cannot be judged by them.
        self.references: list[list[float]] = []
        self.restored: Restored | None = None  # what the guard did after the last trial
        # Files that changed during a trial where no hook saw it (a non-Python writer, or another
        # process writing in the directory meanwhile): not put back; path -> the trial it was seen in.
        self.unguarded: dict[str, int] = {}
        self.count = 0
        self._proc: subprocess.Popen[bytes] | None = None
        # Absolute: a --scratch trial runs elsewhere, where a relative record path means nothing.
        spec.records = spec.records.resolve()
        spec.records.mkdir(parents=True, exist_ok=True)

    def trial_timeout(self, steps: int) -> float:
        if self.baseline is None or not self.baseline.duration:
            # The first run also pays imports and dataset set-up, which a busy machine stretches
            # (torch's import alone took 10 s at load 7): a limit sized for the trials after it
            # would reject the script's own settings. A start-up hang is --first-step-timeout's.
            return max(self.timeout or 0.0, FIRST_TRIAL_LIMIT)
        if self.timeout is not None:
            return self.timeout
        # A trial may be slower than the baseline (bf16 on some CPUs is ~5-10x
        # slower); 6x the baseline per step, plus 30 s of start-up, still ends a hang.
        per_step = self.baseline.duration / max(1, self.baseline.steps + self.spec.warmup)
        return 30.0 + 6.0 * per_step * (steps + self.spec.warmup + 16)

    def buffered(self, candidate: Candidate) -> int:
        """Batches the DataLoader holds in flight (workers x prefetch_factor).

        Workers fill them while the first step builds the model, so the first
        that many steps find their data ready: they are dropped with the warm-up,
        or a 2-worker trial reads ~40% faster in its first window than later.
        """
        own = self.baseline.facts.loader if self.baseline and self.baseline.facts else {}
        workers = candidate.get("num_workers", own.get("num_workers") or 0)
        prefetch = candidate.get("prefetch_factor", own.get("prefetch_factor") or 2)
        return int(workers) * int(prefetch) if workers else 0

    def adopt(self, result: TrialResult) -> None:
        """A trial replayed from the journal sets the pace and the reference losses as a run one would."""
        self.count += 1
        self._learn(result)

    def _learn(self, result: TrialResult) -> None:
        if result.stage == "baseline" and result.ok and self.baseline is None:
            self.baseline = result
        if result.candidate == Candidate() and result.ok and result.losses:
            self.references.append(list(result.losses))

    def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
        self.count += 1
        result = self._run(candidate, steps, stage)
        self._learn(result)
        return result

    def _run(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
        spec = self.spec
        session = new_session_id(f"{spec.target.stem}-trial{self.count}")
        record = spec.records / f"{session}.jsonl"
        log_path = spec.records / f"{session}.log"
        drop = spec.warmup + self.buffered(candidate)
        settings = SessionSettings(
            session=session, record=str(record), script=spec.target.label, mode="trial",
            trial_steps=drop + steps, config=candidate.to_config().to_dict(),
            socket=False, profile=None,
        )
        env = dict(spec.extra_env)
        # A trial measures about a second: 10 readings a second give the findings
        # (an I/O-bound loader) and the neighbours' load a few samples of it.
        env.setdefault("PITSTOP_SAMPLE_INTERVAL", os.environ.get("PITSTOP_SAMPLE_INTERVAL", TRIAL_SAMPLE_S))
        target = spec.target
        workdir = spec.cwd
        if spec.scratch:
            workdir = Path(tempfile.mkdtemp(prefix="pitstop-trial-"))
            target = _absolute(spec.target, spec.cwd)
            if target.module:
                # `-m pkg.mod` finds the package through the working directory, which
                # is a scratch one: put the user's directory on the path instead.
                base = child_env(settings)["PYTHONPATH"]
                env["PYTHONPATH"] = os.pathsep.join([base, str(spec.cwd)])
        elif spec.guard is not None:
            env.update(spec.guard.env(child_env(settings)["PYTHONPATH"]))
            spec.guard.prepare()
        timeout = self.trial_timeout(steps)
        first_limit = self.first_step_timeout if self.baseline is None else None
        counter = StepCounter(record)
        start = time.monotonic()
        ended = ""  # "limit" or "first-step" when we ended it
        code: int | None = None

        def tick(done: bool = False) -> None:
            if self.on_tick is not None:
                self.on_tick(Tick(self.count, candidate.label(), stage, counter.steps, drop + steps,
                                  time.monotonic() - start, timeout, first_limit, done, counter.progress))

        try:
            with open(log_path, "wb") as log:
                try:
                    try:
                        with held_signals():  # a trial started is a trial kept, so that kill() below ends it
                            self._proc = launch(target, settings, cwd=workdir, new_session=True,
                                                stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                                extra_env=env)
                    except LaunchError as err:
                        return TrialResult(candidate, steps, stage, "crash", reason=str(err))
                    tick()
                    while True:
                        try:
                            code = self._proc.wait(timeout=TICK_S)
                            break
                        except subprocess.TimeoutExpired:
                            pass
                        counter.read()
                        tick()
                        elapsed = time.monotonic() - start
                        if elapsed > timeout:
                            ended = "limit"
                            break
                        if first_limit is not None and counter.steps == 0 and elapsed > first_limit:
                            ended = "first-step"
                            break
                finally:
                    self.kill()  # the whole group: orphaned DataLoader workers too
        finally:
            duration = time.monotonic() - start
            if spec.scratch:
                shutil.rmtree(workdir, ignore_errors=True)
            elif spec.guard is not None:
                counter.read()
                # Whole: a Ctrl-C halfway left the user's files half put back until the next tune.
                with held_signals():
                    self.restored = spec.guard.restore(setup_until=counter.first_step_start)
        counter.read()
        tick(done=True)
        if self.restored is not None and not spec.scratch:
            for path in self.restored.lost:
                self.unguarded.setdefault(path, self.count)
        if ended == "first-step":
            return TrialResult(candidate, steps, stage, "hang", duration=duration, record=str(record),
                               reason=f"no training step within {first_limit:.0f} s of the start "
                                      "(--first-step-timeout; a download or data preparation that takes "
                                      "longer needs a larger value)")
        result = classify(
            candidate, steps, stage, code, bool(ended), timeout, record, _tail(log_path),
            drop, self.references,
        )
        if stage == "baseline" and result.throughput is not None:
            result = result.replace(evidence=evidence_of(record, spec.warmup))
        return result.replace(duration=duration, record=str(record))

    def kill(self) -> None:
        """End the running trial's process group: TERM, 3 s of grace, then KILL for what is left.

        Whole, whatever comes meanwhile: a second Ctrl-C in the grace skipped the KILL, and a
        trial that handles SIGTERM by itself (a checkpoint on preemption) kept training."""
        with held_signals():
            self._kill()

    def _kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=3.0)
            except subprocess.TimeoutExpired:
                pass
        # Also when the main process exited by itself: DataLoader workers that
        # outlive it must not keep burning the cores the next trial measures.
        _signal_group(proc.pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.wait()


class StepCounter:
    """Counts the step events of a record as its agent writes them (for progress; never parses a line twice).

    Until the first step, it also decodes the latest sample line for the agent's
    `progress` (closures, backward calls, batches): one line a read, and none once steps flow.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = b""
        self.steps = 0
        self.first_step_start: float | None = None  # time.time() when the first training step began
        self.progress: Progress | None = None  # the latest, while no step has been seen

    def read(self) -> int:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except OSError:
            return self.steps
        self.offset += len(data)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # a line still being written
        sample = None
        for line in lines:
            if line.startswith(b'{"kind":"sample"'):
                sample = line
                continue
            if line.startswith(b'{"kind":"step"'):
                self.steps += 1
                if self.first_step_start is None:
                    try:
                        event = json.loads(line)
                        self.first_step_start = float(event["t"]) - float(event["wall"])
                    except (ValueError, KeyError, TypeError):
                        pass
            elif line.startswith(b'{"kind":"steps"'):  # a record's steps, many to a line
                try:
                    steps = [e for e in decode_events(line) if isinstance(e, Step)]
                except SchemaError:
                    continue
                self.steps += len(steps)
                if self.first_step_start is None and steps:
                    self.first_step_start = steps[0].t - steps[0].wall
        if self.steps:
            self.progress = None
        elif sample is not None:
            try:
                event = decode(sample)
            except SchemaError:
                event = None
            if isinstance(event, Sample):
                self.progress = event.progress
        return self.steps


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _absolute(target: Target, cwd: Path) -> Target:
    """The target with its script path made absolute (trials run in another directory)."""
    if target.script and not Path(target.script).is_absolute():
        return Target(script=str(cwd / target.script), module=target.module,
                      launcher=target.launcher, args=target.args)
    return target


def _tail(path: Path, limit: int = 64 * 1024) -> str:
    try:
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - limit))
            return handle.read().decode("utf-8", "replace")
    except OSError:
        return ""


def error_line(log: str) -> str:
    """The last exception line of a traceback in `log` (or its last line)."""
    lines = [line.rstrip() for line in log.splitlines() if line.strip()]
    if not lines:
        return ""
    seen_traceback = False
    found = ""
    for line in lines:
        # "Original Traceback" is how a DataLoader worker's own traceback is re-raised in the main process.
        if line.endswith("Traceback (most recent call last):"):
            seen_traceback = True
            continue
        if seen_traceback and not line.startswith((" ", "\t")) and _ERROR_LINE.match(line):
            found = line
            seen_traceback = False
    return (found or lines[-1])[:300]


def classify(candidate: Candidate, steps: int, stage: str, code: int | None, timed_out: bool,
             timeout: float, record: Path, log: str, warmup: int,
             references: list[list[float]] | None = None) -> TrialResult:
    """Turn an exit status, the captured output and the record into one result with its reason."""
    m, read_problem = _read(record, warmup)
    base: dict[str, Any] = dict(
        candidate=candidate, steps=steps, stage=stage, unit=m.unit, throughput=m.throughput,
        spread=m.spread, compute_throughput=m.compute_throughput,
        compute_spread=m.compute_spread, jitter=m.jitter, step_time=m.step_time,
        measured_seconds=m.measured_seconds, other_cpu=m.other_cpu, peak_mem=m.peak_mem,
        mem_kind=m.mem_kind, measured_steps=m.measured_steps, steps_seen=m.steps_seen,
        losses=[v for _, v in m.losses if _ >= warmup],
        facts=m.facts if stage == "baseline" else None,
        script_ended=m.agent_started and not m.trial_complete,
    )

    def result(status: str, reason: str = "") -> TrialResult:
        return TrialResult(status=status, reason=reason, **base)

    if m.nonfinite:
        return result("nan", f"loss was NaN/inf at step {m.nonfinite[0]}")
    if timed_out:
        return result("hang", f"no exit within the {timeout:.0f} s trial limit "
                              f"({m.steps_seen} of {warmup + steps} steps done)")
    if code is not None and code != 0:
        found = _OOM.search(log)
        if found:
            line = next((ln for ln in reversed(log.splitlines()) if _OOM.search(ln)), found.group(0))
            return result("oom", line.strip()[:300])
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            hint = " (the kernel's out-of-memory killer?)" if -code == signal.SIGKILL else ""
            return result("crash", f"killed by {name}{hint}")
        line = error_line(log)
        return result("crash", f"exit {code}: {line}" if line else f"exit {code}")
    if not m.agent_started:
        return result("crash", f"no record: the agent did not start ({read_problem or 'no events'})")
    # A knob skipped on one loader but applied to another was applied: [dataloader] knobs
    # reach the training loader and skip evaluation loaders by design (docs/config.md).
    rejected = {k: v for k, v in m.skipped.items() if k in candidate.as_dict() and k not in m.applied}
    if rejected:
        knob, why = next(iter(rejected.items()))
        return result("rejected", f"{knob} not applied: {why}")
    if m.steps_seen == 0:
        # Fewer --steps cannot help a script that never steps: say what can.
        return result("short", "the script ended before its first training step: does it need arguments "
                               "or data to train, or does its loop step without an optimizer pitstop sees "
                               "(then call pitstop.step() each step)?")
    if m.measured_steps < MIN_MEASURED_STEPS or m.throughput is None:
        return result("short", f"the script ended by itself after {m.steps_seen} steps; {warmup} warm-up + "
                               f"{MIN_MEASURED_STEPS} measured are needed: give it more steps (its own "
                               "epochs or iterations option) or lower --warmup")
    jittery = ""
    if m.spread is not None and m.spread > UNSTABLE_WINDOW_SPREAD:
        jittery = f"window throughputs spread ±{m.spread:.0%} (limit {UNSTABLE_WINDOW_SPREAD:.0%})"
    elif m.jitter is not None and m.jitter > UNSTABLE_STEP_JITTER:
        jittery = f"step-time jitter {m.jitter:.0%} of the median step (limit {UNSTABLE_STEP_JITTER:.0%})"
    notes: list[str] = []
    if jittery and m.other_cpu is not None and m.other_cpu >= BUSY_MACHINE_CORES:
        # Not this configuration's doing: its wide spread still widens the noise
        # every comparison uses, so it cannot win on a lucky window.
        notes.append(f"{jittery} while other processes kept {m.other_cpu:.1f} cores busy: "
                     "not blamed on this configuration")
    elif jittery:
        return result("unstable", jittery)
    if m.alloc_retries is not None and m.alloc_retries >= UNSTABLE_ALLOC_RETRIES:
        return result("unstable", f"{m.alloc_retries} CUDA allocator retries: memory near the limit")
    verdict, why = _loss_verdict(candidate, base["losses"], references or [])
    if verdict == "diverged":
        return result("diverged", why)
    if why:
        notes.append(why)
    if not m.trial_complete:
        notes.append(f"the script ended by itself after {m.steps_seen} steps ({m.measured_steps} measured of "
                     f"{steps} planned): judged on what it measured")
    return result("ok").replace(notes=notes, loss_check=verdict)


def _read(record: Path, warmup: int) -> tuple[Measurement, str]:
    """The trial's measurement: one record, or every rank's of a launcher (torchrun) trial."""
    files = [record, *siblings(record, "rank")]
    measured: list[Measurement] = []
    problems: list[str] = []
    for path in files:
        read = ReadResult()
        events = []
        try:
            for event in iter_record(path, read):
                events.append(event)
        except PitstopError as err:  # a missing or corrupt record is a result, not a tuner crash
            problems.append(str(err))
        measured.append(measure(events, warmup))
    if len(measured) == 1:
        return measured[0], "; ".join(problems)
    return combine_ranks(measured), "; ".join(problems)


def _total(values: list[float | None]) -> float | None:
    return None if any(v is None for v in values) else sum(v for v in values if v is not None)


def _worst(values: list[Any]) -> Any:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def combine_ranks(ranks: list[Measurement]) -> Measurement:
    """One job from its ranks: throughput is the job's (each rank consumes its own
    batches, so the sum), time and spread are the worst rank's, and a NaN, a missing
    agent or an unfinished rank anywhere fails the whole trial."""
    first = ranks[0]
    facts = dataclasses.replace(first.facts, local_ranks=max(first.facts.local_ranks, len(ranks)))
    return dataclasses.replace(
        first,
        steps_seen=min(m.steps_seen for m in ranks),
        measured_steps=min(m.measured_steps for m in ranks),
        throughput=_total([m.throughput for m in ranks]),
        compute_throughput=_total([m.compute_throughput for m in ranks]),
        spread=_worst([m.spread for m in ranks]),
        compute_spread=_worst([m.compute_spread for m in ranks]),
        step_time=_worst([m.step_time for m in ranks]),
        jitter=_worst([m.jitter for m in ranks]),
        peak_mem=_worst([m.peak_mem for m in ranks]),
        nonfinite=sorted({s for m in ranks for s in m.nonfinite}),
        alloc_retries=(sum(m.alloc_retries or 0 for m in ranks)
                       if any(m.alloc_retries is not None for m in ranks) else None),
        trial_complete=all(m.trial_complete for m in ranks),
        agent_started=all(m.agent_started for m in ranks),
        skipped={k: v for m in ranks for k, v in m.skipped.items()},
        facts=facts,
    )


def _loss_verdict(candidate: Candidate, losses: list[float], references: list[list[float]]) -> tuple[str, str]:
    """AMP at the script's batch size against the runs of the script's own settings (other knobs leave the maths alone)."""
    if candidate.get("amp") in (None, "off") or candidate.get("batch_size"):
        return "", ""
    return judge_losses(losses, references)


_PATH_ERROR = re.compile(r"FileNotFoundError|No such file or directory|ModuleNotFoundError|No module named|"
                         r"NotADirectoryError|Error downloading|cannot open|can't open file")


def path_hint(result: TrialResult, spec: TrialSpec) -> str:
    """When a failed baseline points at paths: where trials run, and the fix that applies."""
    if result.status != "crash" or not _PATH_ERROR.search(result.reason):
        return ""
    cwd = spec.cwd.resolve()
    if spec.scratch:
        return (f"the error points at a path: trials ran in an empty scratch directory (--scratch), where the "
                f"script's relative paths find nothing; drop --scratch to run them in {cwd}, as `pitstop run` does")
    hints = [f"the error points at a path: trials run in {cwd} (where pitstop tune was started), as "
             "`pitstop run` does"]
    script_dir = (cwd / spec.target.script).resolve().parent if spec.target.script else None
    missing = re.search(r"No module named '([\w.]+)'", result.reason)
    if missing:
        name = missing.group(1).split(".")[0]
        for folder in dict.fromkeys(d for d in (cwd, script_dir, *(script_dir.parents if script_dir else ()))
                                    if d is not None):
            if (folder / name).is_dir() or (folder / f"{name}.py").is_file():
                hints.append(f"{name} is in {folder}: put that folder on the import path, e.g. "
                             f"PYTHONPATH={folder} pitstop tune ...")
                break
    if script_dir is not None and script_dir != cwd:
        hints.append(f"if the script expects to be started from its own folder: cd {script_dir} and tune from there")
    return "; ".join(hints)
