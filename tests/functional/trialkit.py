"""Provides the Trials view tests' fakes: a journal written the tuner's way, and a stand-in tuner process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from pitstop.tuning.journal import Journal
from pitstop.tuning.results import Candidate, TrialResult

HEADER = {"target": "python train.py", "cwd": "/work", "steps": 30, "warmup": 5, "knobs": None,
          "batch_size": False, "in_place": False, "min_time": 2.0}

# Waits for a control file, prints its text (the report) and exits 0; Ctrl+C (SIGINT to
# its group) prints the tuner's interruption line and exits 130, as pitstop tune does.
FAKE_TUNER = """
import pathlib, sys, time
ctl = pathlib.Path(sys.argv[1])
try:
    while not ctl.exists():
        time.sleep(0.02)
    print(ctl.read_text(), end="", flush=True)
    sys.exit(0)
except KeyboardInterrupt:
    print("pitstop tune: interrupted; 2 finished trials are in j.jsonl; rerun with --resume to continue",
          flush=True)
    sys.exit(130)
"""

REPORT = """pitstop tune: python train.py — 3 trials (0 from the journal) in 41 s

#  stage     configuration  steps  throughput        x base  peak mem  status
1  baseline  baseline       30     400.0 samples/s   x1.00   1.0 GiB   ok
Winner: workers=4
  600.0 samples/s, x1.50 ±2.0% over the script's own settings (400.0 samples/s)

Wrote pitstop.toml. Train with it:  pitstop run --config pitstop.toml train.py
"""


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


class FakeTune:
    """A journal, a log, and a stand-in tuner process in `root`."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.journal_path = root / ".pitstop-tune" / "train-0123abcd.journal.jsonl"
        self.log_path = root / ".pitstop-tune" / "train-0123abcd.tune.log"
        self.progress_path = root / ".pitstop-tune" / "train-0123abcd.progress.json"
        self.ctl = root / "finish"
        self.journal_path.parent.mkdir(parents=True, exist_ok=True)
        self.log_path.write_text("")
        self.journal = Journal(self.journal_path, HEADER)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-c", FAKE_TUNER, str(self.ctl)], stdout=log,
                                         stderr=log, stdin=subprocess.DEVNULL, start_new_session=True)
        self.log("pitstop tune: python train.py (budget 10m, 30 steps/trial); journal j.jsonl")
        self.count = 0

    def log(self, line: str) -> None:
        with open(self.log_path, "a") as handle:
            handle.write(line + "\n")

    def trial(self, r: TrialResult, planned: int = 6) -> None:
        self.count += 1
        self.journal.append(r, 0)
        self.log(f"[{self.count}/{planned}] {r.candidate.label()}  {r.throughput} samples/s  {r.status}")

    def progress(self, at: float, trial: dict[str, Any] | None, **tune: Any) -> None:
        """The tuner's progress file, as pitstop.tuning.command writes it twice a second."""
        state = {"done": 0, "planned": None, "budget_left": "", "eta": None, "budget_trials": None,
                 "budget_seconds": None, "used_trials": 0, "used_seconds": 0.0, **tune}
        tmp = self.progress_path.with_name(self.progress_path.name + ".tmp")
        tmp.write_text(json.dumps({"t": at, "elapsed": 0.0, "tune": state, "trial": trial}))
        tmp.replace(self.progress_path)

    def finish(self, report: str = REPORT) -> None:
        self.ctl.write_text(report)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
