"""Provides the JSON-lines record: where records live, the writer, and a tolerant reader.

A record is one file per training process (`rank0.jsonl`, `rank1.jsonl`, ...),
grouped in a session directory. Readers accept a file, a session directory, or
several files. A record cut by a killed run ends in a torn line: the reader
stops at the last whole line and says so instead of failing.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pitstop.errors import RecordError, SchemaError
from pitstop.events import Event, Hello, encode
from pitstop.profiling._linedecode import decode_line


def default_record_root() -> Path:
    """Where records go unless `--record` says otherwise (documented in the README)."""
    env = os.environ.get("PITSTOP_RECORD_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pitstop" / "runs"


def record_path_for(base: str, rank: int | None, pid: int) -> Path:
    """The file one process writes, given the session's record base.

    `base` ending in `.jsonl` is a file name: rank 0 (or a lone process) writes
    it, rank r writes `NAME.rank{r}.jsonl`. Otherwise `base` is a directory and
    each process writes `rank{r}.jsonl` in it (`rank0.jsonl` when no rank); a name
    already taken gets the pid (`NAME.pid{pid}.jsonl`, `rank{r}-{pid}.jsonl`): nothing is overwritten.
    """
    path = Path(base)
    if path.suffix == ".jsonl":
        named = path if not rank else path.with_name(f"{path.stem}.rank{rank}.jsonl")
        if named.exists():  # another process of the job without a rank of its own: never overwrite
            named = path.with_name(f"{named.stem}.pid{pid}.jsonl")
        return named
    name = f"rank{rank}.jsonl" if rank is not None else "rank0.jsonl"
    candidate = path / name
    if candidate.exists():  # a restarted rank, or a second non-rank process: never overwrite
        candidate = path / f"{candidate.stem}-{pid}.jsonl"
    return candidate


class RecordWriter:
    """Appends encoded events to one file; only the agent's writer thread calls it.

    Unbuffered `os.write` on purpose: a process that forks while a buffered
    file holds unwritten data would flush that data twice (once per process).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: a record is never overwritten; the CLI checks first and fails with a clear line.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)

    def write_lines(self, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        view = memoryview(data)
        while view:
            written = os.write(self._fd, view)
            view = view[written:]

    def write(self, event: Event) -> None:
        self.write_lines([encode(event)])

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


@dataclass
class ReadResult:
    """What a reader found besides the events."""

    torn: bool = False  # the last line was cut (a killed run)
    skipped: int = 0  # lines of kinds this version does not know


def iter_record(path: Path, result: ReadResult | None = None) -> Iterator[Event]:
    """Events of one record file, in order. Raises RecordError/SchemaError with the path."""
    for _, _, event in scan_record(path, result):
        yield event


def scan_record(path: Path, result: ReadResult | None = None, start: int = 0) -> Iterator[tuple[int, int, Event]]:
    """Events of one record file with the byte range of each one's line: (start, end, event).

    The offsets let a replay come back to any line later (`RecordReader`) instead of
    holding the events: a 24-hour run at 10 ms steps is ~8.6 M lines. `start` (the
    start of a line, from an index) reads on from there: what a record appended
    since its index was written needs, without the lines before it.
    """
    result = result if result is not None else ReadResult()
    try:
        handle = open(path, "rb")
    except FileNotFoundError as err:
        raise RecordError(f"no record at {path}") from err
    except IsADirectoryError as err:
        raise RecordError(f"{path} is a directory, not a record file") from err
    except OSError as err:
        raise RecordError(f"cannot read record {path}: {err.strerror}") from err
    with handle:
        lineno = 0
        offset = start
        resumed = start > 0
        first = not resumed
        handle.seek(start)
        for raw in handle:
            lineno += 1
            start, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            whole = raw.endswith(b"\n")
            try:
                event = decode_line(raw)
            except SchemaError as err:
                if not whole:  # a torn last line from a killed run: stop quietly
                    result.torn = True
                    return
                if "newer pitstop" in str(err):
                    raise SchemaError(f"{path}: {err}") from err
                where = f"byte {start}" if resumed else f"{lineno}"  # a line number needs the lines before
                raise RecordError(f"{path}:{where}: corrupt record line ({err})") from err
            if event is None:
                result.skipped += 1
                continue
            if first and not isinstance(event, Hello):
                raise RecordError(f"{path}: not a pitstop record (first event is not 'hello')")
            first = False
            yield start, offset, event
        if first and not resumed:
            raise RecordError(f"{path}: empty record (the run wrote nothing)")


class RecordReader:
    """Reads lines of a record file already scanned (`scan_record`) again, from their offsets.

    `stop` is the end of the last whole line the scan read: a torn tail, or lines
    a still-running agent appended since, stay out of the replay.
    """

    def __init__(self, path: Path, stop: int) -> None:
        self.path = path
        self.stop = stop

    def events_from(self, start: int, kind: str | None = None) -> Iterator[tuple[int, int, Event]]:
        """(start, end, event) of each line from offset `start` to `stop`; only `kind`'s when given.

        With `kind`, other lines are passed over by their prefix without decoding
        (`encode` writes `kind` first), which is what makes re-reading a window cheap.
        """
        prefix = f'{{"kind":"{kind}"'.encode() if kind is not None else b""
        with self._open() as handle:
            handle.seek(start)
            offset = start
            for raw in handle:
                begin, offset = offset, offset + len(raw)
                if offset > self.stop:
                    return
                if prefix and not raw.startswith(prefix) and raw.startswith(b'{"kind":'):
                    continue
                event = self._decode(raw, begin)
                if event is not None and (kind is None or event.kind == kind):
                    yield begin, offset, event

    def events_at(self, offsets: Iterable[int]) -> Iterator[Event]:
        """The events of the lines starting at `offsets` (in that order)."""
        with self._open() as handle:
            for offset in offsets:
                handle.seek(offset)
                event = self._decode(handle.readline(), offset)
                if event is not None:
                    yield event

    def _open(self) -> BinaryIO:
        try:
            return open(self.path, "rb")
        except OSError as err:
            raise RecordError(f"cannot read record {self.path}: {err.strerror or err}") from err

    def _decode(self, raw: bytes, offset: int) -> Event | None:
        if not raw.strip():
            return None
        try:
            return decode_line(raw)
        except SchemaError as err:  # it decoded when scanned: the file was changed since
            raise RecordError(f"{self.path}: changed while it was replayed (byte {offset}: {err})") from err


def record_files(target: Path) -> list[Path]:
    """The record files a user means by `target`: a file, or every *.jsonl in a directory."""
    if target.is_dir():
        files = sorted(target.glob("*.jsonl"))
        if not files:
            raise RecordError(f"no record files (*.jsonl) in {target}")
        return files
    if not target.exists():
        raise RecordError(f"no record at {target}")
    return [target]


def read_records(target: Path) -> list[list[Event]]:
    """Every event of every file `target` names: one list per process."""
    return [list(iter_record(p)) for p in record_files(target)]
