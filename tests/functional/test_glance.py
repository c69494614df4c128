"""Pilot tests of issue 12: the 80x24 overview, the keys people bring from htop and nvitop, the log
after attach, the Ops and Data screens."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from conftest import FIXED, FakeSource, replay_source, run, run_events, screen_text, steps, wait_for

from pitstop.events import End, Event, Hello, Note
from pitstop.tui.app import PitstopApp
from pitstop.tui.screens import DataScreen, FindingsScreen, HelpScreen, KernelsScreen, LogScreen


def notices(app: PitstopApp) -> list[str]:
    return [n.message for n in app._notifications]


def live(events: list[Event], **kwargs: object) -> tuple[FakeSource, PitstopApp]:
    source = FakeSource()
    source.push(events)
    return source, PitstopApp(source, clock=lambda: FIXED + 30, **kwargs)  # type: ignore[arg-type]


async def settled(pilot: object, app: PitstopApp, last: int) -> None:
    """Wait for the step, then for the findings of that state to be on the screen (computed once a second)."""
    await wait_for(pilot, lambda: (r := app.current_run()[1]) is not None and r.last_step == last)
    await wait_for(pilot, lambda: app.frame().findings is not None)
    await pilot.wait_for_scheduled_animations()  # type: ignore[attr-defined]


def test_the_overview_at_80x24_answers_where_the_time_goes_and_what_to_change_without_scrolling() -> None:
    async def scenario() -> None:
        # A CPU run whose loader cannot keep up: 70% of each step waits for data.
        _, app = live(run_events(cuda=False, wait_frac=0.7))
        async with app.run_test(size=(80, 24)) as pilot:
            await settled(pilot, app, 119)
            await wait_for(pilot, lambda: "The DataLoader cannot keep up" in screen_text(app))
            lines = screen_text(app).splitlines()
            text = "\n".join(lines)
            assert len(lines) == 24
            # Where the step time goes, then the phases of the profiled steps.
            assert "step p50 100.0 ms" in text and "data wait 70.0 ms (70%)" in text and "compute 30.0 ms (30%)" in text
            assert "profiled steps 25-29: data 9%" in text
            # The top finding with its fix and its expected gain.
            assert "fix DataLoader(dataset, batch_size=64, num_workers=7" in text
            assert "gain ~3.30x (100.0 ms to ~30.3 ms) in the mean step with 7 workers" in text
            # One line each for GPU, CPU and memory.
            assert "GPU n/a (NVML not available: no NVIDIA driver)" in text
            assert any(line.lstrip().startswith("CPU main 0.98") and "2 workers 0.90" in line for line in lines)
            assert any(line.lstrip().startswith("mem host rss 1.62 GiB") for line in lines)
            # And the chart in what is left, with its legend on a line of its own.
            assert "step time (ms)  ■ data wait  ■ compute" in text

    run(scenario())


def test_the_replay_header_at_80x24_keeps_pid_step_and_the_cursor() -> None:
    async def scenario() -> None:
        label = "replay: /home/someone/.local/share/pitstop/runs/20240101-120000-train-abcd/rank0.jsonl"
        source = replay_source(run_events())
        source.label = label
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None)
            await pilot.press("home", "right", "right")
            await wait_for(pilot, lambda: "at 0:00:02/0:00:13" in screen_text(app))
            header = screen_text(app).splitlines()[:3]
            # The record's path is cut to its last parts, and cut again to fit: pid, step and cursor stay.
            assert "train.py (replay: …/20240101-120000-train" in header[0]
            assert "pid 4242" in header[1] and "step " in header[1] and "at 0:00:02/0:00:13 x1 paused" in header[1]

    run(scenario())


def test_ctrl_c_and_f10_quit_the_viewer_and_f1_opens_help() -> None:
    async def quit_with(key: str) -> PitstopApp:
        _, app = live(run_events(n_steps=5))
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.current_run()[1] is not None)
            await pilot.press("f1")
            await wait_for(pilot, lambda: isinstance(app.screen, HelpScreen))
            await pilot.press("f1")
            await wait_for(pilot, lambda: not isinstance(app.screen, HelpScreen))
            await pilot.press(key)
        return app

    for key in ("ctrl+c", "f10"):
        app = run_and_return(quit_with(key))
        assert app.return_value == "quit" and app.exit_reason == "quit"
        assert app.goodbye() is None  # no detach hint was given; training is not touched either way


def run_and_return(coro: object) -> PitstopApp:
    import asyncio

    return asyncio.run(coro)  # type: ignore[arg-type]


def test_capital_s_saves_an_svg_screenshot_and_says_where(tmp_path: Path) -> None:
    async def scenario() -> None:
        _, app = live(run_events(n_steps=20))
        app.screenshot_dir = tmp_path
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.current_run()[1] is not None)
            await pilot.press("S")
            await wait_for(pilot, lambda: any(m.startswith("screenshot saved: ") for m in notices(app)))
            saved = Path(next(m for m in notices(app) if m.startswith("screenshot saved: "))
                         .removeprefix("screenshot saved: "))
            assert saved.parent == tmp_path and saved.suffix == ".svg"
            assert "<svg" in saved.read_text()[:500]

    run(scenario())


def test_toasts_say_their_prefix_once() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push([*run_events(n_steps=5), Note(t=FIXED + 2, level="warn", source="profile",
                                                  message="profile: window skipped")])
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: "profile: window skipped" in notices(app))
            await pilot.press("p")
            await wait_for(pilot, lambda: "profile: pid 4242: ok: profile requested" in notices(app))
            assert not any(m.startswith("profile: profile:") for m in notices(app))

    run(scenario())


def test_after_the_run_ended_the_findings_say_so() -> None:
    async def scenario() -> None:
        # A healthy CPU run: no finding fires; then the script exits.
        events = run_events(cuda=False, wait_frac=0.02, n_steps=40)
        source, app = live(events)
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot, app, 39)
            await wait_for(pilot, lambda: "nothing to report so far (37 measured steps)" in screen_text(app))
            source.push([End(t=FIXED + 10, steps=40, dropped=0, reason="exit", exit_code=0)])
            source.finish()
            await wait_for(pilot, lambda: "ENDED" in screen_text(app))
            await wait_for(pilot, lambda: "nothing to report: the run ended" in screen_text(app))
            assert "so far" not in screen_text(app)

    run(scenario())


def test_f_lists_every_finding_with_its_whole_fix() -> None:
    async def scenario() -> None:
        _, app = live(run_events(cuda=False, wait_frac=0.7))
        async with app.run_test(size=(80, 24)) as pilot:
            await settled(pilot, app, 119)
            await pilot.press("f")
            await wait_for(pilot, lambda: isinstance(app.screen, FindingsScreen))
            text = screen_text(app)
            assert "[high] The DataLoader cannot keep up  (data-wait)" in text
            assert "why" in text and "fix" in text and "tune pitstop tune --knobs num_workers" in text
            await pilot.press("escape")
            await wait_for(pilot, lambda: not isinstance(app.screen, FindingsScreen))

    run(scenario())


def test_the_log_screen_after_attach_shows_the_scripts_output_from_the_session_directory(tmp_path: Path) -> None:
    # `pitstop run` wrote output.log in the session's record directory; `attach` is given no log path.
    session = tmp_path / "20240101-120000-train-abcd"
    session.mkdir()
    long_line = "x" * 150 + " END"
    (session / "output.log").write_text(f"epoch 1 loss 0.5\n\x1b[32mgreen text\x1b[0m\n{long_line}\n"
                                        "progress 10%\rprogress 50%\rprogress 100%\n")
    record = str(session / "rank0.jsonl")

    async def scenario() -> None:
        events = run_events(n_steps=10)
        events[0] = dataclasses.replace(events[0], record=record) if isinstance(events[0], Hello) else events[0]
        source, app = live(events)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("5")
            await wait_for(pilot, lambda: isinstance(app.screen, LogScreen))
            await wait_for(pilot, lambda: "epoch 1 loss 0.5" in screen_text(app))
            text = screen_text(app)
            assert "train-abcd/output.log  (4 lines)" in text  # where it came from
            assert "green text" in text and "\x1b" not in text and "[32m" not in text
            assert "progress 100%" in text and "progress 10%" not in text  # what the terminal showed
            # The long line is wrapped, not cut: its end is on the screen, and no scrollbar glyphs.
            assert "x" * 150 + "END" in re.sub(r"\s+", "", text)  # every character of it
            assert "\n  xxxxxxxx" in text  # its continuation indented
            assert "▄▄" not in text
            with (session / "output.log").open("a") as handle:
                handle.write("checkpoint saved\n")
            await wait_for(pilot, lambda: "checkpoint saved" in screen_text(app))

    run(scenario())


def test_the_data_screen_verdict_is_the_overviews_data_wait_finding() -> None:
    async def scenario() -> None:
        # 25% of every step waits for data (above the 20% threshold), over the measured steps; the last
        # 300 steps alone would not decide it differently, but the verdict must not be computed apart.
        _, app = live(run_events(cuda=False, wait_frac=0.25))
        async with app.run_test(size=(100, 30)) as pilot:
            await settled(pilot, app, 119)
            await wait_for(pilot, lambda: "The DataLoader cannot keep up" in screen_text(app))
            await pilot.press("3")
            await wait_for(pilot, lambda: isinstance(app.screen, DataScreen) and "verdict" in screen_text(app))
            text = screen_text(app)
            assert "loader-bound: The DataLoader" in text and "cannot keep up" in text
            assert "the loader keeps up" not in text

    run(scenario())


def test_the_ops_screen_at_80x24_shows_share_total_mean_and_device_time_grouped_by_phase() -> None:
    async def scenario() -> None:
        _, app = live(run_events())
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: (r := app.current_run()[1]) is not None and r.profiles)
            await pilot.press("2")
            await wait_for(pilot, lambda: isinstance(app.screen, KernelsScreen) and "aten::addmm" in screen_text(app))
            lines = screen_text(app).splitlines()
            text = "\n".join(lines)
            header = next(line for line in lines if "calls" in line)
            for title in ("name", "% step", "self", "total", "mean", "device"):
                assert title in header
            assert "step: data (main) 9% · forward 38% · backward 41% · optimizer 7%" in text
            row = next(line for line in lines if "aten::addmm" in line)
            # 52 ms of device time over 5 steps of ~100 ms: about 10% of each step.
            assert "10.4%" in row and "60.0 ms" in row and "200 µs" in row and "52.0 ms" in row
            assert "forward/loss/" in text and "optimizer" in text  # group rows
            assert all(len(line) <= 80 for line in lines) and "▄▄" not in text  # no horizontal scrollbar
            await pilot.press("g")
            await wait_for(pilot, lambda: "forward/loss/" not in screen_text(app))

    run(scenario())


def test_marked_steps_are_drawn_apart_and_do_not_set_the_scale() -> None:
    async def scenario() -> None:
        events = run_events(n_steps=60, profiles=0)
        # An eval pass of 100 steps' time at step 60: marked, in its own colour.
        evals = steps(1, start=60, t0=FIXED + 8, wall=10.0)
        events += [dataclasses.replace(evals[0], mark="eval", eval_s=9.9)]
        _, app = live(events)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: (r := app.current_run()[1]) is not None and r.last_step == 60)
            await wait_for(pilot, lambda: "■ eval" in screen_text(app))
            text = screen_text(app)
            assert "▲ 1 above the p95 scale (max 8.50 s)" in text
            assert "step time (ms)" in text  # the scale stays in ms: 100 ms steps, not a 10 s axis

    run(scenario())
