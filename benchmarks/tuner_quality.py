"""Provides the tuner-quality benchmark: `pitstop tune` against the full grid of the same space, on a known landscape.

    python benchmarks/tuner_quality.py [--budget 16] [--knobs LIST] [--skip-busy] [--skip-demo] [--demo-budget 2m]

Runs the tuner twice, on a quiet machine and on a busy one (the benchmark keeps
one core busy with a CPU hog it starts before and kills after that run), then
every configuration of the same space once, quietly. Prints, per run, best
found / grid best throughput (target >= 0.95; the grid's own measurement of
each configuration is used for both, so the tuner's luck in its own runs cannot
flatter it), the same against the grid's top 3 and the picks re-measured 3
times each in alternating order (the best of 42 single runs is the luckiest
of many on a flat top: ~720-784 samples/s for 14 configurations at workers=2),
and whether the tuner picked a configuration that its own confirmation
measured slower than the baseline in a round (target: never); then tuner wall
time / grid wall time, and the demo's tuned speedup.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pitstop.profiling.launch import Target  # noqa: E402
from pitstop.tuning.results import Candidate  # noqa: E402
from pitstop.tuning.runner import TrialRunner, TrialSpec  # noqa: E402
from pitstop.tuning.space import build_space, parse_knobs  # noqa: E402

SCRIPT = ROOT / "tests" / "integration" / "scripts" / "tune_train.py"
# A per-sample read latency plus a CPU transform (workers matter) and a wide MLP
# whose per-step overhead makes larger batches faster per sample (batch size
# matters). The read latency keeps the landscape the same on a busy machine: with
# a purely CPU-bound transform (--work 12000, no --io-ms), one CPU hog on the
# 2-core VM made workers=2 slower than the baseline (168.7 vs 261.0 samples/s),
# so the busy run's best was another configuration than the quiet grid's.
WORKLOAD = ["--work", "4000", "--io-ms", "2", "--hidden", "512", "--n", "100000"]
KNOBS = "workers,batch_size,amp"
STEPS, WARMUP, MIN_TIME = "20", "3", "1.0"


def run_tune(cwd: Path, args: list[str], target: list[str]) -> tuple[dict[str, Any], float, list[str]]:
    cmd = [sys.executable, "-m", "pitstop.tuning", "--json", "--force", *args, *target]
    cwd.mkdir(parents=True, exist_ok=True)
    print("$ " + shlex.join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"tune failed with exit {proc.returncode}")
    return json.loads(proc.stdout), wall, cmd


def grid(cwd: Path, data: dict[str, Any], knobs: str = KNOBS
         ) -> tuple[dict[Candidate, float | None], float, Callable[[Candidate], float | None]]:
    """Every configuration of the tuner's space, once each, at the tuner's long-trial length.

    Also returns a function that measures one configuration again, the same way.
    """
    first = data["trials"][0]
    from pitstop.tuning.results import Facts

    facts = Facts.from_dict(first["facts"])
    space = build_space(facts, parse_knobs(knobs), tune_batch=True)
    long = max(t["steps"] for t in data["trials"])
    axes: list[list[tuple[str, Any]]] = [[("num_workers", w) for w in space.workers],
                                         [("batch_size", None), *(("batch_size", b) for b in space.batch)]]
    for knob, values in [*space.compute.items(), *space.data.items()]:
        axes.append([(knob, None), *((knob, v) for v in values)])
    combos = list(itertools.product(*axes))
    print(f"grid: {len(combos)} configurations x {long} steps (fresh process each)", flush=True)
    runner = TrialRunner(TrialSpec(Target(script=str(SCRIPT), args=tuple(WORKLOAD)), cwd, cwd / "grid",
                                   warmup=int(WARMUP)))
    base = runner(Candidate(), long, "baseline")
    results: dict[Candidate, float | None] = {}
    start = time.monotonic()

    def steps_of(cand: Candidate) -> int:
        # Larger batches run proportionally fewer steps, as the tuner's trials do (same samples).
        batch = cand.get("batch_size")
        own = space.own.get("batch_size")
        return max(10, math.ceil(long * own / batch)) if batch and own and batch > own else long

    def again(cand: Candidate) -> float | None:
        res = runner(cand, steps_of(cand), "remeasure")
        return res.throughput if res.ok else None

    for i, combo in enumerate(combos, 1):
        cand = Candidate()
        for knob, value in combo:
            if value is not None:
                cand = cand.with_(knob, value, space.own)
        res = base if cand == Candidate() else runner(cand, steps_of(cand), "grid")
        results[cand] = res.throughput if res.ok else None
        print(f"  [{i}/{len(combos)}] {cand.label():40s} "
              f"{res.throughput or 0:8.1f} {res.status}", flush=True)
    return results, time.monotonic() - start + base.duration, again


def remeasure(again: Callable[[Candidate], float | None], cands: list[Candidate],
              rounds: int = 3) -> dict[Candidate, float]:
    """Median of `rounds` fresh runs of each, in alternating order (the grid's best of 42 single runs
    is biased upwards on a flat top: the luckiest of many)."""
    runs: dict[Candidate, list[float]] = {c: [] for c in cands}
    for i in range(rounds):
        for cand in cands if i % 2 == 0 else list(reversed(cands)):
            value = again(cand)
            if value:
                runs[cand].append(value)
    return {c: sorted(v)[len(v) // 2] for c, v in runs.items() if v}


class CpuHog:
    """One core kept busy by a process of our own, started and killed around the busy run."""

    def __enter__(self) -> CpuHog:
        self.proc = subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL)
        return self

    def __exit__(self, *exc: object) -> None:
        self.proc.kill()
        self.proc.wait()


def slower_picks(data: dict[str, Any]) -> int:
    """Rounds in which the tuner's pick was measured slower than the baseline by its own confirmation."""
    contests = {json.dumps(c["config"], sort_keys=True): c["throughputs"] for c in data["contests"]}
    mine = contests.get(json.dumps(data["winner"], sort_keys=True))
    base = contests.get(json.dumps({}))
    if not data["winner"] or mine is None or base is None:
        return 0
    return sum(1 for a, b in zip(mine, base) if a <= b)


