"""Provides the measured parts of gpu_acceptance.py: the GPU tests, the agent's overhead on GPU steps, `pitstop
tune` with every knob on the GPU conv workload, its speedup re-measured by alternating runs, and its pick against
a grid of the same knobs. Each returns table rows and keeps what it wrote under the work folder."""

from __future__ import annotations

import json
import math
import os
import signal
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _gpu_table import (
    FAIL,
    INFO,
    Deadline,
    Row,
    Target,
    failed,
    grid_candidates,
    judged,
    junit_outcomes,
    measure_alternating,
    paired_ratios,
    rows_of_tests,
    skipped,
    summarize,
)

ROOT = Path(__file__).resolve().parents[1]
CONV = ROOT / "tests" / "gpu" / "scripts" / "conv_train.py"
QUIET = {"PITSTOP_STATUS_INTERVAL": "3600"}
# Trials of the tuner and the grid: measured steps, warm-up, least seconds measured.
TRIAL_STEPS, TRIAL_WARMUP = 20, 5
# Re-measured runs: steps (the config's scaled by its batch size), the first WARMUP not timed.
RUN_STEPS, RUN_WARMUP = 150, 30


@dataclass(frozen=True)
class Setup:
    out: Path  # what comes back: the table, logs, the records' archive
    work: Path  # records and reports, archived at the end
    quick: bool
    cpu: bool  # --allow-cpu: a check of the harness with a tiny workload; the figures mean nothing

    def conv_args(self) -> list[str]:
        return ["--width", "8", "--batch", "16", "--blur-passes", "1"] if self.cpu else []

    def folder(self, name: str) -> Path:
        path = self.work / name
        path.mkdir(parents=True, exist_ok=True)
        return path


def run_bounded(cmd: list[str], timeout: float, cwd: Path, log: Path, env: dict[str, str] | None = None,
                errors: Path | None = None) -> int | None:
    """Run `cmd` in its own process group, output to `log` (stderr too, or to `errors`); its exit code, None
    when it was killed at `timeout`."""
    with open(log, "wb") as handle, open(errors or os.devnull, "wb") as err_handle:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=handle,
                                stderr=err_handle if errors else subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def tail(path: Path, lines: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])
    except OSError:
        return ""


# ---------------------------------------------------------------- tests/gpu


def gpu_tests(setup: Setup, budget: float) -> list[Row]:
    xml, log = setup.out / "gpu-tests.xml", setup.out / "gpu-tests.log"
    env = dict(os.environ, PITSTOP_GPU_KEEP=str(setup.folder("tests")))
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", f"--junitxml={xml}",
           str(ROOT / "tests" / "gpu")]
    code = run_bounded(cmd, budget, ROOT, log, env)
    if code is None:
        return [failed("tests/gpu", f"over its {budget:.0f} s budget ({tail(log, 1)})", "all pass")]
    if not xml.exists():
        return [failed("tests/gpu", f"pytest exit {code}: {tail(log)}", "all pass")]
    return rows_of_tests(junit_outcomes(xml.read_text()))


def gpm_row(setup: Setup) -> Row:
    """The GPM figures of the last reading of the GPM test's demo record, or why there are none."""
    from pitstop.events import Sample
    from pitstop.profiling.record import iter_record

    found = sorted((setup.work / "tests").glob("*gpm*.jsonl"))
    if not found:
        return Row("GPM (SM, tensor, DRAM)", "no record: the GPM test did not run", "", INFO)
    gpus = [e.gpus[0] for e in iter_record(found[0]) if isinstance(e, Sample) and e.gpus]
    read = [g for g in gpus if g.sm_active is not None]
    if not read:
        why = gpus[-1].unavailable.get("gpm", "no reason given") if gpus else "no GPU reading"
        return Row("GPM (SM, tensor, DRAM)", f"n/a ({why})", "", INFO)
    g = max(read, key=lambda x: x.sm_active or 0.0)
    return Row("GPM (SM, tensor, DRAM)", f"SM {g.sm_active:.0f}%, occupancy {g.sm_occupancy or 0:.0f}%, tensor "
               f"{g.tensor_active or 0:.0f}%, DRAM {g.dram_bw_util or 0:.0f}% (the demo's busiest reading; util "
               f"{g.util or 0:.0f}%)", "", INFO)


# ---------------------------------------------------------------- the agent's overhead


def overhead_plan(step_ms: float, quick: bool) -> tuple[int, int, int]:
    """(pairs of 25-step blocks, windowed periods, steps per period) for `_overhead_ab.py`."""
    if step_ms >= 5:  # ~10 ms: periods of 100 steps (5x the default density, as overhead.py)
        return (30, 6, 100) if quick else (60, 10, 100)
    # ~1 ms: a window's tables take longer than 100 such steps to build; the default period
    return (60, 4, 500) if quick else (120, 8, 500)


