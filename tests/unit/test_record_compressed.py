"""The compact record: steps in `steps` lines, gzip blocks; it reads as the plain record did, cut or whole, by position."""

from __future__ import annotations

import dataclasses
import gzip
import json
import shutil
from pathlib import Path

import pytest

from pitstop.errors import SchemaError
from pitstop.events import Event, Loss, Step
from pitstop.headless import summary_text
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling.record import ReadResult, RecordReader, RecordWriter, iter_record, scan_record
from pitstop.recorded import _sidecar, load_runs
from pitstop.stepcolumns import encode_steps
from tests.unit.test_record_index import small_windows  # noqa: F401  (a fixture)
from tests.unit.test_replay import _events, _write


def _close(a: object, b: object) -> bool:
    """Equal, floats to the microsecond (what a record keeps of a duration or a time)."""
    if isinstance(a, float) and isinstance(b, float):
        return abs(a - b) <= 1.01e-6 * max(1.0, abs(a) / 1e9)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    if dataclasses.is_dataclass(a) and type(a) is type(b):
        return all(_close(getattr(a, f.name), getattr(b, f.name)) for f in dataclasses.fields(a))  # type: ignore[arg-type]
    return a == b and type(a) is type(b)


def _as_written(events: list[Event]) -> list[Event]:
    """The events as a record keeps them: losses to 9 significant digits."""
    return [dataclasses.replace(e, values=[None if v is None else float(f"{v:.9g}") for v in e.values])
            if isinstance(e, Loss) else e for e in events]


def _same_record(got: list[Event], events: list[Event]) -> None:
    """`got` holds `events` as written: steps, losses and the rest each in their order, every loss after its steps."""
    want = _as_written(events)
    for kinds in ((Step,), (Loss,)):
        a = [e for e in got if isinstance(e, kinds)]
        b = [e for e in want if isinstance(e, kinds)]
        assert len(a) == len(b) and all(_close(x, y) for x, y in zip(a, b))
    assert [e for e in got if not isinstance(e, (Step, Loss))] == [e for e in want if not isinstance(e, (Step, Loss))]
    seen: set[int] = set()
    for event in got:
        if isinstance(event, Step):
            seen.add(event.step)
        elif isinstance(event, Loss):
            assert set(event.steps) <= seen


def _write_compact(path: Path, events: list[Event], per_write: int = 40, close: bool = True) -> None:
    """The record the agent's writer leaves: a write every `per_write` events, as its passes write them."""
    writer = RecordWriter(path)
    for i in range(0, len(events), per_write):
        writer.write_events(events[i:i + per_write])
    if close:
        writer.close()


def _steps(n: int) -> list[Step]:
    out = []
    t = 1_700_000_000.123456
    for i in range(n):
        wall = 0.01 + (i * 7919 % 1000) * 1e-6 + 1e-9 * i  # digits past the microsecond are dropped
        t += wall
        phased = i % 5 != 3
        fwd, bwd, opt = (wall * 0.2, wall * 0.5, wall * 0.1) if phased else (None, None, None)
        out.append(Step(t=t, step=i if i < n - 2 else i + 10, wall=wall, data_wait=wall * 0.1, samples=32 + i % 2,
                        mem_allocated=None if i % 4 else 4096 * i, host_rss=1 << 30, mark="eval" if i == 4 else None,
                        eval_s=wall / 3 if i == 4 else 0.0, loader=0, forward_s=fwd, backward_s=bwd, optimizer_s=opt,
                        other_s=max(0.0, wall * 0.9 - wall * 0.8) if phased else None,
                        phase_clock="host" if phased else None))
    return out


def test_a_steps_line_decodes_to_the_steps_it_was_made_from_to_the_microsecond() -> None:
    steps = _steps(40)
    line = encode_steps(steps)
    assert len(line) < 0.4 * sum(len(json.dumps(dataclasses.asdict(s))) for s in steps)
    decoded = decode_events(line.encode())
    assert len(decoded) == len(steps)
    for a, b in zip(steps, decoded):
        assert _close(a, b), (a, b)
    assert [s.step for s in decoded][-3:] == [37, 48, 49]  # indexes that jump are kept as written


def test_a_malformed_steps_line_names_the_column() -> None:
    data = json.loads(encode_steps(_steps(4)))
    data["wall_us"] = data["wall_us"][:3]
    with pytest.raises(SchemaError, match="'wall_us' has 3 values for 4 steps"):
        decode_events(json.dumps(data, separators=(",", ":")).encode())
    data = json.loads(encode_steps(_steps(4)))
    data["t"] = float("nan")  # Python's json reads NaN: refused in one line, not a crash of the reader
    with pytest.raises(SchemaError, match="'t' must be a number"):
        decode_events(json.dumps(data, separators=(",", ":")).encode())


