"""Tests of `pitstop report`: the downsampling, the SVG charts, the HTML page and the Markdown."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from pitstop.analysis import _state
from pitstop.cli import main
from pitstop.errors import UsageError
from pitstop.events import (
    DataLoaderInfo,
    End,
    Hello,
    KernelStat,
    OpStat,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
    encode,
)
from pitstop.report import write_report
from pitstop.report._series import Buckets
from pitstop.report._svg import Line, chart, nice_ticks


class Page(HTMLParser):
    """Collects what a browser would load or run: tags, and every attribute that names a resource."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: dict[str, int] = {}
        self.loads: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name, value in attrs:
            if name in ("src", "href", "xlink:href", "srcset", "data", "action") or (value and "url(" in value):
                self.loads.append(f"{tag} {name}={value}")

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def write_record(path: Path, n_steps: int = 200, wait_frac: float = 0.6, samples_every: int = 5) -> Path:
    lines = [
        Hello(schema=1, pitstop_version="0.1.0", session="s", pid=7, ppid=1, host="box", argv=["python", "train.py"],
              cwd="/", started=1000.0, python="3.11.7", script="train.py"),
        Runtime(t=1000.1, torch_version="2.13.0", cuda_version="12.4", device_type="cuda",
                device_names=["NVIDIA A100-SXM4-40GB"], cpu_count=8, usable_cpus=8, shm_bytes=8 << 30),
        DataLoaderInfo(t=1000.2, id=1, num_workers=0, batch_size=64, pin_memory=False, persistent_workers=False,
                       prefetch_factor=None, dataset="Images <b>&</b>", dataset_len=64 * n_steps),
    ]
    t = 1001.0
    for i in range(n_steps):
        t += 0.1
        lines.append(Step(t=t, step=i, wall=0.1, data_wait=0.1 * wait_frac, samples=64, loader=1,
                          mem_allocated=(1 << 30) + i, mem_reserved=2 << 30, host_rss=3 << 30))
        if i % samples_every == 0:
            lines.append(Sample(t=t, procs=[Proc(pid=7, role="main", cpu=95.0, rss=3 << 30)], system_cpu=50.0))
        if i == 60:
            lines.append(ProfileWindow(t=t, step_start=50, step_end=55, device="cuda", duration_s=0.6,
                                       ops=[OpStat("aten::convolution", 40, 9000.0, 20000.0, 30000.0)],
                                       kernels=[KernelStat("sm80_xmma_fprop", 20, 25000.0, 1250.0)],
                                       phases_ms={"data": 60.0, "forward": 20.0, "backward": 20.0}))
    lines.append(End(t=t + 0.1, steps=n_steps, dropped=0, reason="exit", exit_code=0))
    path.write_text("".join(encode(e) + "\n" for e in lines))  # type: ignore[arg-type]
    return path


def test_buckets_stay_bounded_and_keep_means_and_maxima() -> None:
    b = Buckets(max_buckets=100)
    for i in range(100_000):
        b.add(float(i), {"v": 1.0 if i != 77_777 else 50.0})
    assert 50 <= len(b) <= 100
    means = b.points("v")
    assert all(abs(v - 1.0) < 0.05 for _, v in means)
    assert max(v for _, v in b.points("v", "max")) == 50.0  # a single slow step survives as a maximum
    assert sum(v for _, v in b.points("v", "count")) == 100_000


def test_nice_ticks_and_an_empty_chart() -> None:
    assert nice_ticks(0, 9.3) == [0, 2, 4, 6, 8]
    assert nice_ticks(0, 9.3, cover=True) == [0, 2, 4, 6, 8, 10]  # the y axis ends on a round number
    assert nice_ticks(1200, 86_400, 6) == [20_000, 40_000, 60_000, 80_000]
    svg = chart("nothing", [Line("x", [])], "step", str)
    assert "not recorded" in svg and "http" not in svg


def test_html_report_is_self_contained_and_shows_charts_findings_and_tables(tmp_path: Path) -> None:
    record = write_record(tmp_path / "run.jsonl")
    out = write_report(record, tmp_path / "r.html")
    text = out.read_text()
    page = Page()
    page.feed(text)
    page.close()
    assert page.tags.get("svg", 0) >= 4 and page.tags.get("polyline", 0) >= 4
    assert "script" not in page.tags and page.loads == []
    assert not re.search(r"https?://", text)  # no URL at all, not even an SVG namespace
    body = " ".join(page.text)
    assert "The DataLoader cannot keep up" in body and "data-wait" in body  # the finding, with its fix
    assert "num_workers=" in body and "Fix:" in body
    assert "aten::convolution" in body and "sm80_xmma_fprop" in body  # op and kernel tables
    assert "Images <b>&</b>" in body and "<b>&</b>" not in text  # user text is escaped
    assert "NVIDIA A100-SXM4-40GB" in body and "2.13.0" in body and "3.11.7" in body  # environment
    assert "events dropped" in body and "agent per step" in body  # what is known of the overhead


def test_markdown_report_has_tables_and_sparklines(tmp_path: Path) -> None:
    out = write_report(write_record(tmp_path / "run.jsonl"), tmp_path / "r.md")
    text = out.read_text()
    assert text.startswith("## pitstop report: `train.py`")
    assert "| step time |" in text and "### Findings" in text and "```python" in text
    assert re.search(r"step time  [▁▂▃▄▅▆▇█]{10,}", text)
    assert "| `aten::convolution` |" in text


def test_report_never_overwrites_without_force(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = write_record(tmp_path / "run.jsonl")
    target = tmp_path / "r.html"
    target.write_text("mine")
    assert main(["report", str(record), "-o", str(target)]) == 2
    assert "exists" in capsys.readouterr().err and target.read_text() == "mine"
    assert main(["report", str(record), "-o", str(target), "--force"]) == 0
    assert target.read_text().startswith("<!DOCTYPE html>")
    with pytest.raises(UsageError, match="name the report .html"):
        write_report(record, tmp_path / "r.pdf")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.html", "run.jsonl"]  # no temporary file left


def test_a_long_record_gives_a_small_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # 4 analysis windows long, 20 steps a bucket: 51 KB at 40,000 steps and a window of 20,000 (4.3 s of
    # CPU), 48 KB here (0.8 s)
    monkeypatch.setattr(_state, "MAX_STEPS", 2_000)
    record = write_record(tmp_path / "long.jsonl", n_steps=8_000, samples_every=10)
    out = write_report(record, tmp_path / "long.html")
    size = out.stat().st_size
    assert size < 500_000, size  # 400 buckets a line, whatever the length
    points = max(len(m.group(1).split()) for m in re.finditer(r'<polyline points="([^"]*)"', out.read_text()))
    assert points <= 400
