"""A real 2-rank gloo job whose rank 1 waits for its data: `run --headless --plot` ends with each rank's charts,
and `pitstop report` leads with the job and names rank 1 as the straggler with its data wait."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from .conftest import SCRIPTS, pitstop

# 40 steps a rank: rank 1 the straggler as at 100 (92% of its step data wait, p50 31.9 ms against 32.1;
# rank 0 7% against 13%), the same four charts, 1 s less of CPU.
STEPS = "40"
# Both tests read one job: under pytest-xdist they run on one worker, so it runs once.
pytestmark = pytest.mark.xdist_group("jobreport")


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, dict[str, str]]:
    """(record directory, the run's stdout, its stderr, env) of `pitstop run --headless --plot` on the job."""
    root = tmp_path_factory.mktemp("jobreport")
    runtime = Path(f"/tmp/pst-{os.getpid()}-{root.name[-12:]}")  # short: socket paths max 107 bytes
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = dict(os.environ)
    env.update(PITSTOP_RECORD_DIR=str(root / "records"), PITSTOP_RUNTIME_DIR=str(runtime),
               PYTHONUNBUFFERED="1", SLOW_DATA_RANK="1", COLUMNS="100",
               WORKERS_FORKED="1")  # rank 1's worker spawned would import torch again: 3 s of the job's 20 s of CPU
    env.pop("PITSTOP_SESSION", None)
    env.pop("PITSTOP_OWNER_PID", None)
    records = root / "job"
    # No profiler window: each rank's steps are all training steps (a window marks 6).
    result = pitstop(["run", "--headless", "--plot", "--profile", "off", "--record", str(records), "--",
                      sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
                      str(SCRIPTS / "ddp_gloo.py"), STEPS], env, timeout=240)
    shutil.rmtree(runtime, ignore_errors=True)
    assert result.returncode == 0, result.stderr[-3000:]
    return records, result.stdout, result.stderr, env


@pytest.mark.slow
def test_a_headless_run_with_plot_ends_its_stdout_with_each_ranks_ascii_charts(
        job: tuple[Path, str, str, dict[str, str]]) -> None:
    _, out, err, _ = job
    assert "pitstop job summary" in err and "pitstop job summary" not in out  # the summary stays on stderr
    titles = ["step time (ms) by step", "data wait (ms) by step", "throughput (samples/s) by step",
              "memory (GiB) by step"]
    # After the script's output, the charts and only they. Found by their first title, not by the ranks'
    # last lines: two ranks printing at once interleave their writes (beside two CPU hogs stdout read
    # "rank 0 pid 2259 donerank 1 pid 2260 done", then both newlines).
    lines = out.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip() == titles[0]), None)
    assert first is not None, out[-3000:]
    assert out[:out.index(titles[0])].count(" done") == 2, out[-3000:]  # both ranks' last lines before them
    assert not any(" done" in line or line.startswith(("worker pid", "rank ")) for line in lines[first:]), out
    charts = "\n".join(lines[first:])
    assert [charts.index(title) for title in titles] == sorted(charts.index(title) for title in titles)
    assert len(charts.splitlines()) >= 4 * 10  # four charts of ~12 rows each
    for label in ("rank 0 step ms", "rank 1 step ms", "rank 0 data wait ms", "rank 1 data wait ms"):
        assert label in charts
    assert "\x1b" not in out and out.isascii()  # stdout is a pipe: plain ASCII, no colour codes
    assert all(len(row) <= 100 for row in charts.splitlines())  # $COLUMNS wide


@pytest.mark.slow
def test_the_report_of_the_job_names_the_data_straggler_and_draws_both_ranks(
        job: tuple[Path, str, str, dict[str, str]], tmp_path: Path) -> None:
    records, _, _, env = job
    done = pitstop(["report", str(records), "-o", str(tmp_path / "job.md")], env)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "job.md").read_text()
    head = text.split("### Summary of rank 0", 1)[0]
    assert "| ranks | 2 seen of world size 2 (2 finished) |" in head
    assert re.search(r"\| straggler \| rank 1: .*extra time is data wait", head), head
    waits = re.search(r"\| data wait \| rank 0 (\d+)% of its step \(p50 [\d.]+ ms\), "
                      r"rank 1 (\d+)% of its step \(p50 ([\d.]+) ms\)", head)
    assert waits is not None, head
    assert int(waits[2]) >= 50 and int(waits[1]) < 30  # rank 1's loader sleeps 32 ms a batch
    assert float(waits[3]) >= 15
    block = text.split("Over the run, per rank", 1)[1].split("```")[1]
    # Rows are scaled to the p95 (a step above it drawn at the top, ▲); rank 0 waits for nothing.
    assert re.search(r"^data wait\s+rank 0\s+([▲▁▂▃▄▅▆▇█]+|0 at every step)", block, re.M) and re.search(
        r"^\s+rank 1\s+[▲▁▂▃▄▅▆▇█]+  (max|scale)", block.split("data wait", 1)[1], re.M), block
    done = pitstop(["report", str(records), "-o", str(tmp_path / "job.html")], env)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "job.html").read_text()
    wait = next(svg for svg in re.findall(r"<svg.*?</svg>", page, re.S) if "Data wait per rank" in svg)
    assert wait.count("<polyline") == 2 and ">rank 0</text>" in wait and ">rank 1</text>" in wait
