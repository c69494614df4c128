"""What a config's DataLoader keys target: [dataloader] the training loader, [eval_dataloader] the others."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader, TensorDataset

from pitstop.profiling.overrides import Overrides


class _Agent:
    def __init__(self) -> None:
        self.events: list[Any] = []

    def emit(self, event: Any) -> None:
        self.events.append(event)


def _build(overrides: Overrides, **kwargs: Any) -> DataLoader:
    data = TensorDataset(torch.zeros(8, 2))
    loader = DataLoader.__new__(DataLoader)
    args, values, applied, skipped = overrides.dataloader_kwargs(DataLoader.__init__, loader, (data,), kwargs)
    DataLoader.__init__(loader, *args, **values)
    overrides.report_dataloader(loader, applied, skipped)
    return loader


def test_dataloader_keys_reach_the_training_loader_and_eval_keys_the_eval_loader() -> None:
    agent = _Agent()
    config = {"dataloader": {"num_workers": 2, "persistent_workers": True}, "eval_dataloader": {"num_workers": 1}}
    overrides = Overrides(agent, torch, config)
    train = _build(overrides, batch_size=4, shuffle=True)
    evaluation = _build(overrides, batch_size=8)  # sequential, built after the training one
    assert (train.num_workers, train.persistent_workers) == (2, True)
    assert (evaluation.num_workers, evaluation.persistent_workers) == (1, False)
    infos = agent.events
    assert infos[0].overrides == {"num_workers": 2, "persistent_workers": True} and infos[0].shuffle is True
    assert infos[1].overrides == {"num_workers": 1} and infos[1].shuffle is False
    assert "evaluation DataLoader" in infos[1].skipped["persistent_workers"]
    assert infos[1].dataset == "TensorDataset"


def test_without_eval_keys_an_eval_loader_keeps_the_scripts_settings_and_says_why() -> None:
    agent = _Agent()
    overrides = Overrides(agent, torch, {"dataloader": {"num_workers": 2}})
    _build(overrides, batch_size=4, shuffle=True)
    evaluation = _build(overrides, batch_size=8)
    assert evaluation.num_workers == 0
    assert agent.events[1].overrides == {}
    assert "[dataloader] sets the training one" in agent.events[1].skipped["num_workers"]


def test_the_first_loader_is_the_training_one_when_none_shuffles() -> None:
    agent = _Agent()
    overrides = Overrides(agent, torch, {"dataloader": {"num_workers": 2}})
    first = _build(overrides, batch_size=4)  # an iterable-style script that shuffles upstream
    assert first.num_workers == 2


def test_no_workers_unsets_the_scripts_worker_only_arguments_instead_of_crashing() -> None:
    agent = _Agent()
    overrides = Overrides(agent, torch, {"dataloader": {"num_workers": 0}})
    loader = _build(overrides, batch_size=4, shuffle=True, num_workers=2, persistent_workers=True,
                    prefetch_factor=4, multiprocessing_context="spawn")
    assert (loader.num_workers, loader.persistent_workers, loader.multiprocessing_context) == (0, False, None)
    assert agent.events[0].overrides["num_workers"] == 0


def test_the_function_building_a_loader_names_its_role_before_its_order_does() -> None:
    # Lightning builds its validation loader first (the sanity check), in the module's `val_dataloader`;
    # the training one, sequential (BoringModel's), after it: [dataloader] batch_size=16 went to validation.
    agent = _Agent()
    overrides = Overrides(agent, torch, {"dataloader": {"batch_size": 16}, "eval_dataloader": {"num_workers": 1}})

    def val_dataloader() -> DataLoader:
        return _build(overrides, batch_size=4)

    def train_dataloader() -> DataLoader:
        return _build(overrides, batch_size=4)

    validation, train = val_dataloader(), train_dataloader()
    assert (validation.batch_size, validation.num_workers) == (4, 1)
    assert (train.batch_size, train.num_workers) == (16, 0)
    assert agent.events[0].skipped["batch_size"].startswith("an evaluation DataLoader (built in val_dataloader())")
