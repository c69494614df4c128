"""One figure, one definition, one text (issue 13): every front prints a value the same way and says what failed."""

from __future__ import annotations

import ast
import io
from pathlib import Path

import pytest

from pitstop.analysis import (
    JobState,
    RunState,
    StreamBatch,
    advise,
    format_summary,
    job_advice,
    rates,
    recent_rates,
    status_line,
    summarize,
)
from pitstop.analysis import _job as job_module
from pitstop.analysis import format as fmt
from pitstop.events import Event, Gpu, Hello, ProfileWindow, Runtime, Sample, Step
from pitstop.headless import LiveStatus, StatusPrinter, summary_text
from pitstop.report import _data as report_data
from pitstop.tuning.measure import measure

ROOT = Path(__file__).resolve().parents[2] / "pitstop"
# The fronts and the tuner: each reads figures through pitstop.analysis's public API only.
FRONTS = ("tui", "headless.py", "report", "compare", "tuning")


def hello(pid: int = 1, rank: int | None = None) -> Hello:
    return Hello(schema=1, pitstop_version="0.1.0", session="s", pid=pid, ppid=0, host="h",
                 argv=["train.py"], cwd="/", started=100.0, python="3.12", script="train.py", rank=rank)


def slow_run(pid: int = 1, rank: int | None = None, broken: bool = False) -> RunState:
    """12.5 s steps, 62% of them waiting for data, a GPU at 87% (and a profiler window the rules choke on)."""
    run = RunState()
    events: list[Event] = [hello(pid, rank), Runtime(t=100.0, torch_version="2", cuda_version="12.4",
                                                     device_type="cuda")]
    t = 100.0
    for i in range(20):
        t += 12.5
        events.append(Step(t=t, step=i, wall=12.5, data_wait=7.75, samples=64))
        events.append(Sample(t=t, gpus=[Gpu(index=0, name="H100", util=87.0)]))
    if broken:
        events.append(ProfileWindow(t=t, step_start=5, step_end=10, device="cuda",
                                    syncs_per_step={"aten::item": "often"}))  # type: ignore[dict-item]
    run.add_all(events)
    return run


def private_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("pitstop.analysis._"):
            out.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.module}")
        if isinstance(node, ast.ImportFrom) and node.module == "pitstop.analysis":
            out += [f"{path.relative_to(ROOT.parent)}:{node.lineno} {a.name}" for a in node.names
                    if a.name.startswith("_")]
    return out


def test_fronts_and_the_tuner_import_only_the_public_analysis_api() -> None:
    found = []
    for front in FRONTS:
        base = ROOT / front
        for path in sorted(base.rglob("*.py") if base.is_dir() else [base]):
            found += private_imports(path)
    assert found == []


def test_a_share_and_a_reading_in_percent_read_the_same() -> None:
    assert fmt.pct(0.62) == "62%" and fmt.percent(62.0) == "62%"
    assert fmt.pct(None, "no step") == "n/a (no step)"
    assert fmt.duration(12.5) == "12.5 s" and fmt.duration(0.031) == "31.0 ms"
    assert fmt.change(0.12) == "+12%" and fmt.change(-0.004) == "-0.4%"
    assert fmt.span(45) == "45 s" and fmt.span(780) == "13 min"


def test_a_step_time_reads_the_same_in_the_summary_the_status_line_and_the_report() -> None:
    run = slow_run()
    s = summarize(run)
    summary = format_summary(s, advise(run).findings)
    assert "p50 12.5 s" in summary and "12500.0 ms" not in summary
    assert "data wait   62% of step time" in summary and "util 87%" in summary
    line = status_line(run)
    assert "step 12.5 s (p50 last 17)" in line and "data 62%" in line and "gpu 87%" in line
    rows = dict(report_data.overview(report_data.ReportData(
        path="r", generated=0.0, runs=[run], primary=run, series=None, summary=s,  # type: ignore[arg-type]
        found=[], job=None)))
    assert rows["step time"].startswith("p50 12.5 s") and rows["data wait"].startswith("62%")
    assert rows["gpu"].startswith("util 87%")


def test_the_status_line_the_header_the_summary_and_the_tuner_share_one_throughput() -> None:
    run = slow_run()
    pace = recent_rates(run)
    assert pace.samples_per_s == pytest.approx(64 / 12.5) and pace.unit == "samples/s"
    assert fmt.rate(pace.value, pace.counted) in status_line(run)
    assert summarize(run).samples_per_s == pytest.approx(rates(run.measured_steps()).samples_per_s)
    events = [e for e in run.steps]
    m = measure(events, warmup=3, windows=1)
    assert (m.unit, m.throughput) == (pace.unit, pytest.approx(summarize(run).samples_per_s))


def test_steps_that_fetched_no_batch_have_no_samples_per_second_not_zero() -> None:
    # pytorch/examples' mnist_forward_forward: one batch fetched, then 100 steps on it (each counts 0).
    run = RunState()
    run.add_all([hello(), *(Step(t=100.0 + i, step=i, wall=1.0, data_wait=0.0, samples=1000 if i == 0 else 0)
                            for i in range(20))])
    pace = summarize(run)
    assert pace.samples_per_s is None and pace.steps_per_s == pytest.approx(1.0)
    text = summary_text([run])
    assert "0.00 samples/s" not in text and "1.00 steps/s" in text, text


def test_a_rule_that_raises_is_said_in_the_headless_summary() -> None:
    text = summary_text([slow_run(broken=True)])
    assert "advice rule host-sync failed: TypeError: must be real number, not str" in text
    assert "data-wait" in text  # the other rules still ran


def test_a_job_summary_that_fails_is_said_and_each_rank_still_summarized(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(job: JobState, warmup: int = 3) -> object:
        raise KeyError("rank")

    import pitstop.headless as headless

    monkeypatch.setattr(job_module, "job_summary", broken)
    monkeypatch.setattr(headless, "job_summary", broken)
    job = JobState.of_runs([slow_run(1, 0), slow_run(2, 1)])
    assert [f.text for f in job_advice(job).failures] == [
        "advice rule rank-gone failed: KeyError: 'rank'", "advice rule straggler failed: KeyError: 'rank'"]
    text = summary_text([slow_run(1, 0), slow_run(2, 1)])
    assert "pitstop: job summary failed: KeyError: 'rank'" in text
    assert text.count("pitstop summary: train.py rank") == 2


def test_a_broken_stream_is_said_once_on_stderr() -> None:
    out = io.StringIO()
    printer = StatusPrinter(out)
    job = JobState()
    job.add(StreamBatch("s1", [hello(7, 1)]))
    broken = StreamBatch("s1", [], closed=True, error="ConnectionResetError: reset")
    for _ in range(3):
        job.add(broken)
        printer.notes(broken, job)
    assert out.getvalue() == "pitstop: stream from rank 1 ended: ConnectionResetError: reset\n"


class _BrokenSource:
    def batches(self) -> list[StreamBatch]:
        raise OSError("socket gone")

    def close(self) -> None:
        pass


def test_headless_status_lines_stop_saying_why_once() -> None:
    out = io.StringIO()
    status = LiveStatus("session", "train.py", proc=None, out=out)  # type: ignore[arg-type]
    status.job.add(StreamBatch("s1", [hello(), Step(t=101.0, step=0, wall=1.0, data_wait=0.0)]))
    status._source = _BrokenSource()  # type: ignore[assignment]
    status._follow()
    status.tick()
    status.tick()
    assert out.getvalue() == "pitstop: status lines stopped: OSError: socket gone\n"