def describe(name: str, data: dict[str, Any], wall: float) -> str:
    winner = Candidate.of(data["winner"])
    interval = data.get("interval")
    rounds = f" (rounds x{interval[0]:.2f}-x{interval[1]:.2f})" if interval and data["confirmed"] else ""
    state = "confirmed" if data["confirmed"] else "not confirmed"
    return (f"{name}: tuner pick {winner.label()}  x{(data['speedup'] or 1.0):.2f}{rounds} {state}, "
            f"noise ±{data['noise']:.1%}  ({len(data['trials'])} trials, {wall:.0f} s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="16", help="the tuner's budget (default 16 trials)")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--skip-busy", action="store_true", help="no busy-machine run")
    parser.add_argument("--demo-budget", default="2m")
    parser.add_argument("--save", metavar="DIR", help="keep each run's JSON report here")
    parser.add_argument("--knobs", default=KNOBS,
                        help="the landscape's knobs (default %(default)s: a 42-configuration grid on 2 cores, "
                             "~5 min on the 2-core VM; add persistent_workers for 84)")
    args = parser.parse_args()
    # SIGTERM unwinds like Ctrl+C: the CPU hog and a running tuner are ended on the way out.
    signal.signal(signal.SIGTERM, lambda signum, frame: (_ for _ in ()).throw(KeyboardInterrupt()))
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-") as tmp:
        root = Path(tmp)
        options = ["--knobs", args.knobs, "--batch-size", "--budget", args.budget, "--steps", STEPS,
                   "--warmup", WARMUP, "--min-time", MIN_TIME]
        runs: dict[str, tuple[dict[str, Any], float]] = {}
        data, wall, _ = run_tune(root / "quiet", options, [str(SCRIPT), *WORKLOAD])
        runs["quiet"] = (data, wall)
        print(describe("quiet", data, wall), flush=True)
        if not args.skip_busy:
            with CpuHog():
                data, wall, _ = run_tune(root / "busy", options, [str(SCRIPT), *WORKLOAD])
            runs["busy"] = (data, wall)
            print(describe("busy (one core kept busy by a CPU hog)", data, wall), flush=True)
        results, grid_wall, again = grid(root, runs["quiet"][0], args.knobs)
        ok = {c: v for c, v in results.items() if v}
        best_c = max(ok, key=lambda c: ok[c])
        print(f"\ngrid best: {best_c.label()}  {ok[best_c]:.1f} samples/s")
        for name, (data, wall) in runs.items():
            if args.save:
                Path(args.save).mkdir(parents=True, exist_ok=True)
                (Path(args.save) / f"{name}.json").write_text(json.dumps(data, indent=1))
            winner = Candidate.of(data["winner"])
            found = ok.get(winner)
            quality = (found or 0.0) / ok[best_c]
            print(f"best found / grid best throughput ({name}): {quality:.3f}  (target >= 0.95; the grid measured "
                  f"the pick {winner.label()} at {found or 0:.1f})")
        # The grid's top 3 and every pick, measured 3 more times each, alternating: a fair best.
        picks = [Candidate.of(d["winner"]) for d, _ in runs.values()]
        top = sorted(ok, key=lambda c: -ok[c])[:3]
        careful = remeasure(again, list(dict.fromkeys([*top, *picks])))
        if careful:
            best_again = max(careful, key=lambda c: careful[c])
            print(f"re-measured (median of 3 alternating runs): best {best_again.label()} "
                  f"{careful[best_again]:.1f} samples/s")
            for name, (data, _) in runs.items():
                winner = Candidate.of(data["winner"])
                print(f"best found / best, re-measured ({name}): "
                      f"{careful.get(winner, 0.0) / careful[best_again]:.3f}  (target >= 0.95; "
                      f"{winner.label()} {careful.get(winner, 0.0):.1f})")
        print("picks their own confirmation measured slower than the baseline: "
              + ", ".join(f"{name} {slower_picks(data)}" for name, (data, _) in runs.items()) + "  (target 0)")
        tune_wall = runs["quiet"][1]
        print(f"tuner wall / grid wall (quiet):    {tune_wall / grid_wall:.3f}  ({tune_wall:.0f} s / "
              f"{grid_wall:.0f} s)")
        counts = ", ".join(f"{n} {len(d['trials'])}" for n, (d, _) in runs.items())
        print(f"trials: tuner {counts}, grid {len(results)}")
        if args.skip_demo:
            return 0
        demo = ROOT / "pitstop" / "demo" / "train.py"
        if not demo.exists():
            print("demo: skipped (pitstop/demo/train.py does not exist yet)")
            return 0
        data, wall, _ = run_tune(root / "demo", ["--budget", args.demo_budget, "--out", "demo.toml"],
                                 ["-m", "pitstop.demo.train", "--steps", "100000"])
        print(f"demo: {data['winner_label'] or 'baseline'}  x{(data['speedup'] or 1.0):.2f} over its default "
              f"configuration ({data['baseline_throughput'] or 0:.1f} -> {data['throughput'] or 0:.1f} "
              f"{data['unit']}; {'confirmed' if data['confirmed'] else 'not confirmed'}; "
              f"{len(data['trials'])} trials, {wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
