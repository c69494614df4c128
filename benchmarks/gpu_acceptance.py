"""Runs the GPU acceptance checks in one command and prints one table of what it measured.

    python benchmarks/gpu_acceptance.py --out DIR [--quick] [--budget 540]
    benchmarks/gpu_acceptance.sh run DIR [--quick]        # on the lent GPU machine: installs, then this

The parts, in order, each within its own share of --budget seconds (the whole
must fit one 10-minute device call, its set-up included):
  1. tests/gpu (pytest, marker `gpu`): the demo on CUDA, a profiler window's
     kernels/copies/syncs, no sync added per step, AMP/channels-last/cudnn
     trials, the doctor. One row per test, and the GPM figures the demo read.
  2. The agent's overhead on GPU steps of ~10 ms and ~1 ms (`_workload_gpu.py`
     under overhead.py's in-process ABBA harness): ratio of median steps,
     target <= 1.01; the agent's microseconds on a typical step (median on -
     median off), target <= 10; agent + default profiler windows,
     target <= 1.015.
  3. `pitstop tune` with every knob (--batch-size too) on the ResNet-like
     conv workload (tests/gpu/scripts/conv_train.py: synthetic images, a CPU
     transform, DataLoader defaults).
  4. Its speedup re-measured: the plain script vs `pitstop run --config`,
     alternating (ABBA), samples/s as the script times itself; target >= 2.5.
  5. The tuner's pick against a grid of the same knobs (`_gpu_table.grid_candidates`),
     each configuration a fresh trial as the tuner runs them; target >= 0.95.

Writes under --out: table.txt, table.json, gpu-tests.log, gpu-tests.xml and
records.tar.gz (the tests' records, tuner report and config, the overhead,
re-measure and grid data). At most 8 files, as the device tool brings back.

Exit codes: 0 every part ran and met its target; 1 a target was missed, or a
part failed or did not fit its time; 2 bad usage; 3 no CUDA device: nothing to
measure (said in one line, nothing written). --allow-cpu runs every part on the
CPU with a tiny workload, to check the harness where there is no GPU: its
figures mean nothing for the targets.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from _gpu_parts import Setup, gpm_row, gpu_tests, grid, overhead, remeasure, tune  # noqa: E402
from _gpu_table import Deadline, Row, exit_code, failed, format_table, skipped, to_json  # noqa: E402

NO_CUDA = 3
# Seconds each part may take (full, --quick); a part gets less when the parts after it need their share.
BUDGETS = {
    "tests": (170, 170),
    "overhead10": (60, 35),
    "overhead1": (35, 25),
    "tune": (140, 70),
    "remeasure": (55, 35),
    "grid": (80, 40),
}
ROUNDS = (3, 2)  # re-measure rounds (full, --quick)
ARCHIVE_LIMIT = 12 << 20  # the records' archive stays under the device tool's 16 MiB a file


def cuda_missing() -> str | None:
    """Why there is nothing to measure here, or None."""
    try:
        import torch
    except Exception as err:
        return f"torch cannot be imported: {err}"
    if getattr(torch.version, "cuda", None) is None:
        return f"torch {torch.__version__} is a CPU build"
    if not torch.cuda.is_available():
        return "torch.cuda.is_available() is False"
    return None


def machine(cpu: bool) -> tuple[list[str], dict[str, str]]:
    """The title lines and facts: GPU, driver, CUDA, torch (from NVML and torch, no CUDA context made here)."""
    import torch

    from pitstop.profiling import nvml

    gpus, why = nvml.read_gpus()
    driver = nvml.driver_version() or "?"
    facts = {"gpu": gpus[0].name if gpus else f"none ({why})", "driver": str(driver),
             "cuda": str(torch.version.cuda), "torch": str(torch.__version__), "python": sys.version.split()[0],
             "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}
    title = [f"pitstop GPU acceptance on {facts['gpu']}: driver {facts['driver']}, CUDA "
             f"{facts['cuda']}, torch {facts['torch']}, Python {facts['python']}, {facts['date']}"]
    if cpu:
        title.append("--allow-cpu: a check of the harness on the CPU; the figures mean nothing for the targets")
    return title, facts


def archive(work: Path, target: Path) -> None:
    """Every record and report under `work` into one .tar.gz, smallest first, up to ARCHIVE_LIMIT."""
    files = sorted((p for p in work.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    total = 0
    with tarfile.open(target, "w:gz") as tar:
        for path in files:
            total += path.stat().st_size
            if total > ARCHIVE_LIMIT:
                break
            tar.add(path, arcname=str(path.relative_to(work)))


def run_parts(setup: Setup, deadline: Deadline) -> list[Row]:
    quick = 1 if setup.quick else 0
    want = {name: budgets[quick] for name, budgets in BUDGETS.items()}
    order = list(want)
    rows: list[Row] = []
    tune_data: dict | None = None

    def grant(name: str) -> float:
        if name == order[-1]:  # the last part (the grid) takes what the others left, less the archiving
            return deadline.grant(max(want[name], deadline.left() - 10.0), reserve=10.0, least=15.0)
        later = sum(want[n] for n in order[order.index(name) + 1:]) * 0.5  # the parts to come keep half theirs
        return deadline.grant(want[name], reserve=later, least=15.0)

    def step(name: str, label: str, target: str, part: Callable[[float], list[Row]]) -> None:
        budget = grant(name)
        print(f"[{deadline.elapsed():5.0f} s] {label}: up to {budget:.0f} s", flush=True)
        if not budget:
            rows.append(skipped(label, "out of time", target))
            return
        try:
            rows.extend(part(budget))
        except Exception as err:  # a broken part is a row, and the parts after it still run
            rows.append(failed(label, f"{type(err).__name__}: {err}", target))

    def tuned(budget: float) -> list[Row]:
        nonlocal tune_data
        got, tune_data = tune(setup, budget)
        return got

    step("tests", "tests/gpu", "all pass", lambda b: [*gpu_tests(setup, b), gpm_row(setup)])
    step("overhead10", "agent, ~10 ms GPU steps", "<= 1.01", lambda b: overhead(setup, 10.0, b))
    step("overhead1", "agent, ~1 ms GPU steps", "<= 1.01", lambda b: overhead(setup, 1.0, b))
    step("tune", "pitstop tune (every knob)", "", tuned)
    step("remeasure", "tuned speedup, re-measured", ">= 2.5",
         lambda b: remeasure(setup, tune_data, ROUNDS[quick], deadline, b))
    step("grid", "tuner's pick / grid best", ">= 0.95", lambda b: grid(setup, tune_data, deadline, b))
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, metavar="DIR", help="where the table and the records go")
    parser.add_argument("--quick", action="store_true", help="shorter benchmarks (the tests are the same)")
    parser.add_argument("--budget", type=float, default=540.0, metavar="SECONDS",
                        help="the whole run's time (default %(default)g: a 10-minute device call less set-up)")
    parser.add_argument("--allow-cpu", action="store_true", help="check the harness on the CPU (figures mean nothing)")
    args = parser.parse_args(argv)
    if args.budget < 60:
        parser.error("--budget must be at least 60 seconds")
    why = cuda_missing()
    if why and not args.allow_cpu:
        print(f"no CUDA device: nothing to measure ({why})")
        return NO_CUDA
    started = time.monotonic()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    title, facts = machine(bool(why))
    with tempfile.TemporaryDirectory(prefix="pitstop-gpu-") as tmp:
        setup = Setup(out=out, work=Path(tmp), quick=args.quick, cpu=bool(why))
        rows = run_parts(setup, Deadline(args.budget))
        archive(setup.work, out / "records.tar.gz")
    command = "python benchmarks/gpu_acceptance.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    title.append(f"{command}: {time.monotonic() - started:.0f} s")
    text = format_table(title, rows)
    (out / "table.txt").write_text(text + "\n")
    (out / "table.json").write_text(json.dumps(to_json(title, rows, facts), indent=1) + "\n")
    print(text)
    return exit_code(rows)


if __name__ == "__main__":
    raise SystemExit(main())
