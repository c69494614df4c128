"""A slow first LBFGS step, under the real agent: the tuner's ticks and `pitstop run --headless` say its closures."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.profiling.launch import Target
from pitstop.tuning.report import tick_line
from pitstop.tuning.results import Candidate
from pitstop.tuning.runner import Tick, TrialRunner, TrialSpec

from .conftest import SCRIPTS, pitstop

# The script's first step calls its closure 20 times, 0.2 s each: ~4 s, four samples of the agent's.
SCRIPT = SCRIPTS / "first_step_lbfgs.py"

pytestmark = pytest.mark.slow


def test_a_trial_ticks_with_the_closures_of_its_running_first_step(
        tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("PITSTOP_SESSION", "PITSTOP_OWNER_PID"):  # a trial starts its own session
        monkeypatch.delenv(name, raising=False)
    ticks: list[Tick] = []
    spec = TrialSpec(Target(script=str(SCRIPT), args=("3",)), cwd=tmp_path, records=tmp_path / "trials", warmup=0)
    result = TrialRunner(spec, on_tick=ticks.append)(Candidate(), 2, "baseline")
    before = [t for t in ticks if t.steps_done == 0 and t.progress is not None and t.progress.closures > 0]
    assert before, f"no tick reported closures before the first step ({result.status}: {result.reason}): {ticks}"
    tick = before[-1]
    assert tick.progress is not None and tick.progress.optimizer == "LBFGS"
    assert tick.progress.backwards >= tick.progress.closures and tick.progress.batches == 1
    line = tick_line(tick, "")
    assert "first training step not done after" in line and "LBFGS step running for" in line, line
    assert f"{tick.progress.closures} closure" in line and "1 batch fetched" in line, line
    assert ticks[-1].done and ticks[-1].steps_done == 2 and ticks[-1].progress is None  # steps flowed: it stopped


def test_headless_run_prints_what_the_slow_first_step_is_doing(tmp_path: Path, env: dict[str, str]) -> None:
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(tmp_path / "run.jsonl"),
                      str(SCRIPT), "2"], env, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if "LBFGS step running for" in ln]
    assert lines, result.stderr
    assert lines[-1].startswith("pitstop | first training step not done after") and "closures;" in lines[-1], lines
    assert "step 0: 20 closure calls" in result.stdout
