"""Provides the Trials view tests' fakes: a journal of records written the tuner's way, and a stand-in tuner."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pitstop.tuning.journal import Journal
from pitstop.tuning.journalformat import Start, Totals, TrialProgress, TrialStart, TuneEnd, encode
from pitstop.tuning.results import Candidate, TrialResult

HEADER = {"target": "python train.py", "cwd": "/work", "steps": 30, "warmup": 5, "knobs": None,
          "batch_size": False, "in_place": False, "min_time": 2.0}

INTERRUPTED = "pitstop tune: interrupted; 2 finished trials are in j.jsonl; rerun with --resume to continue"

# Waits for a control file, prints its text (the report) and exits 0; Ctrl+C (SIGINT to
# its group) prints the tuner's interruption line, journals its outcome record (argv[3])
# and exits 130, as pitstop tune does.
FAKE_TUNER = """
import pathlib, sys, time
ctl, journal = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
try:
    while not ctl.exists():
        time.sleep(0.02)
    print(ctl.read_text(), end="", flush=True)
    sys.exit(0)
except KeyboardInterrupt:
    print(sys.argv[4], flush=True)
    with open(journal, "a") as handle:
        handle.write(sys.argv[3] + "\\n")
    sys.exit(130)
"""

REPORT = """pitstop tune: python train.py — 3 trials (0 from the journal) in 41 s

#  stage     configuration  steps  throughput        x base  peak mem  status
1  baseline  baseline       30     400.0 samples/s   x1.00   1.0 GiB   ok
Winner: workers=4
  600.0 samples/s, x1.50 ±2.0% over the script's own settings (400.0 samples/s)

Wrote pitstop.toml. Train with it:  pitstop run --config pitstop.toml train.py
"""
# The outcome record of that report.
WINNER = TuneEnd(1_700_000_041.0, "finished", 0, winner="workers=4", settings={"num_workers": 4}, improves=True,
                 speedup=1.5, interval=(1.48, 1.52), confirmed=True, config="pitstop.toml")


def result(label: dict[str, object], stage: str, throughput: float | None, status: str = "ok",
           reason: str = "", spread: float = 0.02) -> TrialResult:
    return TrialResult(candidate=Candidate.of(dict(label)), steps=30, stage=stage, status=status, reason=reason,
                       throughput=throughput, spread=spread if throughput else None, peak_mem=1 << 30,
                       mem_kind="host")


TRIALS = [
    result({}, "baseline", 400.0),
    result({"num_workers": 2}, "workers", 520.0),
    result({"num_workers": 4}, "workers", 600.0),
    result({"num_workers": 8}, "workers", None, status="crash",
           reason="the script raised: RuntimeError: DataLoader worker (pid 99) is killed"),
]


def totals(done: int = 0, planned: int | None = 6, **more: Any) -> Totals:
    """The tune's totals; a 10-minute budget unless told otherwise."""
    budget: dict[str, Any] = {"budget_left": "10m00s of 10m00s", "budget_seconds": 600.0}
    return Totals(**{"done": done, "planned": planned, **budget, **more})


class FakeTune:
    """A journal, a log, and a stand-in tuner process in `root`."""

    def __init__(self, root: Path, at: float = 1_700_000_000.0) -> None:
        self.root = root
        self.at = at
        self.journal_path = root / ".pitstop-tune" / "train-0123abcd.journal.jsonl"
        self.log_path = root / ".pitstop-tune" / "train-0123abcd.tune.log"
        self.ctl = root / "finish"
        self.journal_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")
        self.journal = Journal(self.journal_path, HEADER)
        stopped = TuneEnd(at, "interrupted", 130, INTERRUPTED, no_config="interrupted", report=(INTERRUPTED,))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", FAKE_TUNER, str(self.ctl), str(self.journal_path),
                 json.dumps(encode(stopped)), INTERRUPTED],
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.journal.record(Start(at, "10m", 0, self.proc.pid, totals(0, None)))
        self.log("pitstop tune: python train.py (budget 10m, 30 steps/trial); journal j.jsonl")
        self.count = 0

    def log(self, line: str) -> None:
        with open(self.log_path, "a") as handle:
            handle.write(line + "\n")

    def start_trial(self, r: TrialResult, at: float | None = None, steps_planned: int = 35,
                    first_step_limit: float | None = None, tune: Totals | None = None) -> None:
        """A trial's process started (the tuner's first tick of it)."""
        self.journal.record(TrialStart(self.at if at is None else at, self.count + 1, r.candidate.label(), r.stage,
                                       steps_planned, 600.0, first_step_limit, tune or totals(self.count)))

    def steps(self, at: float, steps_done: int, steps_planned: int, elapsed: float) -> None:
        """The running trial's steps, as the tuner journals them (at most once a second)."""
        self.journal.record(TrialProgress(at, self.count + 1, steps_done, steps_planned, elapsed))

    def trial(self, r: TrialResult, planned: int = 6) -> None:
        """A whole trial: its start, its result, and the tuner's human progress line."""
        self.start_trial(r, tune=totals(self.count, planned))
        self.count += 1
        self.journal.append(r, 0)
        self.log(f"[{self.count}/{planned}] {r.candidate.label()}  {r.throughput} samples/s  {r.status}")

    def finish(self, report: str = REPORT, end: TuneEnd | None = WINNER) -> None:
        """The tuner ends: its outcome record (when given), then its report on its output, and exit 0."""
        if end is not None:
            self.journal.record(dataclasses.replace(end, report=tuple(report.splitlines())), sync=True)
        self.ctl.write_text(report)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
