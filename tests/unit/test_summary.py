"""Tests of the statistics helpers, summarize, format_summary and status_line."""

from __future__ import annotations

import io
import math
from dataclasses import replace

import pytest

from pitstop.analysis import (
    Finding,
    JobState,
    RunState,
    StreamBatch,
    format_summary,
    median_and_spread,
    percentile,
    status_line,
    summarize,
)
from pitstop.analysis import _state
from pitstop.headless import StatusPrinter
from pitstop.events import Applied, DataLoaderInfo, End, Gpu, Hello, Loss, Model, Note, Proc, Runtime, Sample, Step


def hello(started: float = 100.0) -> Hello:
    return Hello(schema=1, pitstop_version="0.1.0", session="s", pid=1, ppid=0, host="h",
                 argv=[], cwd="/", started=started, python="3.12")


def cpu_runtime() -> Runtime:
    return Runtime(t=100.0, torch_version="2.13", cuda_version=None, device_type="cpu")


def fill(run: RunState, n: int, wall: float, wait: float, samples: int | None = 32, t0: float = 100.0,
         **kw: int) -> None:
    t = t0
    for i in range(n):
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=wait, samples=samples, **kw))


# -- percentile / spread ------------------------------------------------------
def test_percentile_interpolates_linearly_between_ranks() -> None:
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 95) == pytest.approx(3.85)  # (n-1)*0.95 = 2.85
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    assert percentile([7.0], 95) == 7.0
    assert percentile((x for x in [10, 20]), 25) == 12.5  # any iterable


@pytest.mark.parametrize("values,q", [([], 50), ([1.0], -1), ([1.0], 100.5), ([1.0], float("nan"))])
def test_percentile_refuses_nothing_and_bad_q(values: list[float], q: float) -> None:
    with pytest.raises(ValueError):
        percentile(values, q)


def test_median_and_spread_uses_iqr() -> None:
    med, iqr, rel = median_and_spread([5, 1, 4, 2, 3])
    assert (med, iqr) == (3.0, 2.0) and rel == pytest.approx(2 / 3)
    assert median_and_spread([2.0, 2.0, 2.0]) == (2.0, 0.0, 0.0)
    assert median_and_spread([0.0, 0.0, 0.0]) == (0.0, 0.0, 0.0)
    assert math.isinf(median_and_spread([-1.0, 0.0, 1.0])[2])
    with pytest.raises(ValueError):
        median_and_spread([])


# -- summarize ----------------------------------------------------------------
def test_summarize_drops_warmup_and_derives_rates() -> None:
    run = RunState()
    run.add(hello())
    run.add(cpu_runtime())
    run.add(Step(t=101.0, step=0, wall=1.0, data_wait=0.9, samples=32))  # slow warm-up step
    fill(run, 10, wall=0.04, wait=0.01, t0=101.0)  # steps 0..9 again: indices restart
    s = summarize(run, warmup=1)
    # Step index 0 appears twice (both warm-up); steps 1..9 are measured.
    assert s.steps == 11 and s.measured_steps == 9
    assert s.measured_s == pytest.approx(0.36)
    assert s.samples_per_s == pytest.approx(32 / 0.04)
    assert s.steps_per_s == pytest.approx(25.0)
    assert s.step_p50_s == pytest.approx(0.04) and s.compute_p50_s == pytest.approx(0.03)
    assert s.data_wait_frac == pytest.approx(0.25)
    assert s.elapsed_s == pytest.approx(101.4 - 100.0)
    assert s.peak_mem_allocated is None and s.mem_unavailable == "not on CUDA: device cpu"


def test_summarize_uses_whole_stream_totals_after_the_deque_dropped_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_state, "MAX_STEPS", 5)
    run = RunState()
    run.add(Step(t=1.0, step=0, wall=5.0, data_wait=4.0, samples=8))
    fill(run, 20, wall=0.5, wait=0.1, samples=8, t0=1.0)
    s = summarize(run, warmup=1)
    assert s.steps == 21 and s.measured_steps == 19  # both step-0 events are warm-up
    assert s.measured_s == pytest.approx(19 * 0.5)
    assert s.data_wait_frac == pytest.approx(0.2)
    assert s.samples_per_s == pytest.approx(16.0)


