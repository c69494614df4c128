"""Tests how the tuner spends its budget: the evidence's knob first, no budget left while undecided, busy rounds."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pitstop.tuning.report import progress_line
from pitstop.tuning.results import Candidate, Facts, TrialResult
from pitstop.tuning.space import Space, build_space
from pitstop.tuning.strategy import Budget, Outcome, Search

OWN = {"num_workers": 0, "pin_memory": False, "persistent_workers": False, "prefetch_factor": None,
       "batch_size": 32}
# config -> true throughput
Truth = Callable[[dict[str, Any]], float]


def cpu_space() -> Space:
    return Space(own=dict(OWN), compute={"amp": ["bf16"], "threads": [1]}, workers=[0, 1, 2],
                 data={"persistent_workers": [True], "prefetch_factor": [4]})


class Trials:
    """Simulated trials: seeded noise, a duration per trial, other processes' load per call, and the
    baseline's evidence (what `pitstop run` would have said about it)."""

    def __init__(self, truth: Truth, noise: float = 0.01, seconds: float = 10.0,
                 evidence: dict[str, Any] | None = None, load: Callable[[int], float] | None = None,
                 seed: int = 0) -> None:
        self.truth, self.noise, self.seconds = truth, noise, seconds
        self.evidence = evidence or {}
        self.load = load or (lambda call: 0.0)
        self.rng = random.Random(seed)
        self.calls: list[tuple[Candidate, int, str]] = []

    def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
        self.calls.append((candidate, steps, stage))
        load = self.load(len(self.calls))
        value = self.truth({**OWN, **candidate.as_dict()}) * (1.0 + self.rng.gauss(0.0, self.noise))
        value /= 1.0 + load  # a neighbour's core costs the trial in proportion
        base = stage == "baseline"
        return TrialResult(candidate, steps, stage, "ok", throughput=value, spread=self.noise,
                           duration=self.seconds, measured_steps=steps, other_cpu=load,
                           facts=Facts(usable_cpus=2, cpu_count=2, torch_threads=2) if base else None,
                           evidence=dict(self.evidence) if base else {})


def tune(trials: Trials, budget: Budget, space: Space | None = None) -> Outcome:
    return Search(trials, lambda base: space or cpu_space(), budget, steps=30).run()


def lightning(cfg: dict[str, Any]) -> float:
    """Loader-bound: one worker nearly doubles the pace, bf16 changes nothing."""
    return 100.0 * (1.9 if cfg["num_workers"] >= 1 else 1.0)


def test_the_knob_the_evidence_names_is_trial_2_at_its_value_and_its_confirmation_fits_a_budget_of_4() -> None:
    # The baseline carries no compute-only figure (the tuner's own data-wait arithmetic sees
    # nothing); the run's finding said "data wait 48% ... fix num_workers=1".
    trials = Trials(lightning, evidence={"num_workers": 1})
    outcome = tune(trials, Budget(trials=4))
    assert len(trials.calls) == 4
    assert trials.calls[1][0] == Candidate.of({"num_workers": 1})
    assert trials.calls[1][2] == "workers"
    assert outcome.confirmed and outcome.winner == Candidate.of({"num_workers": 1})
    assert [c for c, _, s in trials.calls if s == "confirm"] == [Candidate.of({"num_workers": 1}), Candidate()]
    assert any("findings name workers: tried first, at 1" in n for n in outcome.notes)


def test_a_threads_finding_puts_threads_first() -> None:
    trials = Trials(lambda cfg: 100.0 * (3.0 if cfg.get("threads") == 1 else 1.0), evidence={"threads": 1})
    outcome = tune(trials, Budget(trials=4))
    assert trials.calls[1][0] == Candidate.of({"threads": 1})
    assert outcome.winner == Candidate.of({"threads": 1})


def test_on_a_hogged_machine_threads_come_first_and_the_workers_are_measured_on_top_of_them() -> None:
    # tuner_quality.py under one hog: 2 spinning threads made the baseline 52 samples/s and
    # threads=1 342; workers help only with one thread (the grid: workers=2 threads=1 681,
    # workers=2 with 2 threads 61). The findings named workers first; the tune picked threads=1.
    def hogged(cfg: dict[str, Any]) -> float:
        if cfg.get("threads") != 1:
            return 52.0 if not cfg["num_workers"] else 60.0
        return {0: 330.0, 1: 450.0, 2: 680.0}[cfg["num_workers"]]

    trials = Trials(hogged, evidence={"num_workers": 1, "threads": 1})
    outcome = tune(trials, Budget(trials=8))
    assert trials.calls[1][0] == Candidate.of({"threads": 1})
    assert outcome.winner == Candidate.of({"num_workers": 2, "threads": 1}), [c[0].label() for c in trials.calls]
    assert any("threads=1 measured x" in n and "build on it" in n for n in outcome.notes)


