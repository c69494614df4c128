"""Real frameworks under `pitstop run`: Lightning and the HF Trainer run as without it, and every step is counted.

CPU only, tiny models, synthetic data, no downloads (issue 10). Each script
counts its optimizer steps with a plain global post-hook and notes the steps
done at each validation pass: that is the reference pitstop's record is
checked against. Run without pitstop, the scripts print: Lightning 30
optimizer steps, validation at [0, 10, 20, 30] (0 is the sanity check) on
one device and on each of two DDP ranks; the HF Trainer 40 optimizer steps,
evaluation at [10, 20, 30, 40].
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.events import DataLoaderInfo, End, Hello, Note, Step

from .conftest import SCRIPTS, events_of, run_pitstop  # test_eval_loader imports run_pitstop from here

LIGHTNING_STEPS = 30  # below 50, where the default profiler schedule opens its first window
HF_STEPS, HF_BATCH, HF_EVAL_EVERY = 40, 8, 10
TIMEOUT = 240.0


@pytest.fixture
def fw_env(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """No hub, no reporting integrations, every cache inside the test's directory."""
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
        WANDB_MODE="disabled",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def steps_of(record: Path) -> list[Step]:
    return [e for e in events_of(record) if isinstance(e, Step)]


def summary_throughput(text: str) -> tuple[float, float]:
    """(samples/s, steps/s) from a summary's throughput row."""
    m = re.search(r"^\s+throughput\s+([\d.,]+) samples/s, ([\d.,]+) steps/s", text, re.M)
    assert m, text
    return float(m.group(1).replace(",", "")), float(m.group(2).replace(",", ""))  # "1,234 samples/s"


def training_steps_per_s(steps: list[Step], warmup: int = 3) -> float:
    """Unmarked steps past the warm-up over their summed wall time: the record's own training rate."""
    train = [s for s in steps if s.step >= warmup and s.mark is None]
    return len(train) / sum(s.wall for s in train)


def hook_steps_per_s(stamps: list[float], eval_at: list[int], warmup: int = 3) -> float:
    """The same rate from the script's own optimizer-step stamps, leaving out the steps holding an evaluation."""
    walls = [stamps[i] - stamps[i - 1] for i in range(max(1, warmup), len(stamps)) if i not in eval_at]
    return len(walls) / sum(walls)


def agent_complaints(record: Path, stderr: str) -> list[str]:
    """Parts of the agent that switched themselves off, and warnings raised from pitstop's own code."""
    notes = [f"{n.source}: {n.message}" for n in events_of(record) if isinstance(n, Note) and n.level != "info"]
    return notes + [line for line in stderr.splitlines() if "pitstop/profiling/" in line]


def check_lightning_rank(record: Path, reference: dict[str, object], ddp: bool = False) -> None:
    """One rank's record against the script's own counts: every optimizer step, eval marked, batch samples only."""
    assert reference["optimizer_steps"] == reference["fit_steps"] == reference["global_step"] == LIGHTNING_STEPS
    steps = steps_of(record)
    assert [s.step for s in steps] == list(range(LIGHTNING_STEPS)), [(s.step, s.source) for s in steps]
    assert {s.source for s in steps} == {"optimizer"}
    val_at = reference["val_at"]
    assert isinstance(val_at, list)
    # A pass that begins after k optimizer steps runs inside step k (0-based; the
    # sanity check inside step 0); the one after the last step lies in no step.
    marked = [s.step for s in steps if s.mark == "eval"]
    assert marked == [k for k in val_at if k < LIGHTNING_STEPS], (marked, val_at)
    assert all(s.eval_s > 0 for s in steps if s.mark == "eval")
    assert [s.step for s in steps if s.mark not in (None, "eval")] == []  # no profiler window in 30 steps
    # validation batches are never a training step's samples
    assert [s.samples for s in steps] == [reference["batch"]] * LIGHTNING_STEPS
    end = events_of(record)[-1]
    assert isinstance(end, End) and end.steps == LIGHTNING_STEPS and end.exit_code == 0, end
    # Built by the script and handed to fit: a fix names its own DataLoader, no framework's setting. Under
    # DDP Lightning builds it again with a DistributedSampler (its code on the stack), from the script's
    # arguments: the fix's DataLoader(...), with its note on train_dataloader(), holds for both.
    assert built_by(record) == ({"lightning"} if ddp else {""})


def built_by(record: Path) -> set[str]:
    """The frameworks that built the loaders whose batches fed the steps (Keras builds one an epoch)."""
    events = events_of(record)
    fed = {e.loader for e in events if isinstance(e, Step) and e.loader is not None}
    assert fed, "no step names its loader"
    return {e.framework for e in events if isinstance(e, DataLoaderInfo) and e.id in fed}