def test_samples_per_s_is_none_when_a_batch_size_is_unknown() -> None:
    run = RunState()
    fill(run, 10, wall=0.1, wait=0.0)
    run.add(Step(t=200.0, step=10, wall=0.1, data_wait=0.0, samples=None))
    s = summarize(run)
    assert s.samples_per_s is None and s.steps_per_s == pytest.approx(10.0)


def test_a_process_that_never_stepped_points_at_its_notes_only_when_it_has_some() -> None:
    from pitstop.recorded._trained import annotate

    run = RunState()
    text = "steps       0\nfindings: none (nothing in this run crossed a threshold)"
    bare = annotate(text, run, [run])
    assert "(no optimizer step, backward call or pitstop.step())" in bare and "see the notes" not in bare
    run.add(Note(t=1.0, level="warn", source="blind", message="no training step seen in this process"))
    assert "see the notes" in annotate(text, run, [run])


def test_summarize_empty_run_has_no_figures_and_says_why() -> None:
    s = summarize(RunState())
    assert s.steps == 0 and s.measured_steps == 0
    assert s.samples_per_s is None and s.step_p50_s is None and s.data_wait_frac is None
    assert s.elapsed_s is None and s.gpu_util_mean is None
    assert s.gpu_unavailable == "no GPU sample yet" and s.mem_unavailable == "device not known yet"
    text = format_summary(s, [])
    assert "n/a (no measured step yet)" in text and "findings: none" in text


def test_summarize_gpu_and_cpu_means_and_end() -> None:
    run = RunState()
    run.add(Runtime(t=1.0, torch_version="2", cuda_version="12.4", device_type="cuda"))
    for util, power in ((50.0, 100.0), (70.0, 300.0)):
        run.add(Sample(t=2.0, gpus=[Gpu(index=0, name="H100", util=util, mem_used=4 << 30,
                                        mem_total=80 << 30, power_w=power)],
                       procs=[Proc(pid=1, role="main", cpu=95.0, rss=2 << 30),
                              Proc(pid=2, role="worker", cpu=50.0, rss=1 << 20)],
                       system_cpu=40.0))
    run.add(Loss(t=3.0, steps=[0, 1], values=[1.0, None], nonfinite=[1]))
    run.add(End(t=4.0, steps=0, dropped=2, reason="exit", exit_code=0))
    s = summarize(run)
    assert s.gpu_util_mean == 60.0 and s.gpu_power_mean == 200.0 and s.gpu_unavailable is None
    assert s.gpu_mem_peak == 4 << 30 and s.cpu.main == 0.95 and [g.cores for g in s.cpu.loaders] == [0.5]
    assert s.workers == 1 and s.cpu.machine_pct == 40.0 and s.peak_rss == 2 << 30
    assert s.last_loss == 1.0 and s.nonfinite_losses == 1 and s.first_nonfinite_step == 1
    assert (s.end_reason, s.exit_code, s.dropped) == ("exit", 0, 2)
    text = format_summary(s, [], title="train.py")
    assert text.startswith("train.py")
    assert "util 60%" in text and "4 GiB of 80 GiB" in text and "power 200 W" in text
    assert "1 non-finite (first at step 1)" in text and "exited (exit code 0), 2 events dropped" in text


def test_gpu_reason_comes_from_the_sampler() -> None:
    run = RunState()
    run.add(Sample(t=1.0, gpu_unavailable="NVML library not found"))
    assert summarize(run).gpu_unavailable == "NVML library not found"
    run2 = RunState()
    run2.add(Sample(t=1.0, gpus=[Gpu(index=0, name="X", unavailable={"util": "not supported (MIG)"})]))
    assert summarize(run2).gpu_unavailable == "not supported (MIG)"