def test_no_reserve_is_held_for_a_challenger_that_lost_so_every_trial_is_used() -> None:
    # Trial 2 measured slower than the baseline: nothing to confirm, so nothing is kept back
    # (it stopped at 2 of 4 with "exploration stopped by --budget" before).
    trials = Trials(lambda cfg: 100.0 * (0.5 if cfg.get("amp") else 1.0) * (1.3 if cfg.get("threads") else 1.0))
    outcome = tune(trials, Budget(trials=4))
    assert len(trials.calls) == 4
    assert not any("kept for the A/B confirmation" in n for n in outcome.notes)  # nothing was kept


def test_seconds_left_are_spent_on_more_rounds_while_the_verdict_is_open() -> None:
    # A busy machine (a neighbour on one of 2 cores: ±5% of load noise) and a +4.5% gain: two
    # rounds cannot tell it from the noise; it stopped there with 1m27s left before.
    trials = Trials(lambda cfg: 100.0 * (1.045 if cfg.get("threads") == 1 else 1.0), noise=0.002,
                    load=lambda call: 1.0, evidence={"threads": 1})
    budget = Budget(seconds=300.0)
    outcome = tune(trials, budget, Space(own=dict(OWN), compute={"threads": [1]}))
    assert outcome.confirmed and outcome.rounds > 2, outcome.notes
    assert outcome.winner == Candidate.of({"threads": 1}), outcome.message
    assert any(n.startswith("stopped with budget") and "decided after" in n for n in outcome.notes)


def test_an_open_answer_uses_the_whole_budget() -> None:
    # +3.3%: beyond the 3% floor, inside the load noise of 4 rounds (±3.5%); 100 s hold 4 rounds.
    trials = Trials(lambda cfg: 100.0 * (1.033 if cfg.get("threads") == 1 else 1.0), noise=0.002,
                    load=lambda call: 1.0, evidence={"threads": 1})
    budget = Budget(seconds=100.0)
    outcome = tune(trials, budget, Space(own=dict(OWN), compute={"threads": [1]}))
    assert budget.used_seconds >= 90.0 and outcome.rounds == 4
    assert outcome.winner == Candidate() and any(n.startswith("undecided after") for n in outcome.notes)


def test_a_decided_answer_stops_early_and_says_so() -> None:
    trials = Trials(lambda cfg: 100.0 * (2.0 if cfg.get("threads") == 1 else 1.0), noise=0.005,
                    evidence={"threads": 1})
    outcome = tune(trials, Budget(seconds=600.0), Space(own=dict(OWN), compute={"threads": [1]}))
    assert outcome.rounds == 2 and outcome.winner == Candidate.of({"threads": 1})
    assert any(n.startswith("stopped with budget") and "a win beyond the noise" in n for n in outcome.notes)


def test_a_trial_starts_while_half_of_it_fits_the_seconds_left() -> None:
    # A 67 s baseline under --budget 2m left 53 s: the next trial ran, not "only the script's own settings".
    trials = Trials(lambda cfg: 100.0, seconds=67.0)
    outcome = tune(trials, Budget(seconds=120.0))
    assert len(trials.calls) == 2
    assert "only the script's own settings" not in outcome.message


def test_a_round_whose_load_moved_is_discarded_and_run_again() -> None:
    # Call 4 (the baseline of the first confirmation round) ran beside a neighbour's core.
    trials = Trials(lambda cfg: 100.0 * (1.5 if cfg.get("threads") == 1 else 1.0),
                    load=lambda call: 1.0 if call == 4 else 0.0, evidence={"threads": 1})
    outcome = tune(trials, Budget(trials=12), Space(own=dict(OWN), compute={"threads": [1]}))
    assert outcome.discarded == 1 and outcome.rounds >= 2
    assert any("round 1 discarded: other processes' load changed by 1.0 cores" in n for n in outcome.notes)
    assert outcome.winner == Candidate.of({"threads": 1})
    assert all(r.other_cpu == 0.0 for c in outcome.contests for r in c.runs)
    assert outcome.load == (0.0, 1.0)


