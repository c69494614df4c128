"""Prints the job step time of a 2-rank torchrun job under `pitstop run` vs plain torchrun, and the ratio.

Usage: python benchmarks/distributed_overhead.py [--rounds 12] [--steps 600] [--slice 1.0] [--nproc 2]
       [--aa | --pitstop-args ARGS]

Each round starts two real jobs, `torchrun --nproc_per_node 2 ddp_bench.py`
and `pitstop run --headless -- torchrun --nproc_per_node 2 ddp_bench.py`, and
lets them take turns: one job runs for a slice (1 s) while every process of the
other (pitstop's front, the launcher, the ranks with their agent threads) is
stopped with SIGSTOP, then they swap, until both finish. So both arms run under
the same machine conditions, second by second, and no cost of one can land in
the other's time. The workload (a DDP MLP on gloo, ~25 ms steps, no DataLoader
workers) times each step itself with perf_counter and writes the spans; a job
step spans the ranks' step i, and counts only when it lies inside one of its
job's slices, 50 ms or more after the job was continued. Steps 0-19 are warm-up.
A round's ratio is the median kept job step under pitstop over the same for
plain; which job starts first alternates by round, and the figure is the
geometric mean of the rounds' ratios, with a bootstrap 90% interval over rounds.
pitstop runs with its defaults (profiler windows 500:5:50: two windows fall
inside 600 steps, as in a real run). Target: ratio <= 1.02.

Why slices and not whole jobs one after another (the first version): on the
2-core VM, where the two ranks saturate the CPU, one whole job's median differs
from the next one's by 5-10% with nothing changed (rounds' ratios 0.93-1.19),
so eight rounds could not resolve 2%. Jobs taking turns cut the round-to-round
spread to ~2% (sd of rounds' ratios, measured by `--aa`, which runs plain vs
plain and should print ~1.00).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

WORKLOAD = r'''
import json, os, sys, time
import torch
import torch.distributed as dist

steps = int(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
torch.set_num_threads(1)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(
    torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
    torch.nn.Linear(1024, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(128, 512), torch.randint(0, 10, (128,))
spans = []
for i in range(steps):
    t0 = time.perf_counter()  # CLOCK_MONOTONIC, the benchmark's clock too
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    spans.append((t0, time.perf_counter()))
with open(f"{os.environ['BENCH_OUT']}.{rank}", "w") as f:
    json.dump(spans, f)
dist.destroy_process_group()
'''

WARMUP = 20
MARGIN_S = 0.05  # steps starting this soon after a job is continued are not counted


class Job:
    """One launched job whose whole process tree can be stopped and continued."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], out: Path, nproc: int, log: Path) -> None:
        self.name, self.cmd, self.out, self.nproc, self.log = name, cmd, out, nproc, log
        self.slices: list[tuple[float, float]] = []
        with open(log, "wb") as handle:
            self.proc = subprocess.Popen(cmd, env={**env, "BENCH_OUT": str(out)}, stdout=subprocess.DEVNULL,
                                         stderr=handle, start_new_session=True)
        self.signal(signal.SIGSTOP)

    def _tree(self) -> list[psutil.Process]:
        """The launcher and every descendant; empty once the launcher is gone."""
        try:
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        except psutil.Error:
            return []

    def signal(self, sig: int) -> None:
        """Signal the launcher first (it cannot start new children while stopped), then every descendant."""
        done: set[int] = set()
        while True:
            fresh = [p for p in self._tree() if p.pid not in done]
            if not fresh:
                return
            for p in fresh:
                done.add(p.pid)
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass

    def running(self) -> bool:
        return self.proc.poll() is None

    def run_slice(self, seconds: float) -> None:
        self.signal(signal.SIGCONT)
        start = time.monotonic()
        try:
            self.proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            pass
        self.signal(signal.SIGSTOP)
        self.slices.append((start, time.monotonic()))

    def kill(self) -> None:
        """Kill the whole tree (gathered while the launcher is stopped, so it cannot grow)."""
        self.signal(signal.SIGSTOP)
        for p in self._tree():
            try:
                p.kill()
            except psutil.Error:
                pass
        self.proc.wait()

    def kept_steps(self) -> list[float]:
        """Job step times (slowest rank's span of step i) that lie inside this job's slices."""
        written = all(Path(f"{self.out}.{r}").exists() for r in range(self.nproc))
        if not written:
            tail = self.log.read_text(errors="replace")[-2000:]
            raise SystemExit(f"{self.name} job failed ({self.proc.returncode}): {' '.join(self.cmd)}\n{tail}")
        if self.proc.returncode != 0:
            # gloo sometimes aborts a rank in destroy_process_group after the spans were written
            # (seen in plain torchrun jobs too): the measurement stands, and is reported.
            print(f"  note: the {self.name} job exited {self.proc.returncode} after every rank wrote its times "
                  "(gloo teardown); times kept", flush=True)
        per_rank = [json.loads(Path(f"{self.out}.{r}").read_text()) for r in range(self.nproc)]
        kept = []
        for spans in list(zip(*per_rank))[WARMUP:]:
            t0, t1 = min(s[0] for s in spans), max(s[1] for s in spans)
            if any(start + MARGIN_S <= t0 and t1 <= end for start, end in self.slices):
                kept.append(t1 - t0)
        return kept


