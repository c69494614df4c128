"""Evaluations without a DataLoader and a policy's rollouts, under `pitstop run --headless`: each counted as the
script counts it (tests/integration/scripts/loop_passes.py prints its own)."""

from __future__ import annotations

import json
from pathlib import Path

from .conftest import SCRIPTS, run_pitstop
from .test_eval_accounting import end_of, eval_row
from .test_frameworks import agent_complaints, steps_of


def run_mode(tmp_path: Path, env: dict[str, str], mode: str, steps: int) -> tuple[Path, str, dict[str, int]]:
    tmp_path.mkdir(exist_ok=True)
    record, out = tmp_path / "r.jsonl", tmp_path / "ref.json"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "loop_passes.py"), mode,
                          str(steps), str(out)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert agent_complaints(record, result.stderr) == []
    return record, result.stderr, json.loads(out.read_text())


def test_an_evaluation_before_the_first_step_without_a_loader_and_one_forward_evaluations_count(
        tmp_path: Path, env: dict[str, str]) -> None:
    # nanoGPT's estimate_loss at iteration 0 (before, the model was found at the first backward: missed)
    record, stderr, ref = run_mode(tmp_path / "a", env, "estimate", 12)
    steps = steps_of(record)
    assert len(steps) == ref["steps"] == 12
    assert [s.step for s in steps if s.mark == "eval"] == [0, 5, 10], [(s.step, s.mark) for s in steps]
    assert eval_row(stderr)[0] == ref["evals"] == 3, stderr
    # a full-batch GNN's: one forward in eval mode without grad after every 5th step (before: none counted,
    # their time in training steps)
    record, stderr, ref = run_mode(tmp_path / "b", env, "onefwd", 12)
    steps = steps_of(record)
    assert len(steps) == ref["steps"] == 12
    assert [(s.step, s.passes) for s in steps if s.mark == "eval"] == [(5, 1), (10, 1)], [(s.step, s.mark) for s in steps]
    assert eval_row(stderr)[0] == ref["evals"] == 2, stderr


def test_a_policys_rollouts_are_rollouts_not_evaluation(tmp_path: Path, env: dict[str, str]) -> None:
    record, stderr, ref = run_mode(tmp_path, env, "rollout", 3)
    steps = steps_of(record)
    assert len(steps) == ref["steps"] == 24
    # the first one too (before: read as evaluation, the first missed, and "evaluate less often" advised)
    assert [(s.step, s.passes) for s in steps if s.mark is not None] == [(0, 1), (8, 1), (16, 1)]
    assert {s.mark for s in steps if s.mark is not None} == {"rollout"}
    assert end_of(record).eval_s == 0
    assert f"rollouts    {ref['rollouts']}," in stderr, stderr
    assert "\n  eval " not in stderr and "eval-share" not in stderr, stderr