def overhead(setup: Setup, step_ms: float, budget: float) -> list[Row]:
    from overhead import ab_figures, run_ab

    name = f"agent, ~{step_ms:g} ms GPU steps"
    pairs, periods, every = overhead_plan(step_ms, setup.quick)
    env = dict(os.environ, PITSTOP_AB_WORKLOAD="_workload_gpu", PITSTOP_GPU_STEP_MS=str(step_ms), **QUIET)
    folder = setup.folder(f"overhead-{step_ms:g}ms")
    try:
        data = run_ab(pairs, periods, every, folder, env=env, timeout=budget)
    except subprocess.TimeoutExpired:
        return [failed(name, f"over its {budget:.0f} s budget", "<= 1.01")]
    except subprocess.CalledProcessError as err:
        return [failed(name, f"_overhead_ab.py exit {err.returncode}", "<= 1.01")]
    f = ab_figures(data)
    added = statistics.fmean(f.added_s) * 1e3 if f.added_s else 0.0
    return [
        judged(name, f"x{f.median_ratio:.4f} (90% x{f.low:.4f}..x{f.high:.4f}); median step {f.plain_s * 1e3:.2f} "
               f"-> {f.agent_s * 1e3:.2f} ms; {pairs} ABBA pairs", f.median_ratio, Target("<=", 1.01)),
        # The agent's target (10 us a step): what the training thread pays a step, whatever the step's length. The
        # typical step's shift (median on - median off), the mean's beside it (preempted steps move it).
        judged(f"agent us per step, ~{step_ms:g} ms", f"{f.median_us:+.1f} us on a typical step (90% "
               f"{f.median_us_low:.1f}..{f.median_us_high:.1f}); mean {f.added_us:+.1f} us "
               f"({f.us_low:.1f}..{f.us_high:.1f})", f.median_us, Target("<=", 10)),
        judged(f"agent + default windows, ~{step_ms:g} ms", f"x{f.windows_ratio:.4f}: {f.windows} windows "
               f"({f.skipped} skipped), each +{added:.1f} ms to a {f.period_s:.2f} s default period",
               f.windows_ratio, Target("<=", 1.015)),
    ]


# ---------------------------------------------------------------- the tuner


def tune(setup: Setup, budget: float) -> tuple[list[Row], dict[str, Any] | None]:
    folder = setup.folder("tune")
    # The tuner's --budget counts trial time; its own start and the report fit in the rest.
    cmd = [sys.executable, "-m", "pitstop.tuning", "--json", "--force", "--batch-size",
           "--budget", f"{max(20, int(budget * 0.8))}s", "--steps", str(TRIAL_STEPS), "--warmup", str(TRIAL_WARMUP),
           "--min-time", "1.0", "--out", str(folder / "pitstop.toml"), str(CONV), "--steps", "100000",
           *setup.conv_args()]
    log, progress = folder / "tune.json", folder / "tune.log"
    code = run_bounded(cmd, budget, folder, log, dict(os.environ, **QUIET), errors=progress)
    if code is None:
        return [failed("pitstop tune (every knob)", f"over its {budget:.0f} s budget ({tail(progress, 1)})")], None
    try:
        data: dict[str, Any] = json.loads(log.read_text())
    except ValueError:
        return [failed("pitstop tune (every knob)", f"exit {code}, no JSON report: {tail(progress)}")], None
    speedup = data.get("speedup") or 1.0
    state = "confirmed" if data.get("confirmed") else "not confirmed"
    statuses: dict[str, int] = {}
    for trial in data["trials"]:
        statuses[trial["status"]] = statuses.get(trial["status"], 0) + 1
    figure = (f"{data.get('winner_label') or 'baseline'}: x{speedup:.2f} by its own rounds, {state}; "
              f"{len(data['trials'])} trials ({', '.join(f'{n} {s}' for s, n in sorted(statuses.items()))})")
    skipped_knobs = "; ".join(f"{k}: {v}" for k, v in data.get("skipped", {}).items())
    return [Row("pitstop tune (every knob)", figure, "", INFO if data.get("winner") is not None else FAIL,
                detail=f"skipped: {skipped_knobs}" if skipped_knobs else "")], data


def scaled_steps(steps: int, least: int, own_batch: int | None, batch: int | None) -> int:
    """A larger batch runs proportionally fewer steps (the same samples), as the tuner's trials do."""
    if batch and own_batch and batch > own_batch:
        return max(least, math.ceil(steps * own_batch / batch))
    return steps


