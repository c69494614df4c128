"""A slow first step says what training is doing (closures, backward calls, batches) on every front, never a bare wait."""

from __future__ import annotations

import io
import sys
import threading
from pathlib import Path
from types import FrameType, ModuleType, SimpleNamespace
from typing import Any

import pytest

from pitstop.analysis import JobState, RunState, StreamBatch, first_step_status, progress_text
from pitstop.events import Hello, Proc, Progress, Sample, Step, decode, encode
from pitstop.headless import StatusPrinter
from pitstop.profiling.agent import Agent
from pitstop.profiling.launch import SessionSettings
from pitstop.profiling.sampler import Sampler
from pitstop.tui.trialdata import TuneState, fold
from pitstop.tui.trials import progress_text as trials_progress
from pitstop.tui.view import step_bars
from pitstop.tui.widgets._bars import render_lines
from pitstop.tuning.journalformat import Totals, TrialProgress, TrialStart
from pitstop.tuning.journalformat import decode as decode_record
from pitstop.tuning.journalformat import encode as encode_record
from pitstop.tuning.report import tick_line
from pitstop.tuning.runner import StepCounter, Tick

LBFGS_STEP = Progress(batches=1, backwards=14, closures=14, optimizer_s=75.0, optimizer="LBFGS")


def hello(started: float = 100.0) -> Hello:
    return Hello(schema=1, pitstop_version="0.1.0", session="s", pid=7, ppid=0, host="h", argv=[], cwd="/",
                 started=started, python="3.11", script="train.py")


def test_the_tuners_line_says_what_a_slow_first_step_is_doing() -> None:
    tick = Tick(1, "baseline", "baseline", 0, 35, 80.0, 600.0, 300.0, progress=LBFGS_STEP)
    assert tick_line(tick, "tune: 0 trials") == (
        "  ... trial 1 baseline [baseline]: first training step not done after 1m20s (LBFGS step running for "
        "1m15s: 14 closures; 14 backward, 1 batch fetched), at most 5m00s (--first-step-timeout)  | tune: 0 trials")
    later = Tick(3, "threads=1", "threads", 0, 35, 23.0, 100.0, None, progress=Progress(0, 0, 0))
    assert tick_line(later, "") == ("  ... trial 3 threads=1 [threads]: 0/35 steps, 23s (limit 1m40s), first step: "
                                    "no batch fetched, no backward yet: still setting up  | ")
    # Once steps flow the line is the steps' (the agent stops sending progress then anyway).
    stepping = Tick(1, "baseline", "baseline", 4, 35, 90.0, 600.0, 300.0, progress=LBFGS_STEP)
    assert "4/35 steps, 1m30s (limit 10m00s)" in tick_line(stepping, "")
    # Before torch is imported the agent has said nothing: the plain wait, as before.
    waiting = Tick(1, "baseline", "baseline", 0, 35, 40.0, 600.0, 300.0)
    assert "waiting for its first training step, 40s of at most 5m00s" in tick_line(waiting, "")


def test_progress_words_each_state_of_a_first_step() -> None:
    assert progress_text(Progress(batches=3, backwards=2, closures=0)) == (
        "2 backward, 3 batches fetched, no optimizer step yet")
    assert progress_text(Progress(batches=2, backwards=0, closures=0)) == "2 batches fetched, no backward yet"
    # No DataLoader (time_sequence_prediction): no "0 batches"; past two minutes, to the second.
    assert progress_text(Progress(batches=0, backwards=15, closures=15, optimizer_s=150.4, optimizer="LBFGS")) == (
        "LBFGS step running for 2m30s: 15 closures; 15 backward")
    assert progress_text(Progress(batches=0, backwards=0, closures=0, optimizer_s=3.0)) == (
        "optimizer step running for 3 s; 0 backward")
    assert progress_text(LBFGS_STEP) == "LBFGS step running for 75 s: 14 closures; 14 backward, 1 batch fetched"
    # Gradients taken by torch.autograd.grad (torch.func, MAML): training by hand, not "still setting up".
    assert progress_text(Progress(batches=0, backwards=0, closures=0, grads=2400)) == (
        "2,400 torch.autograd.grad calls, no backward or optimizer step yet")


