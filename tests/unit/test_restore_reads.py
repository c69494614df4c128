"""A rank restored from its index reads its record as little as it can: each member decompressed once, no steps line
before its window decoded, and the same windows as a pass over the whole record."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pitstop.analysis import RunState
from pitstop.events import SCHEMA_VERSION, End, Event, Gpu, Hello, Loss, Proc, ProfileWindow, Sample, Step
from pitstop.profiling import _recordfile
from pitstop.profiling import record as record_module
from pitstop.profiling.record import RecordWriter, iter_record
from pitstop.recorded import index_file, job_limits

T0 = 1_700_000_000.0
STEPS = 6_000
LINE = 50  # steps a `steps` line holds here: a sample follows every 50th step
RANKS = 128  # a job this large holds a share of each series a rank (pitstop/recorded/_windows.py)


def _events() -> list[Event]:
    out: list[Event] = [Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="s", pid=100, ppid=1, host="h",
                              argv=["python", "train.py"], cwd="/", started=T0, python="3.11", rank=0,
                              world_size=RANKS, script="train.py")]
    t = T0 + 1.0
    for i in range(STEPS):
        t += 0.01
        out.append(Step(t=t, step=i, wall=0.01, data_wait=0.001 * (i % 3), samples=32, loader=0))
        if i % LINE == LINE - 1:
            out.append(Sample(t=t + 0.001, gpus=[Gpu(index=0, name="gpu", util=float(i % 100), mem_used=i,
                                                      mem_total=1 << 34, power_w=200.0)],
                              procs=[Proc(pid=100, role="main", cpu=90.0 + i % 9, rss=1 << 30)], system_cpu=40.0))
            out.append(Loss(t=t + 0.002, steps=list(range(i - LINE + 1, i + 1)), values=[1.0 / (i + 1)] * LINE))
        if i % 500 == 499:
            out.append(ProfileWindow(t=t + 0.003, step_start=i - 9, step_end=i + 1, device="cpu",
                                     duration_s=0.1))
    out.append(End(t=t + 1.0, steps=STEPS, dropped=0))
    return out


@pytest.fixture(scope="module")
def record(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("restore") / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    events = _events()
    for i in range(0, len(events), 400):  # written in pieces, as the agent's writer thread does: many members
        writer.write_events(events[i:i + 400])
    writer.close()
    index_file(path)  # the index saved beside it, as the keeper leaves it
    return path


def _whole(path: Path, limits: dict[str, int]) -> RunState:
    run = RunState()
    for event in iter_record(path):
        run.add(event)
    run.keep_last(limits)
    return run


def test_a_job_rank_restored_decompresses_each_member_once(record: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Each series is read back on its own, mostly from the record's last members: they were
    # decompressed once a series (7.6 ms a rank where the whole record takes 4.7 ms).
    decompressed: list[int] = []
    read: set[int] = set()
    members = _recordfile.Lines.members

    def counting_members(self: _recordfile.Lines, member: int) -> Iterator[tuple[int, bytes]]:
        for base, data in members(self, member):
            read.add(base)
            yield base, data

    real = zlib.decompressobj

    def counting_unzip(*args: Any, **kwargs: Any) -> Any:
        if args == (31,):  # a record's member (the index beside it is read by `gzip`)
            decompressed.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(_recordfile.Lines, "members", counting_members)
    monkeypatch.setattr(_recordfile.zlib, "decompressobj", counting_unzip)
    limits = job_limits(RANKS)
    assert limits is not None
    run = index_file(record, limits=limits).run
    assert len(read) > 1
    # Once each, and the last once more: the pass that looks for lines appended since the index was saved.
    assert len(decompressed) <= len(read) + 1, f"{len(decompressed)} decompressions of {len(read)} members"
    whole = _whole(record, limits)
    assert list(run.steps) == list(whole.steps)
    assert list(run.samples) == list(whole.samples)
    assert list(run.profiles) == list(whole.profiles)
    assert all(run.losses.get(step) == value for step, value in whole.losses.items())


def test_steps_lines_before_a_ranks_window_are_not_decoded(record: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Steps are noted one in 256: the window of a job's rank (500 steps) was read from the noted
    # step before it, decoding up to 255 steps that it then dropped.
    decoded: list[int] = []
    real = record_module.decode_events

    def counting(raw: bytes) -> list[Event]:
        events = real(raw)
        decoded.extend(1 for e in events if isinstance(e, Step))
        return events

    limits = job_limits(RANKS)
    assert limits is not None
    index_file(record, limits=limits)  # the index loaded and checked once before counting
    monkeypatch.setattr(record_module, "decode_events", counting)
    run = index_file(record, limits=limits).run
    window = limits["step"]
    assert [s.step for s in run.steps] == list(range(STEPS - window, STEPS))
    assert (STEPS - window) % 256 > LINE  # the noted step lies more than a line before the window
    assert len(decoded) < window + LINE, f"{len(decoded)} steps decoded for a window of {window}"