@pytest.mark.parametrize("name", ["rank0.jsonl", "rank0.jsonl.gz"])
def test_a_record_reads_back_every_event_at_its_position(tmp_path: Path, name: str) -> None:
    events = _events(700, rank=0)
    path = tmp_path / name
    _write_compact(path, events)
    scanned = list(scan_record(path))
    _same_record([e for _, _, e in scanned], events)
    reader = RecordReader(path, stop=scanned[-1][1])
    positions = [start for start, _, _ in scanned]
    assert all(_close(a, b) for a, b in zip(reader.events_at(positions), (e for _, _, e in scanned)))
    # From any event on (the middle of a `steps` line too), the rest of the record, in order.
    for k in (1, 2, 37, 38, 400, len(scanned) - 1):
        rest = list(reader.events_from(scanned[k][0]))
        assert [s for s, _, _ in rest] == positions[k:]
        steps = [e for _, _, e in reader.events_from(scanned[k][0], "step")]
        assert steps == [e for _, _, e in scanned[k:] if isinstance(e, Step)]


def test_a_compressed_record_is_gzip_json_lines_and_far_smaller_than_plain(tmp_path: Path) -> None:
    events = _events(3000, rank=0)
    compact, plain = tmp_path / "r.jsonl.gz", tmp_path / "old.jsonl"
    _write_compact(compact, events)
    _write(plain, events)  # one line an event, as records were written before
    with gzip.open(compact, "rt") as handle:  # Python's own reader (and `gzip -dc`) reads it
        kinds = [json.loads(line)["kind"] for line in handle]
    assert kinds[0] == "hello" and "steps" in kinds and "step" not in kinds
    assert compact.stat().st_size * 10 < plain.stat().st_size


def test_a_compressed_record_cut_anywhere_reads_to_its_last_whole_line(tmp_path: Path) -> None:
    events = _events(1500, rank=0)
    whole = tmp_path / "whole.jsonl.gz"
    _write_compact(whole, events, close=False)  # killed: the last block has no end
    data = whole.read_bytes()
    expected = [e for _, _, e in scan_record(whole)]
    _same_record(expected, events)
    cut = tmp_path / "cut.jsonl.gz"
    for size in sorted({len(data) * k // 23 for k in range(1, 23)} | {len(data) - 1, 40}):
        cut.write_bytes(data[:size])
        read = ReadResult()
        got = [e for _, _, e in scan_record(cut, read)] if size > 40 else []
        assert got == expected[:len(got)], size  # a prefix, never a wrong event
        assert len(got) > len(expected) * size / len(data) - 250, size  # up to about the cut
    cut.write_bytes(data[:len(data) * 2 // 3] + b"\x00garbage")  # what a torn write may leave
    read = ReadResult()
    got = list(iter_record(cut, read))
    assert read.torn and got == expected[:len(got)] and len(got) > len(expected) / 2


@pytest.mark.usefixtures("small_windows")
def test_summary_of_a_compressed_record_from_its_index_equals_a_full_pass_whole_and_killed(tmp_path: Path) -> None:
    events = _events(1300, rank=0)
    path = tmp_path / "rank0.jsonl.gz"
    writer = RecordWriter(path)
    for i in range(0, 1000, 40):
        writer.write_events(events[i:i + 40])
    first = summary_text(*load_runs(path))  # a reader while the run goes on indexes what is there
    assert _sidecar.index_path(path).exists()
    assert summary_text(*load_runs(path)) == first  # the next reads its index
    for i in range(1000, len(events), 40):
        writer.write_events(events[i:i + 40])
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # then killed in the middle of a write: its last block cut
    fresh = tmp_path / "fresh" / path.name
    fresh.parent.mkdir()
    shutil.copyfile(path, fresh)
    full = summary_text(*load_runs(fresh)).replace(str(fresh), str(path))
    assert summary_text(*load_runs(path)) == full  # from the index, and the lines after it
    assert "cut line" in full and full != first


def test_a_record_on_a_filesystem_without_flock_is_still_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOLCK from flock (some NFS and FUSE mounts) must not cost the run its record."""
    import errno
    import fcntl

    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = tmp_path / "run.jsonl.gz"
    writer = RecordWriter(path)
    writer.write_lines(['{"a": 1}', '{"b": 2}'])
    writer.close()
    assert gzip.decompress(path.read_bytes()).decode().splitlines() == ['{"a": 1}', '{"b": 2}']
