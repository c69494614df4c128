"""`pitstop run --plot`: the text charts come after the end summary, on stdout, plain ASCII off a terminal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pitstop.cli import _parser, _run_request
from pitstop.runflow import Fronts, Run, RunRequest
from tests.unit.test_runflow import TARGET, FakeChild, FakeLaunch, FakeStatus


@pytest.fixture(autouse=True)
def private_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(tmp_path / "rt"))


def _run(tmp_path: Path, launch: FakeLaunch, fronts: dict[str, Any] | None = None, **request: Any) -> Run:
    def status(session: str, label: str, proc: FakeChild, watch: object = None) -> FakeStatus:
        return FakeStatus(proc)

    return Run(RunRequest(target=TARGET, headless=True, record=str(tmp_path / "rec"), **request),
               fronts=Fronts(status=status, **(fronts or {})), launcher=launch, on_a_terminal=lambda: True)


def test_run_plot_prints_the_ascii_charts_on_stdout_after_the_summary(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, FakeLaunch(returncode=0, steps=30), plot=True).execute() == 0
    out, err = capsys.readouterr()
    assert "pitstop summary: train.py" in err and "by step" not in err
    lines = out.splitlines()
    assert lines[0].strip() == "step time (ms) by step"  # pytest's capture is not a terminal
    assert "data wait ms" in out and "throughput (samples/s) by step" in out
    assert "\x1b" not in out and out.isascii()


def test_without_plot_stdout_stays_the_scripts_and_a_failed_chart_keeps_the_exit_code(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path / "a", FakeLaunch(returncode=0, steps=30)).execute() == 0
    assert capsys.readouterr().out == ""

    def broken(runs: list[Any], width: int, color: bool) -> str:
        raise ValueError("no room")

    assert _run(tmp_path / "b", FakeLaunch(returncode=3, steps=30), {"plot": broken}, plot=True).execute() == 3
    out, err = capsys.readouterr()
    assert out == "" and "pitstop: no charts: ValueError: no room" in err


def test_the_plot_options_of_run() -> None:
    request = _run_request(_parser().parse_args(["run", "--headless", "--plot", "--no-color"]), TARGET)
    assert request.plot and not request.color
    request = _run_request(_parser().parse_args(["run"]), TARGET)
    assert not request.plot and request.color