def test_a_round_whose_load_moved_but_whose_ratio_agrees_with_exploration_is_kept() -> None:
    # CI: workers x2.80 explored, then a round at x2.89 whose neighbours moved 0.6 cores was
    # dropped, leaving no round and "nothing beat the script's own settings".
    class Mild(Trials):
        def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
            r = super().__call__(candidate, steps, stage)
            return r.replace(throughput=r.throughput * (1.0 + r.other_cpu) * 0.97 ** r.other_cpu)

    trials = Mild(lambda cfg: 100.0 * (2.8 if cfg.get("threads") == 1 else 1.0), noise=0.05,
                  load=lambda call: 0.6 if call == 4 else 0.0, evidence={"threads": 1})
    outcome = tune(trials, Budget(trials=4), Space(own=dict(OWN), compute={"threads": [1]}))
    assert outcome.discarded == 0 and outcome.rounds == 1 and outcome.confirmed
    assert outcome.winner == Candidate.of({"threads": 1})


def test_when_every_round_is_discarded_the_win_stands_unconfirmed_and_no_note_says_otherwise() -> None:
    trials = Trials(lambda cfg: 100.0 * (1.5 if cfg.get("threads") == 1 else 1.0),
                    load=lambda call: 1.0 if call == 4 else 0.0, evidence={"threads": 1})
    outcome = tune(trials, Budget(trials=4), Space(own=dict(OWN), compute={"threads": [1]}))
    assert outcome.discarded == 1 and outcome.rounds == 0 and not outcome.confirmed
    assert outcome.winner == Candidate.of({"threads": 1})  # x1.5 explored: beyond twice the noise
    assert "all 1 confirmation round(s) were discarded" in outcome.message
    assert not any("one confirmation round" in n for n in outcome.notes)


def test_threads_are_searched_only_where_the_cpus_are_contended() -> None:
    facts = Facts(usable_cpus=2, cpu_count=2, torch_threads=2, has_dataloader=True, loader=dict(OWN))
    quiet = build_space(facts, load=0.0)
    assert "threads" not in quiet.compute and "not contended" in quiet.skipped["threads"]
    busy = build_space(facts, load=1.0)
    assert busy.compute["threads"] == [1]
    named = build_space(facts, load=0.0, evidence={"threads": 1})
    assert named.compute["threads"] == [1]
    many = build_space(Facts(usable_cpus=2, cpu_count=2, torch_threads=2, has_dataloader=True,
                             loader={**OWN, "num_workers": 2}), load=0.0)
    assert many.compute["threads"] == [1]


def test_an_unstable_trial_shorter_than_min_time_is_measured_again_long_enough() -> None:
    # Two workers at 4x the baseline's pace measured 0.57 s of steps at ±70%: the scheduler's noise.
    class Short(Trials):
        def __call__(self, candidate: Candidate, steps: int, stage: str) -> TrialResult:
            r = super().__call__(candidate, steps, stage)
            fast = candidate.get("num_workers") == 2
            seconds = steps * (0.01 if fast else 0.05)
            if fast and seconds < 1.0:
                return r.replace(status="unstable", reason="window throughputs spread ±70% (limit 25%)",
                                 measured_seconds=seconds)
            return r.replace(measured_seconds=seconds)

    trials = Short(lambda cfg: 100.0 * (3.7 if cfg["num_workers"] == 2 else 1.0), evidence={"num_workers": 2})
    lines: list[str] = []
    outcome = Search(trials, lambda base: Space(own=dict(OWN), workers=[0, 1, 2]), Budget(trials=8), steps=30,
                     min_seconds=1.0, on_result=lambda r, i, n: lines.append(progress_line(r, i, n, None))).run()
    assert trials.calls[1][0] == trials.calls[2][0] == Candidate.of({"num_workers": 2})
    # Each trial that ran has its progress line, numbered in order: the short one says what came of it.
    assert [line.split("]")[0] for line in lines[:3]] == ["[1/8", "[2/8", "[3/8"]
    assert "unstable" in lines[1] and "measured again over 100 steps" in lines[1] and "30 steps" in lines[1]
    assert "100 steps" in lines[2]
    assert trials.calls[2][1] == 100  # 30 steps over 0.30 s, scaled to 1 s
    assert outcome.winner == Candidate.of({"num_workers": 2})
    assert any("unstable over 0.30 s of steps, under --min-time: measured again over 100 steps" in n
               for n in outcome.notes)