def test_format_summary_prints_unavailable_as_na_with_reason_never_zero() -> None:
    run = RunState()
    run.add(cpu_runtime())
    fill(run, 10, wall=0.02, wait=0.0, samples=None)
    run.add(Sample(t=200.0, gpu_unavailable="no CUDA device"))
    text = format_summary(summarize(run), [])
    assert "n/a (no CUDA device)" in text
    assert "n/a (batch size not seen)" in text
    assert "n/a (not on CUDA: device cpu)" in text
    assert " 0 samples/s" not in text and "util 0%" not in text


def test_format_summary_lists_top_findings_with_evidence_gain_and_fix() -> None:
    found = [
        Finding(rule=f"r{i}", title=f"Title {i}", severity="high", evidence=[f"evidence {i}", "more"],
                cause="c", fix=f"line one {i}\nline two {i}", gain=f"gain {i}", knob=None)
        for i in range(7)
    ]
    run = RunState()
    fill(run, 10, wall=0.02, wait=0.0)
    text = format_summary(summarize(run), found, max_findings=2)
    assert "findings (7, top 2 shown):" in text
    assert "1. [high] Title 0 (r0)" in text and "evidence 0" in text and "gain 0" in text
    assert "fix:  line one 0" in text and "           line two 0" in text
    assert "Title 2" not in text and "more" not in text


# -- status_line --------------------------------------------------------------
def test_status_line_reports_the_last_window() -> None:
    run = RunState()
    assert status_line(run) == "waiting for the first step"
    fill(run, 80, wall=0.031, wait=0.0, samples=8)
    run.add(Runtime(t=100.0, torch_version="2.13", cuda_version="12", device_type="cuda", cpu_count=8))
    t = 200.0
    for i in range(80, 130):
        t += 0.031
        run.add(Step(t=t, step=i, wall=0.031, data_wait=0.0192, samples=16, mem_allocated=int(1.2 * (1 << 30))))
    run.add(Sample(t=t, gpus=[Gpu(index=0, name="A100", util=87.0)], procs=[Proc(pid=1, role="main", cpu=98.0, rss=1)],
                   system_cpu=25.0))
    run.add(Loss(t=t, steps=[129], values=[0.5]))
    line = status_line(run)
    assert line == (
        "step 129 | 516 samples/s | step 31.0 ms (p50 last 50) | data 62% | mem 1.2 GiB"
        " | gpu 87% | cpu main 0.98, machine 2.00 of 8 (cores) | loss 0.5"
    )


def test_status_line_without_batch_sizes_or_samples_says_na() -> None:
    run = RunState()
    fill(run, 5, wall=0.5, wait=0.0, samples=None, host_rss=3 << 20)
    run.add(Loss(t=1.0, steps=[4], values=[None], nonfinite=[4]))
    line = status_line(run)
    assert line.startswith("step 4 | 2.00 steps/s | step 500.0 ms (p50 last 2) | data 0% | rss 3 MiB")
    assert "gpu n/a | cpu n/a | loss NaN/inf x1" in line


def test_status_line_reads_gpu_and_cpu_from_recent_samples_only() -> None:
    run = RunState()
    fill(run, 5, wall=0.1, wait=0.0)
    run.add(Sample(t=1.0, gpus=[Gpu(index=0, name="A", util=70.0)]))
    run.add(Sample(t=1.5, procs=[Proc(pid=1, role="main", cpu=50.0, rss=1)]))
    assert "| gpu 70% | cpu main 0.50 (cores)" in status_line(run)
    for i in range(5):  # five newer samples without readings: the old ones are stale
        run.add(Sample(t=2.0 + i))
    assert "| gpu n/a | cpu n/a" in status_line(run)


def test_status_line_rates_leave_out_the_warm_up_as_the_summary_does() -> None:
    # Issue 10: a 20 s first step (imports, model build) made the line say 0.58 steps/s
    # beside a 448 ms median, where the summary said 1.92.
    run = RunState()
    run.add(Step(t=120.0, step=0, wall=20.0, data_wait=0.0, samples=None))
    t = 120.0
    for i in range(1, 27):
        t += 0.448
        run.add(Step(t=t, step=i, wall=0.448, data_wait=0.0, samples=None))
    line = status_line(run)
    summary = summarize(run)
    assert f"{summary.steps_per_s:.2f} steps/s" in line
    assert line.startswith("step 26 | 2.23 steps/s | step 448.0 ms (p50 last 24)")


