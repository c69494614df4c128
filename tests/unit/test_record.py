"""Record files: written by one writer, read back tolerant of a cut last line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.errors import RecordError, SchemaError
from pitstop.events import SCHEMA_VERSION, End, Hello, Loss, Proc, Sample, Step, decode, encode
from pitstop.profiling.record import ReadResult, RecordWriter, iter_record, read_records, record_path_for

HELLO = Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="s", pid=1, ppid=0, host="h",
              argv=[], cwd="/", started=0.0, python="3.11")


def _write(path: Path, n: int) -> None:
    writer = RecordWriter(path)
    writer.write(HELLO)
    writer.write_lines([encode(Step(t=float(i), step=i, wall=0.1, data_wait=0.0)) for i in range(n)])
    writer.write(End(t=9.0, steps=n, dropped=0))
    writer.close()


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, 5)
    events = list(iter_record(path))
    assert events[0] == HELLO and isinstance(events[-1], End)
    assert [e.step for e in events if isinstance(e, Step)] == [0, 1, 2, 3, 4]


def test_writer_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, 1)
    with pytest.raises(FileExistsError):
        RecordWriter(path)


def test_a_torn_last_line_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, 3)
    data = path.read_bytes()
    path.write_bytes(data + b'{"kind":"step","t":1.0,"st')
    result = ReadResult()
    events = list(iter_record(path, result))
    assert result.torn
    assert sum(isinstance(e, Step) for e in events) == 3


def test_a_corrupt_line_in_the_middle_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    _write(path, 3)
    lines = path.read_text().splitlines()
    lines[2] = "garbage"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:3: corrupt"):
        list(iter_record(path))


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    path.write_text(encode(HELLO).replace(f'"schema":{SCHEMA_VERSION}', '"schema":99') + "\n")
    with pytest.raises(SchemaError, match="newer pitstop"):
        list(iter_record(path))


@pytest.mark.parametrize("content, message", [(b"", "empty record"), (b'{"kind":"end","t":1,"steps":0,"dropped":0}\n', "not a pitstop record")])
def test_not_a_record(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "r.jsonl"
    path.write_bytes(content)
    with pytest.raises(RecordError, match=message):
        list(iter_record(path))


def test_missing_record(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no record at"):
        read_records(tmp_path / "nope.jsonl")


def test_record_paths_per_rank(tmp_path: Path) -> None:
    assert record_path_for(str(tmp_path / "run.jsonl"), None, 7) == tmp_path / "run.jsonl"
    assert record_path_for(str(tmp_path / "run.jsonl"), 0, 7) == tmp_path / "run.jsonl"
    assert record_path_for(str(tmp_path / "run.jsonl"), 1, 7) == tmp_path / "run.rank1.jsonl"
    assert record_path_for(str(tmp_path / "run.jsonl.gz"), 2, 7) == tmp_path / "run.rank2.jsonl.gz"
    (tmp_path / "run.rank2.jsonl.gz").write_text("")
    assert record_path_for(str(tmp_path / "run.jsonl.gz"), 2, 7) == tmp_path / "run.rank2.pid7.jsonl.gz"
    assert record_path_for(str(tmp_path), 3, 7) == tmp_path / "rank3.jsonl.gz"  # a session directory: compressed
    (tmp_path / "rank3.jsonl.gz").write_text("")
    assert record_path_for(str(tmp_path), 3, 7) == tmp_path / "rank3-7.jsonl.gz"


def test_steps_losses_and_samples_read_as_decode_reads_them(tmp_path: Path) -> None:
    # The reader builds Step, Loss and Sample lines by a shortcut (profiling/_linedecode.py):
    # defaults, fields of a newer minor version and bad lines must come out as `decode` has them.
    lines = [
        encode(HELLO),
        '{"kind":"step","t":1.0,"step":0,"wall":0.1,"data_wait":0.0}',  # an older agent: defaults
        '{"kind":"step","t":2.0,"step":1,"wall":0.1,"data_wait":0.0,"from_the_future":3}',
        '{"kind":"loss","t":2.5,"steps":[0,1],"values":[1.0,null]}',
        '{"kind":"loss","t":2.6,"steps":[2],"values":[0.5]}',
        '{"kind":"sample","t":2.7,"gpus":[{"index":0,"name":"g","util":50.0}],'
        '"procs":[{"pid":1,"role":"main","cpu":99.0,"rss":5}],"system_cpu":30.0}',
        '{"kind":"sample","t":2.8,"procs":[{"pid":1,"role":"main","cpu":null,"rss":5,"newer":1}]}',
    ]
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    events = list(iter_record(path))
    assert events == [decode(line) for line in lines]
    assert [vars(e) for e in events] == [vars(decode(line)) for line in lines]  # no unknown field kept
    assert [type(p) for e in events if isinstance(e, Sample) for p in e.procs] == [Proc, Proc]
    losses = [e for e in events if isinstance(e, Loss)]
    assert losses[0].nonfinite == [] and losses[0].nonfinite is not losses[1].nonfinite
    path.write_text("\n".join([*lines[:2], '{"kind":"step","t":3.0,"wall":0.1,"data_wait":0.0}', lines[3]]) + "\n")
    with pytest.raises(RecordError, match=r"r\.jsonl:3: corrupt record line \(malformed 'step' event"):
        list(iter_record(path))