def run_round(arms: list[tuple[str, list[str]]], first: int, args: argparse.Namespace, env: dict[str, str],
              tmp: Path, tag: str) -> dict[str, list[float]]:
    jobs: list[Job] = []
    try:
        order = [first, 1 - first]
        for i in order:
            name, cmd = arms[i]
            jobs.append(Job(name, cmd, env, tmp / f"times-{tag}-{i}", args.nproc, tmp / f"log-{tag}-{i}"))
        deadline = time.monotonic() + args.timeout
        turn = 0
        while any(job.running() for job in jobs):
            if time.monotonic() > deadline:
                raise SystemExit(f"round {tag} ran past {args.timeout} s")
            job = jobs[turn % 2]
            turn += 1
            if job.running():
                job.run_slice(args.slice)
        return {job.name: job.kept_steps() for job in jobs}
    finally:
        for job in jobs:
            if job.running():
                job.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--slice", type=float, default=1.0, help="seconds a job runs before the other takes its turn")
    ap.add_argument("--nproc", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a round may take")
    ap.add_argument("--aa", action="store_true", help="calibration: plain torchrun in both arms")
    ap.add_argument("--pitstop-args", default="", metavar="ARGS",
                    help="extra `pitstop run` options for the pitstop arm, e.g. '--profile off'")
    args = ap.parse_args()
    repo = Path(__file__).resolve().parent.parent
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{repo}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.pop("PITSTOP_SESSION", None)
    ratios: list[float] = []
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="pitstop-bench-") as tmp_name:
        tmp = Path(tmp_name)
        script = tmp / "ddp_bench.py"
        script.write_text(WORKLOAD)
        env["PITSTOP_RECORD_DIR"] = str(tmp / "records")
        env["PITSTOP_RUNTIME_DIR"] = str(tmp / "rt")
        torchrun = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node",
                    str(args.nproc), str(script), str(args.steps)]
        for r in range(args.rounds):
            under = [sys.executable, "-m", "pitstop.cli", "run", "--headless", *shlex.split(args.pitstop_args),
                     "--record", str(tmp / f"records-{r}"), "--", *torchrun]
            arms = [("plain", torchrun), ("plain'" if args.aa else "pitstop", torchrun if args.aa else under)]
            first = r % 2
            kept = run_round(arms, first, args, env, tmp, str(r))
            (a, _), (b, _) = arms
            med_a, med_b = statistics.median(kept[a]), statistics.median(kept[b])
            ratios.append(med_b / med_a)
            print(f"round {r + 1} ({arms[first][0]} first): {a} {med_a * 1e3:.2f} ms ({len(kept[a])} steps), "
                  f"{b} {med_b * 1e3:.2f} ms ({len(kept[b])} steps), ratio {ratios[-1]:.4f}", flush=True)
    logs = [math.log(x) for x in ratios]
    ratio = math.exp(statistics.mean(logs))
    rng = random.Random(0)
    boot = sorted(math.exp(statistics.mean(rng.choices(logs, k=len(logs)))) for _ in range(2000))
    lo, hi = boot[int(0.05 * len(boot))], boot[int(0.95 * len(boot)) - 1]
    spread = statistics.stdev(ratios) if len(ratios) > 1 else float("nan")
    print()
    print(f"{arms[0][0]}: {' '.join(arms[0][1])}")
    print(f"{arms[1][0]}: {' '.join(arms[1][1])}")
    print(f"rounds' ratios: {', '.join(f'{x:.4f}' for x in ratios)} (sd {spread:.4f})")
    print(f"ratio {ratio:.4f} (90% interval {lo:.4f}..{hi:.4f}; target <= 1.02), {arms[1][0]} vs {arms[0][0]}, "
          f"{args.nproc} ranks, {args.steps} steps a job, {args.slice:g} s slices, {args.rounds} rounds, "
          f"{time.monotonic() - t_start:.0f} s")
    return 0 if ratio <= 1.02 else 1


if __name__ == "__main__":
    sys.exit(main())