def test_status_line_during_the_warm_up_says_so_instead_of_a_rate() -> None:
    run = RunState()
    run.add(Step(t=120.0, step=0, wall=20.0, data_wait=0.0, samples=32))
    assert status_line(run).startswith("step 0 | warming up (the first 3 steps are not measured) | gpu n/a")


def _two_loader_run() -> RunState:
    run = RunState()
    run.add(Runtime(t=100.0, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=2))
    run.add(DataLoaderInfo(t=100.0, id=1, num_workers=2, batch_size=64, pin_memory=False,
                           persistent_workers=False, prefetch_factor=2, dataset="TrainSet"))
    run.add(DataLoaderInfo(t=100.5, id=2, num_workers=2, batch_size=100, pin_memory=False,
                           persistent_workers=False, prefetch_factor=2, dataset="ValSet"))
    fill(run, 10, wall=0.1, wait=0.0, loader=1)
    for _ in range(2):
        run.add(Sample(t=101.0, procs=[Proc(pid=1, role="main", cpu=93.0, rss=1),
                                       Proc(pid=2, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=3, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=4, role="worker", cpu=10.0, rss=1, loader=2),
                                       Proc(pid=5, role="worker", cpu=10.0, rss=1, loader=2)],
                       system_cpu=79.0))
    return run


def test_the_cpu_line_is_in_cores_and_keeps_each_loaders_workers_apart() -> None:
    # Issue 10: "main 93%" (of one core) beside "system 79%" (of the machine), and
    # the train and eval loaders' workers summed into one "4 workers" figure.
    run = _two_loader_run()
    text = format_summary(summarize(run), [])
    cpu_row = next(line for line in text.splitlines() if line.strip().startswith("cpu"))
    assert cpu_row == ("  cpu         main 0.93 cores, train workers 1.60 cores (2), "
                       "eval loader 2 (ValSet) workers 0.20 cores (2), machine 1.58 of 2 cores")
    assert "cpu main 0.93, train workers 1.60, eval loader 2 (ValSet) workers 0.20, machine 1.58 of 2 (cores)" in (
        status_line(run))


def test_the_end_row_says_how_the_process_really_ended() -> None:
    run = RunState()
    fill(run, 5, wall=0.1, wait=0.0)
    # A `k` in the viewer: the agent noted the stop; the script caught the SIGINT and exited 1.
    run.add(Note(t=101.0, level="info", source="stop", message="stop requested by a viewer: SIGINT sent"))
    run.add(End(t=101.0, steps=5, dropped=0, reason="exit", exit_code=1))
    text = format_summary(summarize(run), [])
    assert "  end         stopped from a viewer (k), then exited (exit code 1), 0 events dropped" in text
    # A bare `raise SystemExit(3)` is not seen from inside (the record says 0); the front's code wins.
    clean = RunState()
    fill(clean, 5, wall=0.1, wait=0.0)
    clean.add(End(t=101.0, steps=5, dropped=0, reason="exit", exit_code=0))
    assert "  end         exited (exit code 3), 0 events dropped" in format_summary(summarize(clean), [], exit_code=3)
    killed = RunState()
    fill(killed, 5, wall=0.1, wait=0.0)
    assert "killed before it could record its end (exit code 137 (SIGKILL))" in format_summary(
        summarize(killed), [], exit_code=137)
    assert "  end         still running (or the stream was cut)" in format_summary(summarize(killed), [])


