"""The report and the text charts of a job: the job's headline first, and each rank drawn, so a data straggler shows."""

from __future__ import annotations

import re
from pathlib import Path

from pitstop.analysis import RunState
from pitstop.charts import job_plot, run_charts
from pitstop.events import SCHEMA_VERSION, DataLoaderInfo, End, Event, Hello, Runtime, Step, encode
from pitstop.report import write_report

T0 = 1_700_000_000.0
STEP_S = 0.035


def _rank(rank: int, world: int, wait_frac: float, steps: int = 120) -> list[Event]:
    """One DDP rank: every rank's step takes the same time (the all-reduce evens them), its data wait is its own."""
    out: list[Event] = [
        Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="job", pid=100 + rank, ppid=1, host="h",
              argv=["python", "train.py"], cwd="/", started=T0, python="3.11", rank=rank, world_size=world,
              script="train.py", record=f"/r/rank{rank}.jsonl"),
        Runtime(t=T0 + 0.1, torch_version="2.13.0", cuda_version=None, device_type="cpu", cpu_count=2, usable_cpus=2),
        DataLoaderInfo(t=T0 + 0.2, id=0, num_workers=1, batch_size=8, pin_memory=False,
                       persistent_workers=False, prefetch_factor=2),
    ]
    t = T0 + 1.0
    for i in range(steps):
        wall = STEP_S * (1.0 + 0.02 * (i % 3))
        t += wall
        out.append(Step(t=t, step=i, wall=wall, data_wait=wall * wait_frac, samples=8, host_rss=(300 << 20) + i,
                        loader=0))
    out.append(End(t=t + 0.1, steps=steps, dropped=0, exit_code=0))
    return out


