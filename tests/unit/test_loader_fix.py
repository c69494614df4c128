"""A data-wait fix names the setting where the training loader is built: the script's DataLoader, or its framework's."""

from __future__ import annotations

import pytest

from pitstop.analysis import RunState, findings
from pitstop.events import DataLoaderInfo, Runtime, Step


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
