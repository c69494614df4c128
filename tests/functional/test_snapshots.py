"""Snapshot tests: every screen at 80x24 and 120x40, frozen clock, deterministic events."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import FIXED, FakeSource, job_batches, replay_source, run_events, screen_text, wait_for
from textual.pilot import Pilot
from trialkit import TRIALS, FakeTune

from pitstop.tui.app import PitstopApp
from pitstop.tui.trials import TrialsApp

SIZES = [(80, 24), (120, 40)]
SCREENS = {"overview": "1", "kernels": "2", "data": "3", "memory": "4", "log": "5", "help": "question_mark"}


def live_app(cuda: bool = True, log_path: Path | None = None) -> PitstopApp:
    source = FakeSource()
    source.push(run_events(cuda=cuda, wait_frac=0.1 if cuda else 0.7))
    return PitstopApp(source, log_path=log_path, clock=lambda: FIXED + 30.0)


def ready(app: PitstopApp, last: int = 119) -> Callable[[Pilot], object]:
    async def run_before(pilot: Pilot) -> None:
        def done() -> bool:
            run = app.current_run()[1]
            return run is not None and run.last_step == last

        await wait_for(pilot, done)
        if app.log_path is not None:
            await wait_for(pilot, lambda: app.log_buffer.total > 0)

    return run_before


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("screen", list(SCREENS))
def test_screen(snap_compare: Callable[..., bool], screen: str, size: tuple[int, int], tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch) -> None:
    log = None
    if screen == "log":
        monkeypatch.chdir(tmp_path)  # a relative path: the status line reads the same on every machine
        log = Path("train.log")
        log.write_text("".join(f"epoch 0 step {i}: loss {2.0 / (i + 1):.4f}\n" for i in range(60)))
    app = live_app(log_path=log)
    assert snap_compare(app, press=[SCREENS[screen]], terminal_size=size, run_before=ready(app))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_overview_without_gpu(snap_compare: Callable[..., bool], size: tuple[int, int]) -> None:
    app = live_app(cuda=False)
    assert snap_compare(app, terminal_size=size, run_before=ready(app))


def test_replay_overview(snap_compare: Callable[..., bool]) -> None:
    app = PitstopApp(replay_source(run_events()), clock=lambda: FIXED + 30.0)

    async def run_before(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: app.timeline is not None)
        await pilot.press("home", "right", "right", "right", "right", "right")

    assert snap_compare(app, terminal_size=(80, 24), run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_ranks_screen(snap_compare: Callable[..., bool], size: tuple[int, int]) -> None:
    # Three ranks: rank 1 computes 2.5x longer (the straggler), rank 2 died after 40 steps.
    app = PitstopApp(FakeSource(batches=job_batches(ranks=3, gone_rank=2)), clock=lambda: FIXED + 30.0)

    async def run_before(pilot: Pilot) -> None:
        await wait_for(pilot, lambda: len(app.job.runs) == 3 and 2 in [r.rank for r in app.job.runs.values()])
        await pilot.press("6")
        await wait_for(pilot, lambda: "rank 2 is gone" in screen_text(app))

    assert snap_compare(app, terminal_size=size, run_before=run_before)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_trials_view(snap_compare: Callable[..., bool], size: tuple[int, int], tmp_path: Path,
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # relative paths: the log pane's title reads the same on every machine
    fake = FakeTune(Path("."))
    for trial in TRIALS:
        fake.trial(trial)
    app = TrialsApp(fake.proc, fake.journal_path, fake.log_path, Path("pitstop.toml"),
                    clock=lambda: FIXED + 75.0, started=FIXED)

    async def run_before(pilot: Pilot) -> None:
        # The last row drawn too, and one more refresh: in a loaded suite the table was caught
        # laid out for fewer rows (narrower status column) after the rows had arrived.
        await wait_for(pilot, lambda: len(app.rows) == 4 and "[4/6]" in screen_text(app)
                       and "crash: the script raised" in screen_text(app)
                       and "4/6 trials" in screen_text(app))  # the tune's header, drawn apart
        await pilot.pause()

    try:
        assert snap_compare(app, terminal_size=size, run_before=run_before)
    finally:
        fake.close()
