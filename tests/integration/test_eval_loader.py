"""A loop that evaluates every 10 steps with a loader built after the training one: training is what is measured.

Issue 10 (2, 3): the eval batches must not enter training throughput, the
steps holding an eval pass are marked and reported apart, and the data-wait
advice is about the training loader. Run without pitstop, the script makes
60 optimizer steps and evaluates after 10, 20, 30, 40 and 50 of them.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from pitstop.analysis import RunState, findings

from .conftest import SCRIPTS, events_of
from .test_frameworks import (
    agent_complaints,
    hook_steps_per_s,
    run_pitstop,
    steps_of,
    summary_throughput,
    training_steps_per_s,
)

STEPS, TRAIN_BATCH, EVAL_BATCH = 60, 16, 100
EVAL_AT = [10, 20, 30, 40, 50]


def test_eval_passes_are_kept_apart_and_advice_names_the_training_loader(tmp_path: Path, env: dict[str, str]) -> None:
    record, out = tmp_path / "r.jsonl", tmp_path / "ref.json"
    # No profiler windows: the default schedule opens one at step 50, and its marked steps are another test's
    result = run_pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                          str(SCRIPTS / "eval_every_n.py"), str(STEPS), str(out)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    reference = json.loads(out.read_text())
    assert reference["optimizer_steps"] == STEPS and reference["eval_at"] == EVAL_AT

    steps = steps_of(record)
    assert [s.step for s in steps] == list(range(STEPS))
    assert [s.step for s in steps if s.mark == "eval"] == EVAL_AT, [(s.step, s.mark) for s in steps]
    assert all(s.eval_s > 0 for s in steps if s.mark == "eval")
    assert [s.samples for s in steps] == [TRAIN_BATCH] * STEPS  # the eval batches of 100 are no step's samples
    train_ids = {s.loader for s in steps}
    assert len(train_ids) == 1 and None not in train_ids

    summary = subprocess.run([sys.executable, "-m", "pitstop.cli", "view", str(record), "--summary"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    text = summary.stdout
    samples_per_s, _ = summary_throughput(text)
    from_record = TRAIN_BATCH * training_steps_per_s(steps)
    from_hook = TRAIN_BATCH * hook_steps_per_s(reference["stamps"], EVAL_AT)
    figures = (f"summary {samples_per_s} samples/s; 16 x training steps/s: {from_record:.1f} from the record's "
               f"unmarked steps, {from_hook:.1f} from the script's own optimizer hook")
    assert abs(samples_per_s / from_record - 1) < 0.02, figures
    assert abs(samples_per_s / from_hook - 1) < 0.02, figures
    # evaluation is reported on its own row: "eval  5 passes, 0.3 s, 4% of wall time"
    assert re.search(r"^\s+eval\s+5 passes\b", text, re.M), text

    # The training loader stalls the loop (no workers, ~32 ms to load a batch of 16):
    # the advice must be about it, never about the eval loader built after it.
    run = RunState()
    for event in events_of(record):
        run.add(event)
    stall = next((f for f in findings(run) if f.rule == "data-wait"), None)
    assert stall is not None, [f.rule for f in findings(run)]
    advice = "\n".join([*stall.evidence, stall.fix])
    assert f"batch_size={TRAIN_BATCH}" in advice and f"batch_size={EVAL_BATCH}" not in advice, advice
    block = text.split("(data-wait)", 1)[1].split("\n  2. ", 1)[0]
    assert f"batch_size={TRAIN_BATCH}" in block and f"batch_size={EVAL_BATCH}" not in block, block
    assert agent_complaints(record, result.stderr) == []
