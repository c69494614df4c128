"""A fix that sets a DataLoader argument names it where the loader is built: the script's DataLoader, or its
framework's setting (or says there is none)."""

from __future__ import annotations

import dataclasses

import pytest

from pitstop.analysis import RunState, findings
from pitstop.analysis._loaderfix import loader_fix
from pitstop.events import DataLoaderInfo, Runtime, Step
from tests.unit.test_rules_trends import cpu_runtime, epoch_run, eval_run


def data_wait_fix(framework: str) -> str:
    """The data-wait fix of a CPU run whose loader (built by `framework`) makes it wait 20 ms of 30 ms a step."""
    run = RunState()
    run.add(Runtime(t=0.5, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=8, usable_cpus=8))
    run.add(DataLoaderInfo(t=0.6, id=1, num_workers=0, batch_size=32, pin_memory=False, persistent_workers=False,
                           prefetch_factor=None, framework=framework))
    t = 1.0
    for i in range(30):
        t += 0.03
        run.add(Step(t=t, step=i, wall=0.03, data_wait=0.02, samples=32))
    found = next(f for f in findings(run) if f.rule == "data-wait")
    return found.fix


def test_a_script_of_its_own_gets_its_dataloader_arguments() -> None:
    assert data_wait_fix("").startswith("DataLoader(dataset, batch_size=32, num_workers=2, persistent_workers=True")


def test_keras_fit_is_told_that_fit_has_no_worker_setting_and_what_takes_one() -> None:
    fix = data_wait_fix("keras")
    assert "no worker setting" in fix and "fit(workers=)" in fix
    assert "model.fit(DataLoader(dataset, batch_size=32, num_workers=2" in fix  # fit takes a torch DataLoader
    assert "keras.utils.PyDataset" in fix and "workers=2, use_multiprocessing=True" in fix
    assert not fix.startswith("DataLoader(")  # never a line that reads as the script's own DataLoader


def test_hf_trainer_gets_its_training_arguments() -> None:
    fix = data_wait_fix("transformers")
    assert fix.startswith("TrainingArguments(..., per_device_train_batch_size=32, dataloader_num_workers=2, "
                          "dataloader_persistent_workers=True, dataloader_prefetch_factor=4)")
    assert "--dataloader_num_workers 2" in fix


@pytest.mark.parametrize("package", ["lightning", "pytorch_lightning"])
def test_lightning_is_told_where_its_dataloader_is_built(package: str) -> None:
    fix = data_wait_fix(package)
    assert fix.startswith("DataLoader(dataset, batch_size=32, num_workers=2") and "train_dataloader()" in fix


# -- every other finding that sets a DataLoader argument -------------------------------------------------------
def framed(run: RunState, framework: str) -> RunState:
    """`run` with every DataLoader built by `framework` (as the agent notes it, from the stack at construction)."""
    for dl in list(run.dataloaders.values()):
        run.add(dataclasses.replace(dl, framework=framework))
    return run


def fix_of(run: RunState, rule_id: str) -> str:
    found = next((f for f in findings(run) if f.rule == rule_id), None)
    assert found is not None, [f.rule for f in findings(run)]
    return found.fix


def test_the_eval_loader_fix_names_each_frameworks_evaluation_setting() -> None:
    assert "DataLoader(val_set, batch_size=200, num_workers=2)  # eval loads in workers" in fix_of(
        eval_run(passes=4, eval_s=1.0), "eval-share")
    hf = fix_of(framed(eval_run(passes=4, eval_s=1.0), "transformers"), "eval-share")
    assert "TrainingArguments(..., per_device_eval_batch_size=200, dataloader_num_workers=2)" in hf
    assert "--per_device_eval_batch_size 200 --dataloader_num_workers 2" in hf
    assert "DataLoader(" not in hf and "per_device_train_batch_size" not in hf
    assert "eval_steps=2 * yours" in hf and "EVAL_EVERY" not in hf  # its own schedule, not a loop it does not have
    keras = fix_of(framed(eval_run(passes=4, eval_s=1.0), "keras"), "eval-share")
    assert "no worker setting" in keras and "fit(workers=)" in keras
    assert "model.fit(..., validation_data=DataLoader(val_set, batch_size=200, num_workers=2))" in keras
    assert "validation_freq=2" in keras
    lightning = fix_of(framed(eval_run(passes=4, eval_s=1.0), "lightning"), "eval-share")
    assert "DataLoader(val_set, batch_size=200, num_workers=2)" in lightning and "val_dataloader()" in lightning
    assert "check_val_every_n_epoch=2" in lightning