def test_lightning_fit_validate_predict(tmp_path: Path, fw_env: dict[str, str]) -> None:
    record, out = tmp_path / "pl.jsonl", tmp_path / "pl"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "fw_lightning.py"),
                          str(LIGHTNING_STEPS), "auto", "1", str(out)], fw_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "done" in result.stdout
    reference = json.loads(Path(f"{out}.rank0.json").read_text())
    assert reference["predicted"] == 48  # predict saw every sample, as without pitstop
    check_lightning_rank(record, reference)
    assert agent_complaints(record, result.stderr) == []


@pytest.mark.slow
def test_lightning_ddp_on_two_cpu_processes(tmp_path: Path, fw_env: dict[str, str]) -> None:
    record, out = tmp_path / "ddp.jsonl", tmp_path / "ddp"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "fw_lightning.py"),
                          str(LIGHTNING_STEPS), "ddp", "2", str(out)], fw_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    references = {}
    for rank in (0, 1):
        reference = json.loads(Path(f"{out}.rank{rank}.json").read_text())
        assert reference["predicted"] == 24  # the DistributedSampler Lightning injects halves the 48 samples
        references[reference["pid"]] = reference
    # Lightning starts rank 1 itself (its subprocess launcher): each rank needs an agent and a record
    records = {next(e for e in events_of(f) if isinstance(e, Hello)).pid: f for f in tmp_path.glob("ddp*.jsonl")}
    assert sorted(records) == sorted(references), (
        f"records of pids {sorted(records)}, ranks ran as pids {sorted(references)}\n{result.stderr[-3000:]}"
    )
    for pid, f in records.items():
        check_lightning_rank(f, references[pid], ddp=True)
        assert agent_complaints(f, result.stderr) == []


def test_hf_trainer_steps_and_throughput(tmp_path: Path, fw_env: dict[str, str]) -> None:
    record, out = tmp_path / "hf.jsonl", tmp_path / "hf.json"
    result = run_pitstop(["run", "--headless", "--record", str(record), str(SCRIPTS / "fw_hf_trainer.py"),
                          str(HF_STEPS), str(HF_BATCH), str(HF_EVAL_EVERY), str(tmp_path / "output"), str(out)],
                         fw_env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    reference = json.loads(out.read_text())
    assert reference["optimizer_steps"] == reference["global_step"] == HF_STEPS
    assert reference["eval_at"] == [10, 20, 30, 40]

    steps = steps_of(record)
    assert [s.step for s in steps] == list(range(HF_STEPS))
    marked = [s.step for s in steps if s.mark == "eval"]
    assert marked == [k for k in reference["eval_at"] if k < HF_STEPS], marked
    assert all(s.eval_s > 0 for s in steps if s.mark == "eval")
    # accelerate's loader fetches one batch ahead, so step 0 may hold two; every later step holds one
    assert [s.samples for s in steps[3:]] == [HF_BATCH] * (HF_STEPS - 3), [s.samples for s in steps]
    # Built by accelerate inside the Trainer: a fix names TrainingArguments, the outer one.
    assert built_by(record) == {"transformers"}

    summary = subprocess.run([sys.executable, "-m", "pitstop.cli", "view", str(record), "--summary"], env=fw_env,
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    # the evaluation at the last step lies in no step: the summary still counts it, with its time
    end = events_of(record)[-1]
    assert isinstance(end, End) and end.eval_s > 0, end
    runtime = reference["eval_runtime"]  # the Trainer's own timer of each evaluation
    measured = [s.eval_s for s in steps if s.mark == "eval"] + [end.eval_s]
    # Within 30%, or 10 ms: each evaluation here takes ~15-20 ms. In a full suite on a loaded 2-core VM
    # the last one measured 0.0139 s against the Trainer's 0.0207 (its timer spans more than the
    # evaluation's forwards); run alone, three times, it matched within 30%.
    assert all(abs(m - r) < max(0.3 * r, 0.010) for m, r in zip(measured, runtime)), (measured, runtime)
    assert re.search(rf"^\s+eval\s+{len(reference['eval_at'])} passes, ", summary.stdout, re.M), summary.stdout
    samples_per_s, _ = summary_throughput(summary.stdout)
    from_record = HF_BATCH * training_steps_per_s(steps)
    from_hook = HF_BATCH * hook_steps_per_s(reference["stamps"], reference["eval_at"])
    figures = (f"summary {samples_per_s} samples/s; batch x training steps/s: {from_record:.1f} from the record's "
               f"unmarked steps, {from_hook:.1f} from the script's own optimizer hook")
    # The summary counts the training part of the steps that evaluate (their wall less the evaluation
    # pitstop timed, not the Trainer's bookkeeping around it); these references count the unmarked
    # steps only: 2.4% apart in one full run of the suite on the loaded 2-core VM, 3.6% in another
    # (a helper running training scripts beside it: the suite took 840 s), within 3% run alone (twice).
    assert abs(samples_per_s / from_record - 1) < 0.05, figures
    assert abs(samples_per_s / from_hook - 1) < 0.05, figures
    assert agent_complaints(record, result.stderr) == []
