"""The one shell line of a typed command: quoted, with the variables it needs, with `cd` when shown elsewhere."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pitstop.analysis.command import Command, tune_line
from pitstop.events import Hello, decode, encode
from pitstop.profiling.launch import BOOTSTRAP_DIR, SessionSettings, Target, typed_env


def hello(**fields: object) -> Hello:
    base: dict[str, object] = dict(schema=1, pitstop_version="0", session="s", pid=1, ppid=0, host="h",
                                   argv=["python", "train.py"], cwd="/", started=0.0, python="3.11", script="train.py")
    return Hello(**{**base, **fields})  # type: ignore[arg-type]


def test_the_line_quotes_arguments_and_carries_the_environment(tmp_path: Path) -> None:
    typed = hello(command=["sub/train.py", "--tag", "two words", "--lr=1e-3"], command_cwd=str(tmp_path),
                  command_env={"PYTHONPATH": ".", "CUDA_VISIBLE_DEVICES": "1,2", "HF_HUB_OFFLINE": "1"})
    assert tune_line(typed, ["amp"]) == (
        f"cd {tmp_path} && CUDA_VISIBLE_DEVICES=1,2 HF_HUB_OFFLINE=1 PYTHONPATH=. "
        "pitstop tune --knobs amp sub/train.py --tag 'two words' --lr=1e-3")


def test_the_line_goes_to_the_directory_it_was_typed_in_wherever_it_is_shown(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    where = tmp_path / "my proj"
    where.mkdir()
    typed = hello(command=["-m", "pkg.train"], command_cwd=str(where), command_env={})
    monkeypatch.chdir(where)  # printed where it was typed, and pasted into a shell anywhere: the cd comes first
    assert tune_line(typed) == f"cd '{where}' && pitstop tune -m pkg.train"
    monkeypatch.chdir(tmp_path)
    assert tune_line(typed) == f"cd '{where}' && pitstop tune -m pkg.train"


def test_a_launcher_a_batch_size_knob_and_an_old_record() -> None:
    launcher = hello(command=["--", "torchrun", "--nproc_per_node", "2", "train.py"])
    assert tune_line(launcher, ["num_workers"]) == "pitstop tune --knobs num_workers -- torchrun --nproc_per_node 2 train.py"
    # Without --batch-size the tuner skips the batch size: the line would not measure what it says.
    assert tune_line(launcher, ["batch_size"]).startswith("pitstop tune --knobs batch_size --batch-size -- torchrun")
    assert tune_line(hello()) == "pitstop tune train.py"  # a record of an older pitstop: its script's name
    assert tune_line(None) == "pitstop tune SCRIPT"


def test_typed_env_keeps_the_users_pythonpath_and_framework_variables_not_secrets_or_pitstops_bootstrap() -> None:
    env = {"PYTHONPATH": os.pathsep.join([str(BOOTSTRAP_DIR), ".", "lib"]), "CUDA_VISIBLE_DEVICES": "0",
           "HF_TOKEN": "secret", "WANDB_API_KEY": "secret", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "OMP_NUM_THREADS": "1", "KERAS_BACKEND": "torch", "NCCL_DEBUG": "INFO", "TORCH_LOGS": "+dynamo",
           "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "MKL_NUM_THREADS": "2",
           "TRANSFORMERS_VERBOSITY": "info", "WANDB_MODE": "offline", "HOME": "/root", "LANG": "C", "EMPTY_": "",
           "HF_HOME": ""}
    assert typed_env(env) == {"PYTHONPATH": os.pathsep.join([".", "lib"]), "CUDA_VISIBLE_DEVICES": "0",
                              "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "OMP_NUM_THREADS": "1",
                              "KERAS_BACKEND": "torch", "NCCL_DEBUG": "INFO", "TORCH_LOGS": "+dynamo",
                              "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "MKL_NUM_THREADS": "2",
                              "TRANSFORMERS_VERBOSITY": "info", "WANDB_MODE": "offline"}
    assert typed_env({"PYTHONPATH": str(BOOTSTRAP_DIR)}) == {}


def test_the_typed_command_travels_through_the_session_and_the_record() -> None:
    target = Target(script="sub/train.py", args=("--steps", "3"))
    settings = SessionSettings.from_env(SessionSettings(session="s", record="/tmp/r", command=target.words(),
                                                        command_cwd="/work", command_env={"PYTHONPATH": "."}).to_env())
    sent = hello(command=settings.command, command_cwd=settings.command_cwd, command_env=settings.command_env)
    back = decode(encode(sent))
    assert isinstance(back, Hello)
    assert Command.of(back) == Command(("sub/train.py", "--steps", "3"), "/work", {"PYTHONPATH": "."})