class LBFGS:
    """Named as the optimizer whose step runs: torch's step wrapper binds it as `self` in its frame."""

    def step_frame(self) -> FrameType:
        return sys._getframe()


def test_the_sampler_reads_the_clocks_counters_until_the_first_step_ends(tmp_path: Path) -> None:
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="t.py", profile=None))
    sampler = Sampler(agent)
    assert sampler.read().progress is None  # torch not hooked yet: nothing counted, nothing said
    # Hooked (what the sampler checks); the first step reports the model and the rank.
    agent.hooks = SimpleNamespace(report_model=lambda: None, report_rank=lambda: None)
    clock = agent.clock
    assert sampler.read_progress() == Progress(batches=0, backwards=0, closures=0)
    clock.on_fetch(None, 1.0, 0.1, 64)
    clock.on_optimizer_start("lbfgs", 1.2, LBFGS().step_frame())
    for i in range(3):
        clock.on_backward(1.3 + i, 0.5, 1.25 + i)
    progress = sampler.read().progress
    assert progress is not None
    assert (progress.batches, progress.backwards, progress.closures, progress.optimizer) == (1, 3, 3, "LBFGS")
    assert progress.optimizer_s is not None and progress.optimizer_s > 0
    clock.on_optimizer_step("lbfgs", 5.0)  # the first step ended: steps flow, progress stops
    assert clock.index == 1 and sampler.read().progress is None