def _job(tmp_path: Path, waits: list[float]) -> Path:
    """A record directory of a job whose rank r waits `waits[r]` of its step for data."""
    records = tmp_path / "job"
    records.mkdir()
    for rank, wait in enumerate(waits):
        lines = [encode(e) for e in _rank(rank, len(waits), wait)]
        (records / f"rank{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return records


def _runs(waits: list[float]) -> list[RunState]:
    runs = []
    for rank, wait in enumerate(waits):
        run = RunState()
        for event in _rank(rank, len(waits), wait):
            run.add(event)
        runs.append(run)
    return runs


def test_the_report_of_a_job_leads_with_the_job_and_names_the_data_straggler(tmp_path: Path) -> None:
    text = write_report(_job(tmp_path, [0.05, 0.85]), tmp_path / "job.md").read_text()
    head, rest = text.split("### Summary of rank 0", 1)
    assert head.startswith("## pitstop report: `train.py`, a job of 2 ranks")
    assert "| ranks | 2 seen of world size 2 (2 finished) |" in head
    assert re.search(r"\| job throughput \| \d+ samples/s \(sum over ranks\)", head)
    assert re.search(r"\| straggler \| rank 1: .*data wait per step.*extra time is data wait.*the job waits \d+%", head)
    assert re.search(r"\| data wait \| rank 0 5% of its step \(p50 [\d.]+ ms\), rank 1 85% of its step", head)
    # the charts draw each rank's data wait on one scale: rank 1's line is high, rank 0's low
    block = rest.split("Over the run, per rank", 1)[1].split("```")[1]
    waits = block.split("data wait", 1)[1].split("samples/s", 1)[0]
    sparks = dict(re.findall(r"(rank \d)\s+([▁▂▃▄▅▆▇█]+)  max", waits))
    assert set(sparks) == {"rank 0", "rank 1"}
    assert set(sparks["rank 1"]) == {"█"} and set(sparks["rank 0"]) == {"▁"}
    assert "rank 1: The DataLoader cannot keep up" in rest  # rank 1's own finding, with its fix


def test_the_html_report_of_a_job_draws_a_line_per_rank(tmp_path: Path) -> None:
    text = write_report(_job(tmp_path, [0.05, 0.85]), tmp_path / "job.html").read_text()
    assert text.index("<h2>Job</h2>") < text.index("<h2>Summary of rank 0</h2>") < text.index("<h2>Charts</h2>")
    wait = next(svg for svg in re.findall(r"<svg.*?</svg>", text, re.S) if "Data wait per rank" in svg)
    assert wait.count("<polyline") == 2 and ">rank 0</text>" in wait and ">rank 1</text>" in wait


def test_a_report_of_many_ranks_draws_the_straggler_and_the_median(tmp_path: Path) -> None:
    waits = [0.05] * 12
    waits[7] = 0.85
    text = write_report(_job(tmp_path, waits), tmp_path / "job.html").read_text()
    wait = next(svg for svg in re.findall(r"<svg.*?</svg>", text, re.S) if "Data wait per rank" in svg)
    assert "2 of 12 ranks drawn" in wait and wait.count("<polyline") == 2
    assert ">rank 7 (straggler)</text>" in wait and "(median)</text>" in wait
    assert "highest rank 7 85% of its step" in text  # the headline's data wait: lowest, median, highest


def test_a_single_process_report_has_no_job_section(tmp_path: Path) -> None:
    text = write_report(_job(tmp_path, [0.05]), tmp_path / "one.md").read_text()
    assert "a job of" not in text and "### Summary of" not in text and "per rank" not in text
    assert re.search(r"^step time  [▁▂▃▄▅▆▇█]+", text, re.M)


def test_pick_ranks_draws_all_of_few_and_the_straggler_and_median_of_many() -> None:
    from pitstop.charts import pick_ranks

    runs = _runs([0.05, 0.85, 0.05])
    ranked = [(f"rank {r}", run) for r, run in enumerate(runs)]
    assert [(label, why) for label, _, why in pick_ranks(ranked, 8)] == [("rank 0", ""), ("rank 1", ""), ("rank 2", "")]
    picked = [(label, why) for label, _, why in pick_ranks(ranked, 2, ["rank 1"])]
    assert picked[0] == ("rank 1", "straggler") and len(picked) == 2 and picked[1][1] == "median"


def test_the_text_charts_of_a_job_draw_each_ranks_data_wait() -> None:
    charts = {c.title: c for c in run_charts([("rank 0", r) for r in _runs([0.05])] + [
        ("rank 1", r) for r in _runs([0.85])])}
    wait = charts["data wait (ms) by step"]
    assert [line.label for line in wait.lines] == ["rank 0 data wait ms", "rank 1 data wait ms"]
    assert min(wait.lines[1].ys) > 5 * max(wait.lines[0].ys)
    text = job_plot(_runs([0.05, 0.85]), width=80, color=False)
    assert "rank 1 data wait ms" in text and text.isascii()


def test_a_job_recorded_as_name_jsonl_reads_with_its_other_ranks_files(tmp_path: Path) -> None:
    """`pitstop run --record job.jsonl -- torchrun ...`: rank 1 writes job.rank1.jsonl beside it."""
    from pitstop.recorded import load_runs

    records = _job(tmp_path, [0.05, 0.85])
    (records / "rank0.jsonl").rename(tmp_path / "job.jsonl")
    (records / "rank1.jsonl").rename(tmp_path / "job.rank1.jsonl")
    text = write_report(tmp_path / "job.jsonl", tmp_path / "job.md").read_text()
    assert "a job of 2 ranks" in text and "| straggler | rank 1: " in text
    runs, _ = load_runs(tmp_path / "job.jsonl")  # `view job.jsonl --summary` reads the same job
    assert [r.rank for r in runs] == [0, 1]
    # a file of another run that happens to share the name is left out, not taken for rank 2
    other = [encode(e).replace('"session":"job"', '"session":"other"') for e in _rank(2, 3, 0.05)]
    (tmp_path / "job.rank2.jsonl").write_text("\n".join(other) + "\n")
    assert "a job of 2 ranks" in write_report(tmp_path / "job.jsonl", tmp_path / "again.md").read_text()
    assert [r.rank for r in load_runs(tmp_path / "job.jsonl")[0]] == [0, 1]