def test_the_summary_says_what_a_config_applied_and_skipped_and_the_agents_warnings() -> None:
    run = RunState()
    run.add(Applied(t=100.0, applied={"amp": "bf16"}, skipped={"channels_last": "no Conv2d module"}))
    run.add(DataLoaderInfo(t=100.0, id=1, num_workers=4, batch_size=64, pin_memory=False, persistent_workers=False,
                           prefetch_factor=2, overrides={"num_workers": 4},
                           skipped={"batch_size": "a custom batch_sampler"}))
    fill(run, 5, wall=0.1, wait=0.0, loader=1)
    run.add(Note(t=101.0, level="warn", source="prometheus",
                 message="metrics endpoint off: cannot serve metrics on 0.0.0.0:9400: Address already in use"))
    run.add(Note(t=101.0, level="info", source="profiler", message="window 1 done"))
    text = format_summary(summarize(run), [])
    assert "  config      applied amp=bf16 (process-wide); num_workers=4 (train loader 1)" in text
    assert "  skipped     channels_last: no Conv2d module" in text
    assert "              batch_size (train loader 1): a custom batch_sampler" in text
    assert ("  notes       warning (prometheus): metrics endpoint off: cannot serve metrics on 0.0.0.0:9400: "
            "Address already in use") in text
    assert "window 1 done" not in text


# -- the headless printer ---------------------------------------------------------
class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_status_lines_come_on_change_and_a_quiet_run_is_said_once_a_minute() -> None:
    # Issue 10: 52 lines for 27 steps, "waiting for the first step" 10 times.
    out, clock, job = io.StringIO(), _Clock(), JobState()
    printer = StatusPrinter(out, clock=clock)
    job.add(StreamBatch("s", [hello()]))
    for _ in range(14):  # 14 ticks of 5 s before the first step
        clock.now += 5
        printer.tick(job)
    job.add(StreamBatch("s", [Step(t=101.0, step=0, wall=1.0, data_wait=0.0)]))
    for _ in range(3):
        clock.now += 5
        printer.tick(job)
    job.add(StreamBatch("s", [Step(t=102.0, step=1, wall=1.0, data_wait=0.0)]))
    clock.now += 5
    printer.tick(job)
    for _ in range(12):  # a minute without a step
        clock.now += 5
        printer.tick(job)
    lines = out.getvalue().splitlines()
    assert lines[0] == "pitstop | waiting for the first step"
    assert lines[1] == "pitstop | waiting for the first step | unchanged for 60 s"
    assert [line.split(" | ")[1] for line in lines[2:4]] == ["step 0", "step 1"]
    assert lines[4].startswith("pitstop | step 1") and lines[4].endswith("| unchanged for 60 s")
    assert len(lines) == 5


def test_a_parent_whose_children_train_says_so_and_processes_without_a_rank_go_by_pid() -> None:
    # pytorch/examples' mnist_hogwild: "r0 first training step not done ... still setting up" for the
    # parent that waits for its two trainers, and r1, r2 for processes that are no job's ranks.
    out, clock, job = io.StringIO(), _Clock(), JobState()
    printer = StatusPrinter(out, clock=clock)
    parent = Hello(schema=2, pitstop_version="0.1.0", session="s", pid=10, ppid=1, host="h", argv=["main.py"],
                   cwd="/", started=100.0, python="3.11", script="main.py")
    job.add(StreamBatch("p", [parent]))
    for pid in (11, 12):
        job.add(StreamBatch(f"c{pid}", [replace(parent, pid=pid, ppid=10, parent_pid=10),
                                       Step(t=101.0, step=0, wall=1.0, data_wait=0.0)]))
    printer.tick(job)
    line = out.getvalue()
    assert line.startswith("pitstop | pid 10 trains in 2 child processes (11, 12) || pid 11 step 0"), line
    assert "setting up" not in line and "r1" not in line


def test_the_agents_warnings_are_said_at_once_and_its_info_notes_are_not() -> None:
    out, job = io.StringIO(), JobState()
    printer = StatusPrinter(out, clock=_Clock())
    batch = StreamBatch("s", [hello(), Note(t=1.0, level="info", source="profiler", message="window done"),
                              Note(t=1.0, level="warn", source="prometheus",
                                   message="metrics endpoint off: cannot serve metrics on 0.0.0.0:9400: "
                                           "Address already in use")])
    job.add(batch)
    printer.notes(batch, job)
    assert out.getvalue() == ("pitstop: warning (prometheus): metrics endpoint off: cannot serve metrics on "
                              "0.0.0.0:9400: Address already in use\n")