def test_the_sampler_says_torch_compile_is_compiling_while_its_compiler_is_on_a_stack(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The first step of a compiled model (12.5 s for a 3-layer MLP here) read "1 batch fetched, no
    # backward yet": a wait without a reason. A thread inside a function of dynamo's convert_frame.py
    # (its real path's tail) is compiling.
    monkeypatch.setitem(sys.modules, "torch._dynamo", sys.modules.get("torch._dynamo") or ModuleType("torch._dynamo"))
    agent = Agent(SessionSettings(session="unit", record=str(tmp_path / "records"), script="t.py", profile=None))
    agent.hooks = SimpleNamespace(report_model=lambda: None, report_rank=lambda: None)
    sampler = Sampler(agent)
    inside, leave = threading.Event(), threading.Event()
    where = str(Path("site-packages", "torch", "_dynamo", "convert_frame.py"))
    scope: dict[str, Any] = {}
    exec(compile("def _compile(inside, leave):\n    inside.set()\n    leave.wait(30)\n", where, "exec"), scope)
    assert sampler.read_progress() == Progress(batches=0, backwards=0, closures=0)  # not compiling: nothing said
    # Importing the compiler's module is not compiling (lightning.fabric and keras import dynamo).
    importing, imported = threading.Event(), threading.Event()
    module = compile("importing.set()\nimported.wait(30)\n", where, "exec")
    importer = threading.Thread(target=exec, args=(module, {"importing": importing, "imported": imported}))
    importer.start()
    try:
        assert importing.wait(30)
        assert sampler.read_progress() == Progress(batches=0, backwards=0, closures=0)
    finally:
        imported.set()
        importer.join(30)
    thread = threading.Thread(target=scope["_compile"], args=(inside, leave))
    thread.start()
    try:
        assert inside.wait(30)
        first = sampler.read_progress()
        assert first is not None and first.compiling_s is not None
        later = sampler.read_progress()
        assert later is not None and later.compiling_s is not None and later.compiling_s >= first.compiling_s
    finally:
        leave.set()
        thread.join(30)
    done = sampler.read_progress()
    assert done is not None and done.compiling_s is None  # compiled: the counters alone again
    assert progress_text(Progress(batches=1, backwards=0, closures=0, compiling_s=45.2)) == (
        "torch.compile compiling for 45 s; 1 batch fetched, no backward yet")
    assert progress_text(Progress(batches=0, backwards=0, closures=0, compiling_s=130.0)) == (
        "torch.compile compiling for 2m10s; no batch fetched, no backward yet")


def test_the_trial_runner_reads_progress_from_the_record_until_a_step_is_seen(tmp_path: Path) -> None:
    record = tmp_path / "trial.jsonl"
    record.write_text(encode(hello()) + "\n" + encode(Sample(t=101.0, progress=Progress(1, 2, 2, 1.0, "LBFGS")))
                      + "\n" + encode(Sample(t=102.0, progress=LBFGS_STEP)) + "\n")
    counter = StepCounter(record)
    assert counter.read() == 0 and counter.progress == LBFGS_STEP
    with open(record, "a") as f:
        f.write(encode(Step(t=180.0, step=0, wall=79.0, data_wait=0.0)) + "\n" + encode(Sample(t=181.0)) + "\n")
    assert counter.read() == 1 and counter.progress is None


def test_the_trials_view_shows_the_progress_its_journal_carries() -> None:
    start = TrialStart(at=1000.0, index=1, label="baseline", stage="baseline", steps_planned=35, limit=600.0,
                       first_step_limit=300.0, totals=Totals(done=0, budget_left="2 of 2 trials", budget_trials=2))
    line = encode_record(TrialProgress(at=1080.0, index=1, steps_done=0, steps_planned=35, elapsed=80.0,
                                       progress=LBFGS_STEP))
    assert decode_record(line) == TrialProgress(1080.0, 1, 0, 35, 80.0, LBFGS_STEP)
    state = fold(fold(TuneState(), encode_record(start)), line)
    text = trials_progress(state, 1081.0, True).plain
    assert "no training step yet  0:01:21 (first-step limit 0:05:00)" in text
    assert "first step: LBFGS step running for 75 s: 14 closures; 14 backward, 1 batch fetched" in text


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_headless_prints_the_first_steps_progress_when_it_moves() -> None:
    out, clock = io.StringIO(), _Clock()
    printer, job = StatusPrinter(out, clock=clock), JobState()
    main = [Proc(pid=7, role="main", cpu=99.0, rss=1 << 28)]
    job.add(StreamBatch("s", [hello(), Sample(t=140.0, procs=main, progress=LBFGS_STEP)]))
    printer.tick(job)
    job.add(StreamBatch("s", [Sample(t=145.0, procs=main,
                                     progress=Progress(1, 14, 14, 80.0, "LBFGS"))]))  # no new closure
    clock.now += 5
    printer.tick(job)
    job.add(StreamBatch("s", [Sample(t=150.0, procs=main, progress=Progress(1, 17, 17, 85.0, "LBFGS"))]))
    clock.now += 5
    printer.tick(job)
    assert out.getvalue().splitlines() == [
        "pitstop | first training step not done after 40 s (LBFGS step running for 75 s: 14 closures; "
        "14 backward, 1 batch fetched) | cpu main 0.99 (cores)",
        "pitstop | first training step not done after 50 s (LBFGS step running for 85 s: 17 closures; "
        "17 backward, 1 batch fetched) | cpu main 0.99 (cores)",
    ]
    job.add(StreamBatch("s", [Step(t=160.0, step=0, wall=60.0, data_wait=0.0)]))
    assert first_step_status(job.runs["s"]) is None


def test_a_sample_with_progress_round_trips_and_an_older_sample_reads_as_none() -> None:
    sample = Sample(t=1.0, progress=LBFGS_STEP)
    assert decode(encode(sample)) == sample
    assert decode('{"kind":"sample","t":1.0}') == Sample(t=1.0)


def test_the_live_step_chart_says_what_the_first_step_is_doing_in_place_of_no_step_yet() -> None:
    run = RunState()
    run.add(hello())
    assert step_bars(run).note == "no step yet"
    run.add(Sample(t=140.0, progress=LBFGS_STEP))
    title = render_lines(step_bars(run), 80, 12)[0].plain
    assert title.splitlines() == ["step time: first training step not done after 40 s",
                                  "  (LBFGS step running for 75 s: 14 closures; 14 backward, 1 batch fetched)"]
