"""Tests what `pitstop tune` tells a person: report texts, progress lines, journal names, path hints."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.errors import TuneError
from pitstop.events import Step
from pitstop.profiling.launch import Target
from pitstop.stepcolumns import encode_steps
from pitstop.tuning.journal import Journal, companion, default_journal
from pitstop.tuning.report import format_report, progress_line, tick_line, tune_status
from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.runner import StepCounter, Tick, TrialSpec, path_hint
from pitstop.tuning.space import Space
from pitstop.tuning.verdict import Budget, Contest, Outcome


def result(config: dict[str, object], throughput: float | None, stage: str = "confirm", steps: int = 60,
           measured: int = 60, status: str = "ok", reason: str = "") -> TrialResult:
    return TrialResult(Candidate.of(config), steps, stage, status, reason=reason, throughput=throughput,
                       spread=0.02 if throughput else None, measured_steps=measured)


def contest(config: dict[str, object], *throughputs: float) -> Contest:
    return Contest(Candidate.of(config), [result(config, t) for t in throughputs])


def test_a_confirmed_winner_is_reported_with_its_rounds_and_the_lower_ratio() -> None:
    base = result({}, 100.0, "baseline", steps=30, measured=30)
    outcome = Outcome(baseline=base, results=[base], space=Space(skipped={"batch_size": "it changes training "
                                                                          "dynamics; turn it on with --batch-size"}),
                      winner=Candidate.of({"amp": "bf16"}), throughput=140.0, baseline_throughput=100.0,
                      speedup=1.35, interval=(1.35, 1.45), noise=0.04, confirmed=True, rounds=2,
                      contests=[contest({"amp": "bf16"}, 135.0, 145.0), contest({}, 100.0, 100.0)])
    text = format_report(outcome, "title")
    assert "Winner: amp=bf16" in text
    assert ("x1.35 over the script's own settings (2 rounds: the lowest round's; a re-run lands in x1.35 to x1.45)"
            in text)
    assert "amp=bf16 135 / 145, baseline 100 / 100" in text
    assert "Batch size: not tuned: it changes training dynamics; turn it on with --batch-size." in text
    assert "not tuned (not tuned" not in text


def test_nothing_beating_the_baseline_is_said_plainly() -> None:
    base = result({}, 100.0, "baseline")
    outcome = Outcome(baseline=base, results=[base], winner=Candidate(), confirmed=True, rounds=2,
                      message="nothing beat the script's own settings by more than the noise (±4.0%)",
                      contests=[contest({"num_workers": 1}, 101.0, 99.0), contest({}, 100.0, 100.0)])
    text = format_report(outcome)
    assert "Nothing beat the script's own settings: no config written; keep training as you do." in text
    assert "Winner" not in text and not outcome.improves


def test_an_unconfirmed_best_names_the_command_that_confirms_it() -> None:
    base = result({}, 100.0, "baseline")
    outcome = Outcome(baseline=base, results=[base], winner=Candidate.of({"amp": "bf16"}), throughput=226.0,
                      baseline_throughput=100.0, speedup=2.26, noise=0.034, confirm_trials=4, confirm_seconds=40,
                      message="not confirmed: the budget ran out")
    text = format_report(outcome, confirm_command="pitstop tune --confirm pitstop.toml --budget 4 train.py")
    assert "Best found (not confirmed): amp=bf16" in text and "x2.26 ±3.4%" in text
    assert "confirm it (4 trials, ~40s): pitstop tune --confirm pitstop.toml --budget 4 train.py" in text


def test_trials_shorter_than_planned_and_progress_lines_say_what_they_measured() -> None:
    short = result({"num_workers": 2}, 120.0, "workers", steps=60, measured=41).replace(script_ended=True)
    line = progress_line(short, 2, None, result({}, 100.0, "baseline"), tune_status(2, None, "2 of 4 trials", 9.0))
    assert line.startswith("[2/?] workers=2") and "[workers, 41 of 60 steps]" in line
    assert "tune: 2 trials, budget 2 of 4 trials left, ETA ~9s" in line
    tick = Tick(3, "workers=2", "workers", 45, 65, 23.0, 100.0, None)
    assert "trial 3 workers=2 [workers]: 45/65 steps, 23s (limit 1m40s)" in tick_line(tick, "tune: ...")
    waiting = Tick(1, "baseline", "baseline", 0, 35, 40.0, 600.0, 300.0)
    assert "waiting for its first training step, 40s of at most 5m00s (--first-step-timeout)" in tick_line(waiting, "")
    assert Budget(seconds=600, used_seconds=350).left() == "4m10s of 10m00s"


def test_two_scripts_of_one_name_get_their_own_journals(tmp_path: Path) -> None:
    a = default_journal(Path("pitstop.toml"), Target(script="a/main.py"), tmp_path)
    b = default_journal(Path("pitstop.toml"), Target(script="b/main.py"), tmp_path)
    assert a != b and a.parent == b.parent == tmp_path / ".pitstop-tune" and a.name.startswith("main-")
    assert a == default_journal(Path("pitstop.toml"), Target(script=str(tmp_path / "a" / "main.py")), tmp_path)
    assert companion(a, ".records").name == a.name.replace(".journal.jsonl", ".records")


def test_an_existing_journal_suggests_resume_only_when_resume_would_accept_it(tmp_path: Path) -> None:
    path = tmp_path / "j.journal.jsonl"
    Journal(path, {"target": "python main.py", "steps": 30})
    with pytest.raises(TuneError, match="--resume continues it"):
        Journal(path, {"target": "python main.py", "steps": 30})
    with pytest.raises(TuneError, match="another tune \\(it differs in: steps\\)") as err:
        Journal(path, {"target": "python main.py", "steps": 60})
    assert "--resume" not in str(err.value)


def test_a_baseline_that_fails_on_a_path_gets_the_fix(tmp_path: Path) -> None:
    (tmp_path / "proj" / "mingpt").mkdir(parents=True)
    spec = TrialSpec(Target(script="proj/train.py"), tmp_path, tmp_path / "r")
    crash = result({}, None, "baseline", status="crash", reason="exit 1: ModuleNotFoundError: No module named 'mingpt'")
    hint = path_hint(crash, spec)
    assert f"trials run in {tmp_path}" in hint and f"PYTHONPATH={tmp_path / 'proj'}" in hint
    assert f"cd {tmp_path / 'proj'}" in hint
    scratch = TrialSpec(Target(script="train.py"), tmp_path, tmp_path / "r", scratch=True)
    missing = result({}, None, "baseline", status="crash", reason="exit 1: FileNotFoundError: 'configurator.py'")
    assert "drop --scratch" in path_hint(missing, scratch)
    assert path_hint(result({}, None, "baseline", status="oom", reason="out of memory"), spec) == ""


def test_the_step_counter_reads_only_whole_lines_as_they_are_written(tmp_path: Path) -> None:
    record = tmp_path / "r.jsonl"
    counter = StepCounter(record)
    assert counter.read() == 0  # not written yet
    record.write_text('{"kind":"hello"}\n{"kind":"step","t":10.5,"step":0,"wall":0.5}\n{"kind":"st')
    assert counter.read() == 1 and counter.first_step_start == 10.0
    with open(record, "a") as f:
        f.write('ep","t":11,"step":1,"wall":0.5}\n')
    assert counter.read() == 2
    with open(record, "a") as f:  # what the agent's writer writes: consecutive steps in one line
        f.write(encode_steps([Step(t=12.0 + i, step=2 + i, wall=1.0, data_wait=0.0) for i in range(3)]) + "\n")
    assert counter.read() == 5


def test_batch_size_is_said_tuned_only_where_a_batch_trial_ran() -> None:
    # ignite's tune: "Batch size: tuned (--batch-size): see the learning-rate guidance" with no batch trial
    # run (the budget ended first), no guidance, and batch_size_tuned = true in the config.
    from pitstop.tuning.report import batch_line
    from pitstop.tuning.results import TrialResult
    from pitstop.tuning.results import Candidate

    base = TrialResult(candidate=Candidate(), steps=10, stage="baseline", status="ok", throughput=100.0)
    amp = TrialResult(candidate=Candidate.of({"amp": "bf16"}), steps=10, stage="compute", status="ok", throughput=120.0)
    batch = TrialResult(candidate=Candidate.of({"batch_size": 64}), steps=10, stage="batch", status="ok",
                        throughput=90.0)

    class _Outcome:
        def __init__(self, results: list[TrialResult], winner: Candidate) -> None:
            self.results, self.winner = results, winner

    assert batch_line(_Outcome([base, amp], Candidate.of({"amp": "bf16"}))).startswith(  # type: ignore[arg-type]
        "Batch size: not tried: the budget ended")
    assert batch_line(_Outcome([base, amp, batch], Candidate.of({"amp": "bf16"}))) == (  # type: ignore[arg-type]
        "Batch size: tried (--batch-size); the script's own batch size stays.")
    assert "learning-rate guidance" in batch_line(_Outcome([base, batch], Candidate.of({"batch_size": 64})))  # type: ignore[arg-type]


def test_a_threads_winner_measured_on_a_busy_machine_says_it_may_be_slower_on_a_quiet_one() -> None:
    # ignite's mnist: threads=1 x10.41 while a neighbour held a core; 0.5-0.96x on the quiet machine.
    base = result({}, 446.0, "baseline")
    outcome = Outcome(baseline=base, results=[base], winner=Candidate.of({"threads": 1}), throughput=4641.0,
                      baseline_throughput=446.0, speedup=10.41, interval=(10.41, 10.41), noise=0.049,
                      confirmed=True, rounds=1, load=(1.0, 1.0), cpus=2,
                      contests=[contest({"threads": 1}, 4641.0), contest({}, 446.0)])
    text = format_report(outcome)
    assert "machine: other processes kept 1.0 of 2 cores busy" in text
    assert "on a quiet machine it can be slower" in text, text