def test_the_persistent_workers_fix_names_the_frameworks_setting_or_none() -> None:
    assert fix_of(epoch_run(), "epoch-stall") == "DataLoader(dataset, ..., num_workers=2, persistent_workers=True)"
    hf = fix_of(framed(epoch_run(), "transformers"), "epoch-stall")
    assert hf.startswith("TrainingArguments(..., dataloader_num_workers=2, dataloader_persistent_workers=True)")
    keras = fix_of(framed(epoch_run(), "keras"), "epoch-stall")
    assert not keras.startswith("DataLoader(") and "no worker setting" in keras
    assert "train_dataloader()" in fix_of(framed(epoch_run(), "pytorch_lightning"), "epoch-stall")


def test_the_oversubscribed_workers_fix_names_the_frameworks_setting_with_a_number() -> None:
    def run(framework: str) -> RunState:
        r = RunState()
        r.add(cpu_runtime(usable=4))
        r.add(DataLoaderInfo(t=0.6, id=1, num_workers=16, batch_size=32, pin_memory=False, persistent_workers=False,
                             prefetch_factor=2, framework=framework))
        return r

    assert "sched_getaffinity" in fix_of(run(""), "workers-oversubscribed")
    hf = fix_of(run("transformers"), "workers-oversubscribed")
    assert hf.startswith("TrainingArguments(..., dataloader_num_workers=3)") and "--dataloader_num_workers 3" in hf
    assert "sched_getaffinity" not in hf  # a flag takes a number, not an expression
    keras = fix_of(run("keras"), "workers-oversubscribed")
    assert "no worker setting" in keras and not keras.startswith(("import os", "DataLoader("))


def test_a_setting_a_framework_lacks_is_said_to_be_none() -> None:
    keras = DataLoaderInfo(t=0.6, id=1, num_workers=0, batch_size=32, pin_memory=False, persistent_workers=False,
                           prefetch_factor=None, framework="keras")
    fix = loader_fix(keras, ["dataset", "...", "pin_memory=True"])
    assert "no setting for pin_memory (none in Keras 3)" in fix and "model.fit(DataLoader(dataset, ..., pin_memory=True)" in fix
    assert loader_fix(keras, ["dataset", "batch_size=64", "..."], role="eval").startswith(
        "model.fit(..., validation_data=(x_val, y_val), validation_batch_size=64)")
    hf = dataclasses.replace(keras, framework="transformers")
    assert loader_fix(hf, ["...", "drop_last=True"]).startswith("TrainingArguments(..., dataloader_drop_last=True)")
    assert loader_fix(hf, ["dataset", "batch_size=64", "..."]).startswith(
        "TrainingArguments(..., per_device_train_batch_size=64)")


def test_an_eval_loader_that_batches_in_its_sampler_is_not_told_batch_size_2() -> None:
    run = framed(eval_run(passes=4, eval_s=1.0), "keras")
    run.add(dataclasses.replace(run.dataloaders[2], batch_size=None))  # Keras's fit: batches come from its sampler
    fix = fix_of(run, "eval-share")
    assert "batch_size=2" not in fix and "validation_data=DataLoader(val_set, num_workers=2)" in fix
