"""Prints the step-time cost of pitstop's agent: plain vs instrumented, alternating in one run.

    python benchmarks/overhead.py [--rounds 3] [--steps 600]

One workload (~10 ms CPU steps, a DataLoader, SGD) runs as a plain script,
under `pitstop run --headless --profile off` (the always-on agent: step clock,
data-wait timer, loss reads, sampler, writer, socket), and under the default
profiler windows (`--profile 500:5:50`). The modes alternate, round after
round, so drift on the machine hits all of them alike. Each run times its own
iterations; the first 20 are dropped as warm-up. Printed: the median step time
of each mode and the ratios (targets: agent <= 1.01, with windows <= 1.03),
both as the ratio of the modes' medians and as the median of per-round ratios
(each instrumented run against the plain run next to it: drift on a shared VM
cancels within a round).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "_workload_10ms.py"
WARMUP = 20
HOTPATH = HERE / "_hotpath_ab.py"


def run(mode: str, steps: int, tmp: Path, index: int) -> list[float]:
    out = tmp / f"{mode}-{index}.json"
    cmd = [sys.executable, str(WORKLOAD), str(steps), str(out)]
    if mode != "plain":
        profile = "off" if mode == "agent" else "500:5:50"
        cmd = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", profile,
               "--record", str(tmp / f"{mode}-{index}.jsonl"), *cmd[1:]]
    env = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600")
    subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
    return json.loads(out.read_text())[WARMUP:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=500)
    args = parser.parse_args()
    modes = ("plain", "agent", "windows")
    medians: dict[str, list[float]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            for mode in modes:
                times = run(mode, args.steps, Path(tmp), i)
                medians[mode].append(statistics.median(times))
                print(f"round {i + 1} {mode:8s} median step {medians[mode][-1] * 1e3:7.3f} ms", flush=True)
    plain = statistics.median(medians["plain"])
    print(f"\nworkload: {args.steps} steps of ~{plain * 1e3:.1f} ms, {args.rounds} alternating rounds")
    print(f"command: python benchmarks/overhead.py --rounds {args.rounds} --steps {args.steps}")
    # The hot path alone, measured where VM noise cannot reach it: in one process,
    # the agent's hooks switched off and on in alternate blocks of 100 steps.
    hot = subprocess.run(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", str(HOTPATH), "1024"],
        capture_output=True, text=True, env=dict(os.environ, PITSTOP_STATUS_INTERVAL="3600"), check=True,
    ).stdout.strip().splitlines()[-1]
    print(f"hot path (in-process A/B, hooks off/on in alternate blocks): {hot}")
    spread = (max(medians["plain"]) - min(medians["plain"])) / plain
    print(f"noise floor: plain runs alone differ by {spread:.1%} (max - min over median)")
    for mode in ("agent", "windows"):
        ratio = statistics.median(medians[mode]) / plain
        paired = statistics.median(m / p for m, p in zip(medians[mode], medians["plain"]))
        target = 1.01 if mode == "agent" else 1.03
        label = "always-on agent (no profiler windows)" if mode == "agent" else "agent + default profiler windows"
        print(f"{label:40s} ratio of medians {ratio:.4f}, median per-round ratio {paired:.4f} (target <= {target})")


if __name__ == "__main__":
    main()