# -- the TUI's CPU rows (pitstop/tui/view.py) ---------------------------------------
def test_the_tui_cpu_rows_are_in_cores_per_loader() -> None:
    from pitstop.tui.view import cpu_rows

    rows = [(r.label, r.value) for r in cpu_rows(_two_loader_run())]
    assert rows == [("main", "0.93 cores"), ("train workers", "1.60 cores (2)"),
                    ("loader 2 workers", "0.20 cores (2)"), ("machine", "1.58/2 cores")]


def test_the_tui_does_not_say_num_workers_0_when_the_workers_of_a_2_worker_run_have_exited() -> None:
    from pitstop.tui.view import cpu_rows

    run = _two_loader_run()
    run.add(Sample(t=110.0, procs=[Proc(pid=1, role="main", cpu=5.0, rss=1)], system_cpu=10.0))  # the end of the run
    assert ("workers", "none running now (num_workers=2)") in [(r.label, r.value) for r in cpu_rows(run)]
    solo = RunState()
    solo.add(DataLoaderInfo(t=100.0, id=1, num_workers=0, batch_size=8, pin_memory=False, persistent_workers=False,
                            prefetch_factor=None))
    solo.add(Sample(t=101.0, procs=[Proc(pid=1, role="main", cpu=99.0, rss=1)]))
    assert ("workers", "none (num_workers=0: batches load in the main process)") in [
        (r.label, r.value) for r in cpu_rows(solo)]


@pytest.mark.parametrize("source, said", [("backward", "counted at each backward call"),
                                          ("manual", "marked by the script"), ("optimizer", None)])
def test_the_summary_says_how_steps_were_counted_where_no_torch_optimizer_did(source: str, said: str | None) -> None:
    # Keras's own optimizer with gradient_accumulation_steps=2 applied 37 updates; pitstop counted 75 backward calls.
    run = RunState()
    run.add_all([hello(), *(Step(t=101.0 + i, step=i, wall=1.0, data_wait=0.0, source=source) for i in range(8))])
    text = format_summary(summarize(run), [])
    if said is None:
        assert "counted at" not in text and "marked by" not in text
    else:
        assert said in text.splitlines()[3], text


def test_a_skip_repeated_on_each_eval_loader_is_one_line_naming_them() -> None:
    # HF Trainer builds an eval DataLoader at each evaluation: eleven "skipped batch_size (eval loader N)" lines.
    run = RunState()
    why = "an evaluation DataLoader (built in get_eval_dataloader()): [dataloader] sets the training one"
    run.add_all([hello(), *(DataLoaderInfo(t=100.0 + i, id=i, num_workers=0, batch_size=32, pin_memory=False,
                                           persistent_workers=False, prefetch_factor=None,
                                           skipped={"batch_size": why}) for i in range(1, 7))])
    skipped = summarize(run).skipped
    assert len(skipped) == 1 and skipped[0].startswith("batch_size (") and skipped[0].endswith(why), skipped
    assert "and 3 more" in skipped[0]


def _evaluating_run(n: int, max_steps: int | None = None) -> RunState:
    """pytorch/examples' GCN: an evaluation after every optimizer step, so every step but the first is marked eval."""
    run = RunState(max_steps=max_steps)
    run.add(hello())
    t = 100.0
    for i in range(n):
        evaluating = i > 0
        wall = 0.012 if evaluating else 0.5
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=2000, mark="eval" if evaluating else None,
                     eval_s=0.004 if evaluating else 0.0, forward_s=0.003, backward_s=0.003, optimizer_s=0.001,
                     other_s=0.005 if evaluating else 0.493))
    return run


