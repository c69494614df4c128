"""Tests that the Trials view shows what the tuner journals, however its human report is worded.

The tuner runs in this process (`pitstop.tuning.command.run`) over a stand-in
trial runner, so its journal is written by the real writer; then the view
reads it with the tuner's process already ended.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import run, screen_text, wait_for

from pitstop.config import load_config
from pitstop.profiling.launch import Target
from pitstop.tui.trialdata import read_journal
from pitstop.tui.trials import TrialsApp
from pitstop.tuning import command
from pitstop.tuning.journalformat import TrialEnd, TrialProgress, TrialStart, TuneEnd
from pitstop.tuning.results import Candidate, Facts, TrialResult
from pitstop.tuning.runner import Tick, TrialSpec

OWN_LOADER = {"num_workers": 0, "batch_size": 32, "pin_memory": False, "persistent_workers": False,
              "prefetch_factor": None}


class StandInRunner:
    """Trials without processes: workers speed the script up to 4 (noise 1%); each trial ticks its steps.

    `CRASH` makes every trial crash, as a script that cannot find its data does.
    """

    CRASH = ""

    def __init__(self, spec: TrialSpec, timeout: float | None = None, first_step_timeout: float = 300.0,
                 on_tick: Callable[[Tick], None] | None = None) -> None:
        self.spec = spec
        self.on_tick = on_tick
        self.count = 0
        self.restored = None
        self.unguarded: dict[str, int] = {}

    def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
        self.count += 1
        planned = steps + 2
        for done in (0, planned // 2, planned):
            if self.on_tick is not None:
                self.on_tick(Tick(self.count, candidate.label(), stage, done, planned, 0.1 * done, 60.0, None,
                                  done=False))
        if self.on_tick is not None:
            self.on_tick(Tick(self.count, candidate.label(), stage, planned, planned, 0.1 * planned, 60.0, None,
                              done=True))
        if self.CRASH:
            return TrialResult(candidate, steps, stage, "crash", reason=self.CRASH, duration=1.0)
        workers = int(candidate.as_dict().get("num_workers") or 0)
        rate = 100.0 * (1 + min(workers, 4)) * (1.0 + 0.001 * (self.count % 3))
        facts = Facts(usable_cpus=8, shm_bytes=8 << 30, has_dataloader=True, loader=dict(OWN_LOADER)) \
            if stage == "baseline" else None
        return TrialResult(candidate, steps, stage, "ok", throughput=rate, spread=0.01, duration=1.0,
                           facts=facts, measured_steps=steps, peak_mem=1 << 20, mem_kind="host")

    def adopt(self, result: TrialResult) -> None:
        self.count += 1

    def kill(self) -> None:
        pass


def tune_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
              *options: str) -> tuple[int, Path, Path]:
    """`pitstop tune OPTIONS train.py` in tmp_path over the stand-in runner: (exit code, journal, output log)."""
    (tmp_path / "train.py").write_text("print('never run: trials are stood in for')\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(command, "TrialRunner", StandInRunner)
    monkeypatch.setattr(command, "PROGRESS_RECORD_EVERY_S", 0.0)  # every tick's steps, not one a second
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    journal = tmp_path / "tune.journal.jsonl"
    args = parser.parse_args(["--scratch", "--steps", "10", "--min-time", "0", "--knobs", "workers",
                              "--journal", str(journal), *options])
    code = command.run(args, Target(script="train.py"))
    out = capsys.readouterr()
    log = tmp_path / "tune.log"
    log.write_text(out.err + out.out)
    return code, journal, log


def ended_process(code: int = 0) -> subprocess.Popen[bytes]:
    """The tuner's process, already ended with `code` (the view reads its journal, then its exit)."""
    proc = subprocess.Popen([sys.executable, "-c", f"raise SystemExit({code})"])
    proc.wait()
    return proc


