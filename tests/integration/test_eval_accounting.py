"""Evaluation on frameworks the step clock had not met: every pass counted, with its time; closures are not steps.

Real scripts under `pitstop run --headless`, each counting its own optimizer
steps and timing its own evaluation (the framework's timer where it has one).
Without pitstop they print: LBFGS 3 optimizer steps of 80 closure calls, a
prediction after each; ignite 60 optimizer steps, 1,920 training samples, an
evaluator run over the training and the validation loader after each of its
3 epochs; Keras 16 training batches, validation after each of 2 epochs, then
`model.evaluate()`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pitstop.events import End

from .conftest import SCRIPTS, events_of, run_pitstop
from .test_frameworks import agent_complaints, steps_of, built_by

IGNITE_EPOCHS, IGNITE_BATCH, IGNITE_STEPS_PER_EPOCH = 3, 32, 20
KERAS_EPOCHS, KERAS_STEPS, KERAS_BATCH = 2, 8, 32
# pitstop's span of an evaluation against the framework's own timer of it: the two
# start and stop at different lines (ignite's timer: 0.261 s against 0.261 s, HF's
# 0.180 against 0.205 on a loaded 2-core machine).
TIME_TOLERANCE = 0.30


def eval_row(text: str) -> tuple[int, float]:
    """(passes, seconds) from a summary's eval row."""
    m = re.search(r"^\s+eval\s+(\d+) pass(?:es)?, ([\d.]+) s", text, re.M)
    assert m, text
    return int(m.group(1)), float(m.group(2))


def end_of(record: Path) -> End:
    end = events_of(record)[-1]
    assert isinstance(end, End), end
    return end


def close(measured: float, reference: float) -> bool:
    return abs(measured / reference - 1) <= TIME_TOLERANCE


def test_lbfgs_closures_are_not_steps_and_the_predictions_between_steps_are_evaluation(
        tmp_path: Path, env: dict[str, str]) -> None:
    record, out = tmp_path / "r.jsonl", tmp_path / "ref.json"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "loop_lbfgs.py"), "3",
                          str(out)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    reference = json.loads(out.read_text())
    assert min(reference["closures"]) > 64  # more than the clock holds backward calls before deciding
    steps = steps_of(record)
    assert [(s.step, s.source) for s in steps] == [(i, "optimizer") for i in range(reference["optimizer_steps"])]
    # the prediction after step k lies in step k+1; the one after the last step in no step
    assert [s.mark for s in steps] == [None, "eval", "eval"], [(s.step, s.mark, s.eval_s) for s in steps]
    end = end_of(record)
    assert 0 < end.eval_s <= reference["predict_s"][-1], (end.eval_s, reference["predict_s"])
    assert eval_row(result.stderr)[0] == 3, result.stderr
    assert agent_complaints(record, result.stderr) == []


def test_ignite_evaluator_over_the_training_loader_is_evaluation_with_ignite_s_time(
        tmp_path: Path, env: dict[str, str]) -> None:
    record, out = tmp_path / "r.jsonl", tmp_path / "ref.json"
    result = run_pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                          str(SCRIPTS / "fw_ignite.py"), str(IGNITE_EPOCHS), str(IGNITE_BATCH), str(out)],
                         env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    reference = json.loads(out.read_text())
    total = IGNITE_EPOCHS * IGNITE_STEPS_PER_EPOCH
    assert reference["optimizer_steps"] == total and reference["trained_samples"] == total * IGNITE_BATCH
    steps = steps_of(record)
    assert [s.step for s in steps] == list(range(total))
    # the evaluator's 640 samples over the training loader are not a training step's
    assert [s.samples for s in steps] == [IGNITE_BATCH] * total, [(s.step, s.samples) for s in steps]
    marked = [s for s in steps if s.mark is not None]
    assert [s.step for s in marked] == [IGNITE_STEPS_PER_EPOCH * e for e in range(1, IGNITE_EPOCHS)]
    runs = reference["eval_s"]  # ignite's own timer: the training loader's run, then the validation loader's
    per_epoch = [runs[i] + runs[i + 1] for i in range(0, len(runs), 2)]
    figures = f"pitstop {[s.eval_s for s in marked]} + end {end_of(record).eval_s}; ignite {per_epoch}"
    for step, ignite_s in zip(marked, per_epoch):
        assert close(step.eval_s, ignite_s), figures
    assert close(end_of(record).eval_s, per_epoch[-1]), figures  # after the last step
    recorded = sum(s.eval_s for s in marked) + end_of(record).eval_s
    assert close(recorded, sum(per_epoch)), figures
    # each run of the evaluator a pass: over the training loader, then the validation loader (2 an epoch)
    assert [s.passes for s in marked] == [2] * (IGNITE_EPOCHS - 1) and end_of(record).eval_passes == 2, figures
    passes, seconds = eval_row(result.stderr)  # the summary's row: every pass, its seconds to 0.1 s
    assert passes == len(runs) == 2 * IGNITE_EPOCHS and abs(seconds - recorded) <= 0.05, (result.stderr, figures)
    assert agent_complaints(record, result.stderr) == []


def test_keras_fit_on_torch_counts_every_batch_and_marks_only_validation(
        tmp_path: Path, env: dict[str, str]) -> None:
    record, out = tmp_path / "r.jsonl", tmp_path / "ref.json"
    env["KERAS_BACKEND"] = "torch"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "fw_keras.py"),
                          str(KERAS_EPOCHS), str(KERAS_STEPS), str(KERAS_BATCH), str(out)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    reference = json.loads(out.read_text())
    assert reference["batches"] == KERAS_EPOCHS * KERAS_STEPS and len(reference["val_s"]) == KERAS_EPOCHS + 1
    steps = steps_of(record)
    # each a step of Keras's own optimizer (`optimizer.apply`), told at once: no torch optimizer steps
    # there, and the backward calls were held until 64 had passed (the live line said "first training
    # step not done ... no optimizer step yet" for 40 s of a run 60 steps in)
    assert [(s.step, s.source) for s in steps] == [(i, "optimizer") for i in range(KERAS_EPOCHS * KERAS_STEPS)]
    # step 0 trains (the one batch Keras's _symbolic_build takes is no evaluation); the first
    # epoch's validation lies in the second epoch's first step, the last one after the last step
    assert [s.step for s in steps if s.mark == "eval"] == [KERAS_STEPS], [(s.step, s.mark) for s in steps]
    assert [s.samples for s in steps] == [KERAS_BATCH] * len(steps)
    # the last validation and evaluate() after it, back to back after the last step: 2 passes there
    assert end_of(record).eval_s > 0 and end_of(record).eval_passes == 2
    assert eval_row(result.stderr)[0] == KERAS_EPOCHS + 1, result.stderr
    assert agent_complaints(record, result.stderr) == []
    assert built_by(record) == {"keras"}  # fit(x, y) built it: a fix says fit has no workers


def test_backward_calls_after_an_optimizer_step_that_raised_are_steps_again(tmp_path: Path, env: dict[str, str]) -> None:
    record = tmp_path / "r.jsonl"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "loop_step_raises.py"), "5"],
                         env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "STEPS 5" in result.stdout
    # the failed step's closure backward is not a step; each manual SGD update is one
    steps = steps_of(record)
    assert [(s.step, s.source) for s in steps] == [(i, "backward") for i in range(5)], steps
    assert agent_complaints(record, result.stderr) == []