def remeasure(setup: Setup, data: dict[str, Any] | None, rounds: int, deadline: Deadline, budget: float) -> list[Row]:
    """The tuned config against the script's defaults: plain runs vs `pitstop run --config`, in ABBA order."""
    name, target = "tuned speedup, re-measured", Target(">=", 2.5)
    config = setup.work / "tune" / "pitstop.toml"
    if data is None:
        return [skipped(name, "the tuner gave no report", str(target))]
    if not data.get("improves") or not config.exists():
        return [judged(name, f"x1.00: the tuner wrote no config ({data.get('message') or 'nothing beat the defaults'})",
                       1.0, target)]
    folder = setup.folder("remeasure")
    own = (data["trials"][0].get("facts") or {}).get("loader", {}).get("batch_size")
    batch = (data.get("winner") or {}).get("batch_size")
    steps = {"plain": RUN_STEPS, "config": scaled_steps(RUN_STEPS, RUN_WARMUP + 20, own, batch)}
    stop = deadline.elapsed() + budget
    took: list[float] = []

    def measure(i: int, arm: str) -> float | None:
        report = folder / f"{arm}-{i}.json"
        args = [str(CONV), "--steps", str(steps[arm]), "--warmup", str(RUN_WARMUP), "--report", str(report),
                *setup.conv_args()]
        if arm == "plain":
            cmd = [sys.executable, *args]
        else:  # windows off: this is the config's gain; the windows' cost is the overhead rows'
            cmd = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--config",
                   str(config), "--record", str(folder / f"config-{i}.jsonl"), *args]
        start = deadline.elapsed()
        code = run_bounded(cmd, max(10.0, stop - deadline.elapsed()), folder, folder / f"{arm}-{i}.log",
                           dict(os.environ, **QUIET))
        took.append(deadline.elapsed() - start)
        if code != 0 or not report.exists():
            return None
        return float(json.loads(report.read_text())["samples_per_s"])

    def more_time() -> bool:  # a round is two runs: start one only when two more fit
        return not took or deadline.elapsed() + 2 * max(took) <= stop

    runs = measure_alternating(rounds, measure, more_time)
    ratio = summarize(paired_ratios(runs))
    (folder / "runs.json").write_text(json.dumps({f"{i}-{arm}": v for (i, arm), v in runs.items()}, indent=1))
    if ratio is None:
        return [failed(name, f"no round measured both arms ({len(runs)} runs)", str(target))]
    plain = statistics.median(v for (_, arm), v in runs.items() if arm == "plain" and v)
    tuned = statistics.median(v for (_, arm), v in runs.items() if arm == "config" and v)
    return [judged(name, f"{ratio.text()}: {plain:.0f} -> {tuned:.0f} samples/s, plain script vs pitstop run "
                   f"--config", ratio.median, target)]


# ---------------------------------------------------------------- the grid


def grid(setup: Setup, data: dict[str, Any] | None, deadline: Deadline, budget: float) -> list[Row]:
    """The tuner's pick against the best of a grid over the same knobs, each run as the tuner runs its trials."""
    from pitstop.profiling.launch import Target as Script
    from pitstop.tuning.results import Candidate, Facts
    from pitstop.tuning.runner import TrialRunner, TrialSpec
    from pitstop.tuning.space import build_space

    name, target = "tuner's pick / grid best", Target(">=", 0.95)
    if data is None or data.get("winner") is None or not data["trials"][0].get("facts"):
        return [skipped(name, "the tuner gave no pick", str(target))]
    facts = Facts.from_dict(data["trials"][0]["facts"])
    space = build_space(facts, None, tune_batch=True)
    pick = Candidate.of(data["winner"])
    candidates = grid_candidates(space, pick, setup.quick)
    folder = setup.folder("grid")
    runner = TrialRunner(TrialSpec(Script(script=str(CONV), args=("--steps", "100000", *setup.conv_args())),
                                   folder, folder / "trials", warmup=TRIAL_WARMUP),
                         timeout=60.0)  # a hung trial must not take the device call's last minutes
    stop = deadline.elapsed() + budget
    measured: dict[Candidate, float | None] = {}
    took: list[float] = []

    def run(cand: Candidate, stage: str) -> float | None:
        start = deadline.elapsed()
        steps = scaled_steps(TRIAL_STEPS, 10, space.own.get("batch_size"), cand.get("batch_size"))
        result = runner(cand, steps, stage)
        took.append(deadline.elapsed() - start)
        return result.throughput if result.ok else None

    run(Candidate(), "baseline")  # the runner's reference: trial time limits, the losses AMP is judged by
    measured[pick] = run(pick, "grid")
    for cand in candidates:
        if deadline.elapsed() + statistics.median(took) > stop:
            break
        if cand not in measured:
            measured[cand] = run(cand, "grid")
    (folder / "grid.json").write_text(json.dumps([{"config": c.as_dict(), "throughput": v}
                                                  for c, v in measured.items()], indent=1))
    ok = {c: v for c, v in measured.items() if v}
    if not ok or not measured.get(pick):
        return [failed(name, f"the pick did not run ({len(ok)} of {len(measured)} configurations ran)", str(target))]
    best = max(ok, key=lambda c: ok[c])
    quality = ok[pick] / ok[best]
    covered = sum(1 for c in candidates if c in measured)
    return [judged(name, f"{quality:.3f}: pick {ok[pick]:.0f}, grid best {ok[best]:.0f} samples/s "
                   f"({best.label()}); {covered} of {len(candidates)} grid configurations in the time",
                   quality, target, detail=f"pick: {pick.label()}")]