def test_a_reworded_report_still_shows_the_winner_and_the_written_config(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def reworded_wrote(written: str | None, confirmed: bool, target: Target) -> str:
        return f"\n\nSaved the tuned settings as {written}." if written else ""

    def reworded_report(*args: Any, **kw: Any) -> str:
        return "Tuning complete."

    monkeypatch.setattr(command, "wrote_line", reworded_wrote)
    monkeypatch.setattr(command, "format_report", reworded_report)
    code, journal, log = tune_here(tmp_path, monkeypatch, capsys, "--budget", "12")
    assert code == 0, log.read_text()
    assert "Saved the tuned settings as pitstop.toml" in log.read_text() and "Wrote" not in log.read_text()
    written = load_config(tmp_path / "pitstop.toml").dataloader_kwargs()
    label = Candidate.of({"num_workers": written["num_workers"]}).label()
    proc = ended_process()

    async def scenario() -> None:
        app = TrialsApp(proc, journal, log, tmp_path / "pitstop.toml", clock=time.time)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.finished_at is not None)
            await wait_for(pilot, lambda: "DONE" in screen_text(app))
            text = screen_text(app)
            assert f"winner: {label}" in text and "written to pitstop.toml" in text
            assert "config pitstop.toml" in text  # the header
            assert "Saved the tuned settings as pitstop.toml" in text  # the report pane: the tuner's own words
            assert f"★ {label}" in text
        assert "Saved the tuned settings as pitstop.toml" in app.goodbye()

    run(scenario())


def test_the_journal_holds_every_trials_start_steps_and_result_and_the_outcome(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, journal, log = tune_here(tmp_path, monkeypatch, capsys, "--budget", "6")
    assert code == 0, log.read_text()
    state = read_journal(journal)
    assert state.unreadable == 0 and state.header is not None and state.header["version"] == 2
    assert state.start is not None and state.start.budget == "6" and state.start.resumed == 0
    assert state.start.totals.budget_trials == 6 and state.start.totals.planned == 6
    kinds = [line.split('"kind":"')[1].split('"')[0] for line in journal.read_text().splitlines()]
    trials = kinds.count(TrialEnd.KIND)
    assert trials == len(state.rows) >= 2 and kinds.count(TrialStart.KIND) == trials
    assert kinds.count(TrialProgress.KIND) >= trials  # the steps inside each trial
    assert kinds[-1] == TuneEnd.KIND
    end = state.end
    assert end is not None and end.status == "finished" and end.exit_code == 0 and end.totals is not None
    assert end.totals.done == trials and end.totals.used_trials == trials
    assert end.winner is not None and end.report and end.report[0].startswith("pitstop tune: python train.py")
    # Four workers run the stand-in five times as fast: confirmed, and written.
    assert end.winner == "workers=4" and end.settings == {"num_workers": 4} and end.improves and end.confirmed
    assert end.speedup is not None and end.speedup > 4.5 and end.interval is not None
    assert end.config == "pitstop.toml" and (tmp_path / end.config).exists() and end.no_config == ""


def test_a_tune_whose_baseline_fails_shows_why_no_config_was_written(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(StandInRunner, "CRASH", "exit 1: FileNotFoundError: data/train.bin")
    code, journal, log = tune_here(tmp_path, monkeypatch, capsys, "--budget", "3")
    assert code == 1
    end = read_journal(journal).end
    assert end is not None and end.status == "failed" and end.exit_code == 1 and end.winner is None
    assert end.config is None and "data/train.bin" in end.no_config
    proc = ended_process(1)

    async def scenario() -> None:
        app = TrialsApp(proc, journal, log, tmp_path / "pitstop.toml", clock=time.time)
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: "FAILED" in screen_text(app))
            text = screen_text(app)
            assert "The tune ended without a winner: pitstop.toml was not written (" in text
            assert "data/train.bin" in text and "config pitstop.toml" not in text
        assert any("data/train.bin" in line for line in app.report)  # the report names it too

    run(scenario())
