"""How `pitstop run|tune` finds where the training command starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.cli import VALUE_OPTIONS, _profile_setting, main, split_target
from pitstop.errors import UsageError
from pitstop.profiling.launch import Target, describe_config

RUN = VALUE_OPTIONS["run"]


def test_script_and_its_own_options_are_not_ours() -> None:
    own, target = split_target(["--headless", "--record", "r.jsonl", "train.py", "--lr", "0.1", "--headless"], RUN)
    assert own == ["--headless", "--record", "r.jsonl"]
    assert target == Target(script="train.py", args=("--lr", "0.1", "--headless"))


def test_module() -> None:
    own, target = split_target(["-m", "pkg.train", "--epochs", "2"], RUN)
    assert own == [] and target == Target(module="pkg.train", args=("--epochs", "2"))


def test_launcher() -> None:
    own, target = split_target(["--headless", "--", "torchrun", "--nproc_per_node", "2", "train.py"], RUN)
    assert own == ["--headless"]
    assert target is not None and target.launcher == ("torchrun", "--nproc_per_node", "2", "train.py")
    assert target.label == "train.py"


@pytest.mark.parametrize("argv", [["--"], ["-m"], ["--record"]])
def test_incomplete_commands_are_usage_errors(argv: list[str]) -> None:
    with pytest.raises(UsageError):
        split_target(argv, RUN)


def test_profile_spec() -> None:
    assert _profile_setting("off") is None
    assert _profile_setting("100:3") == {"every": 100, "active": 3, "first": 50}
    assert _profile_setting("demand") == {"every": None, "active": 5, "first": 0}
    with pytest.raises(UsageError, match="--profile"):
        _profile_setting("often")


@pytest.mark.parametrize("port", ["99999", "0", "-1", "http"])
def test_a_bad_prometheus_port_is_one_line_and_exit_2_before_anything_runs(
    port: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PITSTOP_RECORD_DIR", str(tmp_path / "records"))  # were it to run after all
    script = tmp_path / "train.py"
    script.write_text("raise SystemExit('must not run')\n")
    code = main(["run", "--headless", "--prometheus", port, str(script)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.strip().splitlines() == [
        f"pitstop: error: --prometheus {port!r}: give a TCP port from 1 to 65535 (rank r serves PORT + LOCAL_RANK)"
    ]


def test_a_config_is_described_by_what_each_setting_applies_to() -> None:
    text = describe_config({"compute": {"amp": "bf16", "cudnn_benchmark": True},
                            "dataloader": {"num_workers": 4}, "provenance": {"script": "x"}})
    assert text == "amp=bf16, cudnn_benchmark=true (process-wide); num_workers=4 (training DataLoader)"
    assert describe_config({}) == "nothing (no setting in it)"
