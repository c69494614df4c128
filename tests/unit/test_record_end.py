"""The End a killed process could not write, appended by its launcher: only to a record whose end is whole."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from pitstop.events import End, Hello, Step
from pitstop.profiling.record import RecordWriter, append_end, iter_record

END = End(t=200.0, steps=300, dropped=0, reason="signal", exit_code=143)


def killed_record(path: Path) -> list[object]:
    """A record as a SIGTERM leaves it: written pass after pass, never closed (its last member stays open)."""
    writer = RecordWriter(path)
    events: list[object] = [Hello(schema=2, pitstop_version="0.1.0", session="s", pid=7, ppid=1, host="h",
                                  argv=["t.py"], cwd="/", started=100.0, python="3.11")]
    writer.write_events(events)  # type: ignore[arg-type]
    for k in range(6):  # the writer's passes
        batch = [Step(t=100.0 + i, step=i, wall=0.01, data_wait=0.001, samples=8) for i in range(k * 50, k * 50 + 50)]
        writer.write_events(batch)  # type: ignore[arg-type]
        events += batch
    return events


@pytest.mark.parametrize("name", ["r.jsonl.gz", "r.jsonl"])
def test_a_record_left_open_by_a_kill_gets_the_end_and_reads_whole(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    events = killed_record(path)
    assert append_end(path, END)
    assert list(iter_record(path)) == [*events, END]
    if name.endswith(".gz"):
        last = gzip.decompress(path.read_bytes()).splitlines()[-1]  # any gzip reader
        assert last.startswith(b'{"kind":"end"') and b'"exit_code":143,' in last


@pytest.mark.parametrize("name, cut", [("r.jsonl.gz", 3), ("r.jsonl", 7)])
def test_a_record_whose_last_write_was_torn_is_left_as_it_was(tmp_path: Path, name: str, cut: int) -> None:
    path = tmp_path / name
    killed_record(path)
    data = path.read_bytes()[:-cut]  # the kill came in the middle of a write
    path.write_bytes(data)
    assert not append_end(path, END)
    assert path.read_bytes() == data


def test_a_record_that_ended_whole_gets_the_end_in_a_member_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl.gz"
    writer = RecordWriter(path)
    writer.write(Hello(schema=2, pitstop_version="0.1.0", session="s", pid=7, ppid=1, host="h", argv=[], cwd="/",
                       started=100.0, python="3.11"))
    writer.close()
    assert append_end(path, END)
    assert list(iter_record(path))[-1] == END


def test_what_the_launcher_passed_on_is_said_beside_the_processes_that_ended_without_an_end() -> None:
    import signal

    from pitstop.analysis import RunState
    from pitstop.runflow import forwarded_note

    cut, whole = RunState(), RunState()
    for run, pid in ((cut, 7), (whole, 8)):
        run.add(Hello(schema=2, pitstop_version="0.1.0", session="s", pid=pid, ppid=1, host="h", argv=["t.py"],
                      cwd="/", started=100.0, python="3.11"))
    whole.add(END)
    assert forwarded_note([cut, whole], [signal.SIGTERM]) == (
        "note: pitstop passed on SIGTERM to the training; pid 7 then ended without recording an end "
        "(its own handler did not finish, or a SIGKILL followed)")
    assert forwarded_note([cut, whole], []) is None and forwarded_note([whole], [signal.SIGTERM]) is None