@pytest.mark.parametrize("max_steps", [None, 50])  # the window, and the totals once the window dropped steps
def test_a_loop_that_evaluates_after_every_step_is_measured_by_each_steps_training_part(
        max_steps: int | None) -> None:
    run = _evaluating_run(300, max_steps)
    s = summarize(run)
    assert s.measured_steps == 297 and s.evaluates_each_step
    assert s.steps_per_s == pytest.approx(1 / 0.008) and s.samples_per_s == pytest.approx(2000 / 0.008)
    assert s.step_p50_s == pytest.approx(0.008)
    text = format_summary(s, [])
    assert "throughput n/a" not in text and "299 steps evaluate (most): each measured without its evaluation" in text
    assert "kept out of training figures" not in text
    line = status_line(run)
    assert "warming up" not in line and "step 8.0 ms" in line, line


def test_a_few_evaluating_steps_stay_out_of_the_step_times() -> None:
    run = RunState()
    run.add(hello())
    fill(run, 40, wall=0.01, wait=0.0)
    run.add(Step(t=200.0, step=40, wall=3.0, data_wait=0.0, samples=32, mark="eval", eval_s=2.99))
    s = summarize(run)
    assert not s.evaluates_each_step and s.measured_steps == 37 and s.step_p95_s == pytest.approx(0.01)
    assert "kept out of training figures: 1 with evaluation" in format_summary(s, [])


def test_a_long_warm_up_is_said_with_its_time_and_a_usual_one_is_not() -> None:
    run = RunState()
    run.add(hello())
    run.add(Step(t=130.0, step=0, wall=30.0, data_wait=0.0, samples=32))  # torch.compile's first step
    for i in range(1, 41):
        run.add(Step(t=130.0 + i * 0.01, step=i, wall=0.01, data_wait=0.0, samples=32))
    s = summarize(run)
    assert s.long_warmup_s == pytest.approx(30.02)
    assert "(38 measured, first 3 dropped as warm-up: 30.0 s)" in format_summary(s, [])
    usual = RunState()
    usual.add(hello())
    fill(usual, 40, wall=0.5, wait=0.0)
    assert summarize(usual).long_warmup_s is None
    assert "(37 measured, first 3 dropped as warm-up)" in format_summary(summarize(usual), [])


def test_the_eval_row_counts_every_pass_and_an_older_record_one_a_step() -> None:
    older = RunState()
    older.add(hello())
    fill(older, 40, wall=0.01, wait=0.0)
    for k in (40, 41):  # a record made before steps counted their passes: one a step, and one after the last
        older.add(Step(t=200.0 + k, step=k, wall=1.0, data_wait=0.0, samples=32, mark="eval", eval_s=0.5))
    older.add(End(t=300.0, steps=42, dropped=0, eval_s=0.5))
    assert "eval        3 passes, 1.5 s" in format_summary(summarize(older), [])
    run = RunState()
    run.add(hello())
    fill(run, 40, wall=0.01, wait=0.0)
    for k in (40, 41):  # ignite: the evaluator over the training loader, then the validation loader
        run.add(Step(t=200.0 + k, step=k, wall=1.0, data_wait=0.0, samples=32, mark="eval", eval_s=0.5, passes=2))
    run.add(End(t=300.0, steps=42, dropped=0, eval_s=0.5, eval_passes=2))
    assert "eval        6 passes, 1.5 s" in format_summary(summarize(run), [])


def test_rollouts_have_their_own_row_and_no_eval_row() -> None:
    run = RunState()
    run.add(hello())
    fill(run, 40, wall=0.01, wait=0.0)
    run.add(Step(t=200.0, step=40, wall=1.0, data_wait=0.0, mark="rollout", eval_s=0.9, passes=1))
    text = format_summary(summarize(run), [])
    assert "rollouts    1, 0.9 s" in text and "\n  eval " not in text, text
    assert "kept out of training figures: 1 with rollouts" in text


def test_a_gans_loss_says_whose_it_is() -> None:
    run = RunState()
    run.add(hello())
    fill(run, 10, wall=0.01, wait=0.0)
    run.add(Loss(t=200.0, steps=[9], values=[0.2084]))
    assert "last 0.2084\n" in format_summary(summarize(run), []) + "\n"
    run.add(Model(t=200.0, optimizers=2))
    assert "last 0.2084 (the first optimizer to step, of 2: its backward calls' losses summed" \
        in format_summary(summarize(run), [])
