"""Provides the tuner-quality benchmark: `pitstop tune` against the full grid of the same space, on a known landscape.

    python benchmarks/tuner_quality.py [--budget 40] [--skip-demo] [--demo-budget 3m]

Prints best found / grid best throughput (target >= 0.97; the grid's own
measurement of each configuration is used for both, so the tuner's luck in
its own runs cannot flatter it) and tuner wall time / grid wall time (target
<= 0.25), then the demo's tuned speedup over its default configuration.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pitstop.profiling.launch import Target  # noqa: E402
from pitstop.tuning.results import Candidate  # noqa: E402
from pitstop.tuning.runner import TrialRunner, TrialSpec  # noqa: E402
from pitstop.tuning.space import build_space, parse_knobs  # noqa: E402

SCRIPT = ROOT / "tests" / "integration" / "scripts" / "tune_train.py"
# A CPU-heavy per-sample transform (workers matter) and a wide MLP whose
# per-step overhead makes larger batches faster per sample (batch size matters).
WORKLOAD = ["--work", "12000", "--hidden", "512", "--n", "100000"]
KNOBS = "workers,batch_size,amp,persistent_workers"
STEPS, WARMUP, MIN_TIME = "20", "3", "1.0"


def run_tune(cwd: Path, args: list[str], target: list[str]) -> tuple[dict[str, Any], float, list[str]]:
    cmd = [sys.executable, "-m", "pitstop.tuning", "--json", "--force", *args, *target]
    print("$ " + shlex.join(cmd), flush=True)
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    wall = time.monotonic() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"tune failed with exit {proc.returncode}")
    return json.loads(proc.stdout), wall, cmd


def grid(cwd: Path, data: dict[str, Any], knobs: str = KNOBS) -> tuple[dict[Candidate, float | None], float]:
    """Every configuration of the tuner's space, once each, at the tuner's long-trial length."""
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
    for i, combo in enumerate(combos, 1):
        cand = Candidate()
        for knob, value in combo:
            if value is not None:
                cand = cand.with_(knob, value, space.own)
        res = base if cand == Candidate() else runner(cand, long, "grid")
        results[cand] = res.throughput if res.ok else None
        print(f"  [{i}/{len(combos)}] {cand.label():40s} "
              f"{res.throughput or 0:8.1f} {res.status}", flush=True)
    return results, time.monotonic() - start + base.duration


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget", default="16", help="the tuner's budget (default 16 trials)")
    parser.add_argument("--skip-demo", action="store_true")
    parser.add_argument("--demo-budget", default="2m")
    parser.add_argument("--knobs", default=KNOBS,
                        help="the landscape's knobs (default %(default)s: an 84-configuration grid, "
                             "~30 min on a 2-core VM; workers,batch_size,amp is 30)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-") as tmp:
        cwd = Path(tmp)
        options = ["--knobs", args.knobs, "--batch-size", "--budget", args.budget, "--steps", STEPS,
                   "--warmup", WARMUP, "--min-time", MIN_TIME]
        data, tune_wall, _ = run_tune(cwd, options, [str(SCRIPT), *WORKLOAD])
        winner = Candidate.of(data["winner"])
        print(f"tuner: {winner.label()}  x{data['speedup']:.2f} ±{data['spread']:.1%}  "
              f"({len(data['trials'])} trials, {tune_wall:.0f} s)", flush=True)
        results, grid_wall = grid(cwd, data, args.knobs)
        ok = {c: v for c, v in results.items() if v}
        best_c = max(ok, key=lambda c: ok[c])
        found = ok.get(winner)
        print(f"\ngrid best: {best_c.label()}  {ok[best_c]:.1f} samples/s; grid measured the tuner's "
              f"pick at {found or 0:.1f}")
        quality = (found or 0.0) / ok[best_c]
        cost = tune_wall / grid_wall
        print(f"best found / grid best throughput: {quality:.3f}  (target >= 0.97)")
        print(f"tuner wall / grid wall:            {cost:.3f}  ({tune_wall:.0f} s / {grid_wall:.0f} s; "
              f"target <= 0.25)")
        print(f"trials: tuner {len(data['trials'])}, grid {len(results)}")
        if args.skip_demo:
            return 0
        demo = ROOT / "pitstop" / "demo" / "train.py"
        if not demo.exists():
            print("demo: skipped (pitstop/demo/train.py does not exist yet)")
            return 0
        data, wall, _ = run_tune(cwd, ["--budget", args.demo_budget, "--out", "demo.toml"],
                                 ["-m", "pitstop.demo.train", "--steps", "100000"])
        print(f"demo: {data['winner_label']}  x{data['speedup']:.2f} ±{data['spread']:.1%} over its default "
              f"configuration ({data['baseline_throughput']:.1f} -> {data['throughput']:.1f} {data['unit']}; "
              f"{len(data['trials'])} trials, {wall:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
