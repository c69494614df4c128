"""Tests of the aggregation of py-spy's raw stacks into the dataset's lines (no py-spy needed)."""

from __future__ import annotations

import pytest

from pitstop.profiling import stacks

TORCH = "/venv/lib/python3.11/site-packages/torch/utils/data"
FETCH = f"_worker_loop ({TORCH}/_utils/worker.py:349);fetch ({TORCH}/_utils/fetch.py:52)"
MAIN_LOOP = "<module> (/home/u/train.py:90);main (/home/u/train.py:60)"


def test_a_forked_workers_time_goes_to_the_datasets_line_not_the_training_loop_above_it() -> None:
    raw = "\n".join([
        f"{MAIN_LOOP};{FETCH};__getitem__ (/home/u/data.py:20);decode (/home/u/data.py:12) 70",
        f"{MAIN_LOOP};{FETCH};__getitem__ (/home/u/data.py:21) 20",
        f"{MAIN_LOOP};_worker_loop ({TORCH}/_utils/worker.py:349);put (/usr/lib/python3.11/queue.py:10) 10",
    ])
    p = stacks.aggregate([raw], (11, 12), "DataLoader workers", 5.0)
    assert p.samples == 100
    assert [(r.where, r.share) for r in p.lines] == [
        ("/home/u/data.py:12 in decode", 0.7), ("/home/u/data.py:21 in __getitem__", 0.2),
        (stacks.LOADER_INTERNALS, 0.1)]
    assert p.functions[0].where == "decode (/home/u/data.py)"


def test_in_the_main_process_the_models_samples_are_left_out_and_said() -> None:
    raw = "\n".join([
        f"{MAIN_LOOP};__next__ ({TORCH}/dataloader.py:700);__getitem__ (/home/u/data.py:20) 30",
        f"{MAIN_LOOP};forward (/home/u/model.py:5) 60",
        "run (/usr/lib/python3.11/threading.py:1) 10",
    ])
    p = stacks.aggregate([raw], (10,), "main process (num_workers=0)", 5.0)
    assert p.samples == 30 and p.lines[0].where == "/home/u/data.py:20 in __getitem__"
    assert any("70 of 100 samples were outside the DataLoader" in n for n in p.notes)


def test_a_loader_of_another_kind_shows_every_stack_and_says_so() -> None:
    p = stacks.aggregate([f"{MAIN_LOOP};forward (/home/u/model.py:5) 5"], (10,), "main process", 1.0)
    assert p.lines[0].where == "/home/u/model.py:5 in forward"
    assert any("no sample was inside torch's DataLoader" in n for n in p.notes)


def test_no_samples_is_an_error_not_an_empty_table() -> None:
    with pytest.raises(stacks.StacksError, match="no samples"):
        stacks.aggregate(["", "garbage"], (10,), "main process", 1.0)


def test_a_ptrace_refusal_names_the_fix() -> None:
    why = stacks._why("Error: Permission Denied: Try running again with elevated permissions", 1)
    assert "ptrace" in why and "sudo" in why
