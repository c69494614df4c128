"""Pilot tests: the live viewer shows models trained in turn, and how a process SIGTERM ended was ended."""

from __future__ import annotations

from pathlib import Path

from conftest import FIXED, STREAM, FakeSource, hello, run, runtime, steps, wait_for

from pitstop.analysis import JobState, StreamBatch
from pitstop.events import Loss, Model
from pitstop.tui import view
from pitstop.tui.app import PitstopApp
from pitstop.tui.glance import gauge_lines
from pitstop.tui.widgets._gauges import layout


def notices(app: PitstopApp) -> list[str]:
    return [n.message for n in app._notifications]


def test_a_process_sigterm_ended_reads_terminated_by_sigterm_live(tmp_path: Path) -> None:
    record = tmp_path / "rank0.jsonl"
    # What faulthandler left as SIGTERM's default action ended the process (`profiling/_lastsignal.py`).
    (tmp_path / "rank0.jsonl.sigterm").write_text("Fatal Python error: Terminated\n\nThread 0x1 (most recent call "
                                                  "first):\n  File \"train.py\", line 9 in <module>\n")

    async def scenario() -> None:
        source = FakeSource()
        source.push([hello(record=str(record)), runtime(cuda=False), *steps(20, cuda=False)])
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(app.job.runs) == 1)
            source._queue.put(StreamBatch(STREAM, [], closed=True))  # the socket closed: no End came
            await wait_for(pilot, lambda: app.current_run()[1] is not None and app.current_run()[1].end is not None)
            items = dict(view.header_items(app.frame()))
            assert items["ended"] == "terminated by SIGTERM (exit 143)"
            assert any("was ended by SIGTERM" in n and "rank0.jsonl.sigterm" in n for n in notices(app))
            assert app.goodbye() == "training ended: terminated by SIGTERM (exit code 143)"

    run(scenario())


def test_models_trained_in_turn_have_a_line_of_their_own_live() -> None:
    events: list[object] = [hello(), runtime(cuda=False)]
    for n, s in enumerate(steps(90, cuda=False)):
        events.append(s)
        if n % 30 == 0:  # a new model and optimizer every 30 steps (a sweep's trials)
            events.append(Model(t=s.t + 0.0001, optimizers=n // 30 + 1))
    events.append(Loss(t=FIXED + 20, steps=[89], values=[0.25], nonfinite=[]))

    async def scenario() -> None:
        source = FakeSource()
        source.push(events)  # type: ignore[arg-type]
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(app.job.runs) == 1 and app.current_run()[1].total_steps == 90)
            lines = gauge_lines(app.current_run()[1])
            assert [line.label for line in lines] == ["GPU", "CPU", "mem", "models"]
            text = layout(lines, 118)[3].plain
            assert text.startswith("models 3 in turn; model 3: steps 60-89, p50 ") and "loss 0.25" in text

    run(scenario())


def test_the_header_shows_each_optimizers_loss_where_a_gan_has_two() -> None:
    job = JobState()
    run = job.add(StreamBatch(STREAM, [hello(), runtime(cuda=False), *steps(20, cuda=False),
                                       Model(t=FIXED + 5, optimizers=2),
                                       Loss(t=FIXED + 5, steps=[19], values=[1.6184]),
                                       Loss(t=FIXED + 5, steps=[18], values=[3.7884], optimizer=2)]))
    frame = view.Frame(job=job, run=run, rank_label="", now=FIXED + 30, label="dcgan.py", live=True)
    assert dict(view.header_items(frame))["loss"] == "1st 1.618 · 2nd 3.788"
