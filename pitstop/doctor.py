"""Provides `pitstop doctor`: checks of the machine a training run is about to use, with measured figures.

Each row is a `Check(name, status, value, detail, fix)`; the command prints an
aligned table (or `--json`: a list of row objects) and exits 1 when a row
fails, else 0. Rows that do not apply here (no CUDA build, no NVML, no GPU)
say 'skip' and why. Measurements are bounded so the whole doctor takes a few
seconds (most of it importing torch).

    python -m pitstop.doctor [--workers N] [--data PATH] [--json]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from pitstop import _doctor_probes as probes
from pitstop._doctor_probes import Check
from pitstop.profiling import nvml

__all__ = ["Check", "add_arguments", "collect", "format_table", "main", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The doctor's options, for `pitstop doctor` and `python -m pitstop.doctor`."""
    parser.add_argument("--workers", type=int, default=None, metavar="N",
                        help="DataLoader workers you plan to use (default: min(8, usable cores))")
    parser.add_argument("--data", metavar="PATH", default=None,
                        help="dataset directory to measure read throughput on (bounded: 512 MiB, 5000 files, 5 s)")
    parser.add_argument("--json", action="store_true", help="print the rows as a JSON list")
    parser.add_argument("--quick", action="store_true",
                        help="shorter measurements (0.3 s each instead of 1 s)")


def _guard(rows: list[Check], name: str, fn: Callable[[], Any]) -> None:
    """Run one probe; a probe that raises becomes a 'fail' row naming the error, never a traceback."""
    try:
        out = fn()
    except Exception as err:
        rows.append(Check(name, "fail", "probe error", f"{type(err).__name__}: {err}",
                          "report this with `pitstop doctor --json` output"))
        return
    if isinstance(out, Check):
        rows.append(out)
    else:
        rows.extend(out)


def collect(workers: int | None = None, data: str | None = None, budget_s: float = 1.0) -> list[Check]:
    """Every row, in display order."""
    rows: list[Check] = []
    t0 = time.perf_counter()
    nvml_ok, nvml_reason = nvml.nvml_available()
    gpus_seen = nvml.device_count()
    try:
        import torch
    except Exception as err:
        torch = None
        rows.append(Check("torch", "fail", "not importable", f"{type(err).__name__}: {err}",
                          "pip install torch"))
    if torch is not None:
        _guard(rows, "torch", lambda: probes.probe_torch(torch, gpus_seen))

    def driver() -> Check:
        d = nvml.driver_version()
        c = nvml.cuda_driver_version()
        return probes.rule_driver(nvml_ok, nvml_reason, d or None, c or None,
                                  getattr(torch.version, "cuda", None) if torch is not None else None)

    _guard(rows, "driver / CUDA", driver)
    if nvml_ok:
        rows.append(Check("NVML", "pass", f"{gpus_seen} GPU(s)", "GPU utilisation, memory and power can be sampled"))
    else:
        rows.append(Check("NVML", "skip", "unavailable", nvml_reason, "" if not gpus_seen else "install the NVIDIA driver"))
    if torch is not None:
        _guard(rows, "GPUs", lambda: probes.probe_gpus(torch, nvml_ok, nvml_reason))
        _guard(rows, "CUDA libraries", lambda: probes.probe_cuda_libs(torch))
    usable = probes.usable_cpus()
    planned = workers if workers is not None else probes.default_workers(usable)
    _guard(rows, "CPU cores", lambda: probes.rule_cpus(usable, os.cpu_count(), planned))
    _guard(rows, "/dev/shm", lambda: probes.rule_shm(probes.shm_bytes(), planned))
    if torch is not None:
        _guard(rows, "H2D bandwidth", lambda: probes.probe_bandwidth(torch, budget_s=budget_s))
        _guard(rows, "matmul", lambda: probes.probe_matmul(torch, budget_s=budget_s))
    if data is not None:
        _guard(rows, "data read", lambda: probes.probe_data(data))
    rows.append(Check("doctor", "pass", f"{time.perf_counter() - t0:.1f} s", "time these checks took"))
    return rows


_MARK = {"pass": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


def format_table(rows: Sequence[Check], width: int = 100) -> str:
    """Aligned plain text: name, status, value; detail and fix on indented lines below."""
    nw = max(len(r.name) for r in rows) if rows else 4
    lines = [f"{'check'.ljust(nw)}  status  value"]
    for r in rows:
        lines.append(f"{r.name.ljust(nw)}  {_MARK.get(r.status, r.status).ljust(6)}  {r.value}")
        pad = " " * (nw + 10)
        if r.detail:
            lines.append(f"{pad}{r.detail}")
        if r.fix:
            lines.append(f"{pad}fix: {r.fix}")
    counts = {s: sum(1 for r in rows if r.status == s) for s in ("pass", "warn", "fail", "skip")}
    lines.append("")
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


def exit_code(rows: Sequence[Check]) -> int:
    return 1 if any(r.status == "fail" for r in rows) else 0


def run(args: argparse.Namespace) -> int:
    """Run the checks, print them (table or JSON) to stdout, return the exit code."""
    rows = collect(workers=getattr(args, "workers", None), data=getattr(args, "data", None),
                   budget_s=0.3 if getattr(args, "quick", False) else 1.0)
    if getattr(args, "json", False):
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=2))
    else:
        print(format_table(rows))
    return exit_code(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pitstop doctor", description="Check this machine for PyTorch training.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
