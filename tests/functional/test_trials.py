"""Pilot tests of the Trials view (`pitstop tune` in a terminal): fake journals, a stand-in tuner, one real tune."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import pytest
from conftest import FIXED, run, screen_text, wait_for
from textual.widgets import DataTable
from trialkit import TRIALS, FakeTune, totals

from pitstop.errors import ConfigError, LaunchError
from pitstop.profiling.launch import Target
from pitstop.tui.screens import ConfirmScreen, HelpScreen
from pitstop.tui.trials import TrialsApp
from pitstop.tui.tunelaunch import journal_path, start_tuner, target_from_argv
from pitstop.tuning.journal import default_journal
from pitstop.tuning.journalformat import TuneEnd

TUNE_SCRIPT = Path(__file__).parents[1] / "integration" / "scripts" / "tune_train.py"


def viewer(fake: FakeTune, **kw: object) -> TrialsApp:
    return TrialsApp(fake.proc, fake.journal_path, fake.log_path, fake.root / "pitstop.toml",
                     clock=lambda: FIXED + 75, started=FIXED, resume_command="pitstop tune --resume train.py",
                     **kw)  # type: ignore[arg-type]


async def two_more_polls(pilot: object, app: TrialsApp) -> None:
    """Wait until the view has read the journal twice more: what it would have seen, it has."""
    seen = app.journal_polls
    await wait_for(pilot, lambda: app.journal_polls >= seen + 2)


def cells(app: TrialsApp) -> list[list[str]]:
    table = app.query_one("#trials-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_trials_appear_as_the_journal_grows_and_the_report_follows_the_exit(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)

    async def scenario() -> None:
        app = viewer(fake)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: "No trial finished yet" in screen_text(app))
            fake.trial(TRIALS[0])
            await wait_for(pilot, lambda: len(app.rows) == 1)
            fake.trial(TRIALS[1])
            fake.trial(TRIALS[2])
            fake.trial(TRIALS[3])
            await wait_for(pilot, lambda: len(cells(app)) == 4)
            rows = cells(app)
            assert rows[2][1] == "★ workers=4" and rows[2][3] == "x1.50"  # the best so far, vs the baseline
            assert rows[1][1] == "workers=2" and rows[1][3] == "x1.30"
            assert rows[3][5].startswith("crash: the script raised")
            table = app.query_one("#trials-table", DataTable)
            assert "green" in str(table.get_row_at(2)[1].style)
            await wait_for(pilot, lambda: "trials 4/6 planned" in screen_text(app))
            # the journal and the tuner's log are two files read on their own polls: wait for both
            await wait_for(pilot, lambda: "[4/6] workers=8" in screen_text(app))  # the log pane
            text = screen_text(app)
            assert "TUNING" in text and "budget 10m" in text and "elapsed 0:01:15" in text
            fake.finish()
            await wait_for(pilot, lambda: app.finished_at is not None)
            await wait_for(pilot, lambda: "Winner: workers=4" in screen_text(app))
            text = screen_text(app)
            assert "DONE" in text and "config pitstop.toml" in text and "written to pitstop.toml" in text
            await pilot.press("q")  # the tuner has exited: q quits without asking
        assert app.return_value == "quit" and app.returncode == 0
        assert "Wrote pitstop.toml" in app.goodbye()

    try:
        run(scenario())
    finally:
        fake.close()


def test_progress_bars_follow_the_running_trial_and_the_tune_from_the_journal(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)
    trials = {"budget_left": "10 of 10 trials", "budget_trials": 10, "budget_seconds": None}

    async def scenario() -> None:
        app = viewer(fake)  # its clock reads FIXED + 75
        async with app.run_test(size=(120, 40)) as pilot:
            # The baseline started 40 s ago and has not reached its first step.
            fake.start_trial(TRIALS[0], at=FIXED + 35, first_step_limit=300.0, tune=totals(0, None, **trials))
            await wait_for(pilot, lambda: "no training step yet" in screen_text(app))
            assert "trial 1 baseline [baseline]" in screen_text(app)
            assert "0:00:40 (first-step limit 0:05:00)" in screen_text(app)
            fake.trial(TRIALS[0], planned=10)
            fake.start_trial(TRIALS[1], at=FIXED + 52, steps_planned=65,
                             tune=totals(1, 10, **trials | {"budget_left": "9 of 10 trials"}, eta=200.0,
                                         used_trials=1))
            await wait_for(pilot, lambda: "0/65 steps  0:00:23" in screen_text(app))
            fake.steps(FIXED + 70, 45, 65, 18.0)
            # The clock moved 5 s since the tuner wrote: the trial's elapsed time moves with it.
            await wait_for(pilot, lambda: "45/65 steps  0:00:23 (limit 0:10:00)" in screen_text(app))
            text = screen_text(app)
            assert "trial 2 workers=2 [workers]" in text
            # ETA 200 s as the trial started, 23 s ago.
            assert "1/10 trials  budget 9 of 10 trials left  ETA ~0:02:57" in text
            assert "━" in text  # the bars
            assert "trials 1/10 planned" in text

    try:
        run(scenario())
    finally:
        fake.close()


def test_a_tune_where_nothing_beat_the_baseline_says_so_and_names_no_config(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)
    report = ("pitstop tune: python train.py — 4 trials (0 from the journal) in 20 s\n\n"
              "Nothing beat the script's own settings: no config written; keep training as you do.\n"
              "  nothing beat the script's own settings by more than the noise (±3.0%)\n")
    kept = TuneEnd(FIXED + 20, "finished", 0, winner="baseline", settings={}, improves=False, confirmed=True,
                   no_config="nothing beat the script's own settings by more than the noise")

    async def scenario() -> None:
        app = viewer(fake)
        async with app.run_test(size=(120, 40)) as pilot:
            fake.trial(TRIALS[0])
            fake.finish(report, kept)
            await wait_for(pilot, lambda: app.finished_at is not None)
            await wait_for(pilot, lambda: "pitstop.toml was not written" in screen_text(app))
            assert "DONE" in screen_text(app) and "config pitstop.toml" not in screen_text(app)
        assert "Wrote" not in app.goodbye() and "Nothing beat" in app.goodbye()

    try:
        run(scenario())
    finally:
        fake.close()


def test_quit_asks_and_yes_interrupts_the_tuner_which_keeps_its_journal(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)

    async def scenario() -> None:
        app = viewer(fake)
        async with app.run_test(size=(80, 24)) as pilot:
            fake.trial(TRIALS[0])
            await wait_for(pilot, lambda: len(app.rows) == 1)
            await pilot.press("q")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")  # No keeps watching
            await wait_for(pilot, lambda: "the tune goes on" in [n.message for n in app._notifications])
            await two_more_polls(pilot, app)
            assert fake.proc.poll() is None and not app.stopping and app.state.end is None
            await pilot.press("q")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
            await wait_for(pilot, lambda: app.return_value is not None)
        assert app.return_value == "stopped" and app.returncode == 130
        assert fake.proc.wait(5) == 130
        goodbye = app.goodbye()
        assert "rerun with --resume" in goodbye and "continue with: pitstop tune --resume train.py" in goodbye

    try:
        run(scenario())
    finally:
        fake.close()


def test_detach_leaves_the_tuner_running_and_says_how_to_follow_it(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)

    async def scenario() -> None:
        app = viewer(fake)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("question_mark")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            assert "detach: leave the tuner running" in screen_text(app)
            await pilot.press("escape")
            await pilot.press("d")
        assert app.return_value == "detach"
        assert fake.proc.poll() is None
        goodbye = app.goodbye()
        assert f"pid {fake.proc.pid}" in goodbye and f"tail -f {fake.log_path}" in goodbye
        assert "pitstop tune --resume train.py" in goodbye

    try:
        run(scenario())
    finally:
        fake.close()


def test_an_earlier_tunes_journal_is_ignored_until_the_tuner_rewrites_it(tmp_path: Path) -> None:
    fake = FakeTune(tmp_path)
    fake.trial(TRIALS[1])
    st = fake.journal_path.stat()

    async def scenario() -> None:
        app = viewer(fake, stale=(st.st_ino, st.st_size, st.st_mtime_ns))
        async with app.run_test(size=(80, 24)) as pilot:
            await two_more_polls(pilot, app)
            assert app.rows == ()  # not this tune's trial
            fake.trial(TRIALS[0])
            await wait_for(pilot, lambda: len(app.rows) == 2)

    try:
        run(scenario())
    finally:
        fake.close()


def test_a_process_argv_becomes_the_target_to_tune(tmp_path: Path) -> None:
    assert target_from_argv(["/usr/bin/python3", "-u", "-X", "dev", "train.py", "--lr", "1"], "/data") == \
        Target(script="/data/train.py", args=("--lr", "1"))
    assert target_from_argv(["python", "-m", "pkg.train", "-x"], "/d") == Target(module="pkg.train", args=("-x",))
    with pytest.raises(LaunchError):
        target_from_argv(["python", "-c", "print(1)"], "/d")
    target = Target(script="train.py")
    default = journal_path([], target, tmp_path)
    assert default.parent == tmp_path / ".pitstop-tune" and default.name.startswith("train-")
    assert default == default_journal(Path("pitstop.toml"), target, tmp_path)  # the tuner's own rule
    assert journal_path(["--out", "cfg/x.toml"], target, tmp_path).parent == tmp_path / "cfg" / ".pitstop-tune"
    other = journal_path([], Target(script="sub/train.py"), tmp_path)
    assert other != default  # two train.py in different folders: two journals
    (tmp_path / "pitstop.toml").write_text("")
    with pytest.raises(ConfigError, match="exists; use --force"):
        start_tuner([], Target(script=str(TUNE_SCRIPT)), tmp_path)


@pytest.mark.slow
def test_a_real_tune_fills_the_table_trial_by_trial(tmp_path: Path) -> None:
    options = ["--steps", "10", "--warmup", "2", "--min-time", "0", "--budget", "2", "--knobs", "workers"]
    os.environ.pop("PITSTOP_SESSION", None)
    # --by-hand: the trials build no torch.optim optimizer, whose import of torch._dynamo is 2.7 s of CPU a
    # trial; this test is about the view (test_tune_distributed tunes a script with its SGD)
    target = Target(script=str(TUNE_SCRIPT), args=("--work", "200", "--n", "256", "--by-hand"))
    child = start_tuner(options, target, tmp_path)
    seen: list[int] = []

    def journal_trials() -> int:
        if not child.journal.exists():
            return 0
        return sum(1 for line in child.journal.read_text().splitlines() if '"kind":"trial"' in line)

    async def scenario() -> None:
        app = TrialsApp(child.proc, child.journal, child.log_path, child.out, stale=child.stale,
                        resume_command=child.resume_command)
        async with app.run_test(size=(120, 40)) as pilot:
            deadline = time.monotonic() + 90
            while app.finished_at is None and time.monotonic() < deadline:
                written = journal_trials()
                if written > len(seen):
                    # Each line the real tuner writes shows up as a row.
                    await wait_for(pilot, lambda: len(app.rows) >= written)
                    seen.append(written)
                await pilot.pause(0.05)
            assert app.finished_at is not None, child.log_path.read_text()
            await wait_for(pilot, lambda: any(word in screen_text(app) for word in
                                              ("Winner:", "Best found", "Nothing beat", "No configuration")))
            final_screen = screen_text(app)  # read while the app still runs
        assert app.returncode == 0, child.log_path.read_text()
        assert len(app.rows) == journal_trials() == 2 and seen
        assert app.rows[0].label == "baseline"
        end = app.state.end  # the tuner's outcome record
        assert end is not None and end.status == "finished" and app.state.done == 2, child.log_path.read_text()
        assert app.state.start is not None and app.state.start.budget == "2" and "budget 2" in final_screen
        if not end.improves:  # nothing beat the baseline: no config, and the view says so
            assert not child.out.exists() and "was not written" in final_screen and end.config is None
        else:
            assert end.config == "pitstop.toml" and child.out == tmp_path / "pitstop.toml"
            assert child.out.exists() and "pitstop run --config" in app.goodbye()
        header = json.loads(child.journal.read_text().splitlines()[0])
        assert "tune_train.py" in str(header["target"])

    try:
        run(scenario())
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait()


def test_the_child_command_carries_the_users_options(tmp_path: Path) -> None:
    script = tmp_path / "t.py"
    script.write_text("import sys; print(sys.argv)\n")
    child = start_tuner(["--budget", "3", "--knobs", "workers"], Target(script=str(script), args=("--lr", "1")),
                        tmp_path)
    try:
        cmd = child.proc.args
        assert isinstance(cmd, list)
        assert cmd[:4] == [sys.executable, "-m", "pitstop.cli", "tune"]
        assert cmd[4:8] == ["--budget", "3", "--knobs", "workers"]
        assert cmd[8:10] == ["--journal", str(child.journal)] and cmd[10:] == [str(script), "--lr", "1"]
        assert os.getpgid(child.proc.pid) == child.proc.pid  # its own session: a detach leaves it running
    finally:
        if child.proc.poll() is None:
            child.proc.kill()
        child.proc.wait()
