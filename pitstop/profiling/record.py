"""Provides the JSON-lines record: where records live, the writer, and a tolerant reader.

A record is one file per training process (`rank0.jsonl.gz`, `rank1.jsonl.gz`,
..., compressed; `NAME.jsonl` when a user names a plain one), grouped in a
session directory. Readers accept a file, a session directory, or several
files. A record cut by a killed run ends in a torn line: the reader stops at
the last whole line and says so instead of failing.
"""

from __future__ import annotations

import fcntl
import glob
import gzip
import os
import re
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from pitstop.errors import RecordError, SchemaError
from pitstop.events import End, Event, Hello, Loss, Step, encode
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling._recordfile import (
    SUFFIX_GZ,
    GzipBlocks,
    Lines,
    MemberCache,
    closing_tail,
    in_member,
    is_compressed,
    one_member,
    open_record,
    position,
    split,
    write_all,
)
from pitstop.stepcolumns import batches, encode_loss, encode_steps


def default_record_root() -> Path:
    """Where records go unless `--record` says otherwise (documented in the README)."""
    env = os.environ.get("PITSTOP_RECORD_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "pitstop" / "runs"


def is_record_name(path: Path) -> bool:
    """Whether `path` names a record file: `NAME.jsonl` (plain lines) or `NAME.jsonl.gz` (compressed)."""
    return path.name.endswith((".jsonl", SUFFIX_GZ))


def record_suffix(path: Path) -> str:
    return SUFFIX_GZ if path.name.endswith(SUFFIX_GZ) else ".jsonl"


def record_stem(path: Path) -> str:
    """A record file's name without `.jsonl` / `.jsonl.gz`."""
    return path.name[:-len(record_suffix(path))]


def siblings(path: Path, infix: str) -> list[Path]:
    """The records beside `NAME.jsonl[.gz]` named `NAME.{infix}*` with either suffix, sorted."""
    stem = glob.escape(record_stem(path))
    return sorted([*path.parent.glob(f"{stem}.{infix}*.jsonl"), *path.parent.glob(f"{stem}.{infix}*{SUFFIX_GZ}")])


def links_path(record: Path) -> Path:
    """The file beside a record that names other directories holding records of its run, one a line.

    Ray Train's workers on other nodes write under the run's storage path (a filesystem
    all nodes share), not beside the driver's record: the driver names that directory here.
    """
    return record.with_name(f"{record_stem(record)}.links")


def linked_dirs(target: Path) -> list[Path]:
    """The directories the links files of `target` name: a record's own (`links_path`), or every one in a directory."""
    files = sorted(target.glob("*.links")) if target.is_dir() else [links_path(target)]
    out: list[Path] = []
    for links in files:
        try:
            lines = links.read_text().splitlines()
        except OSError:
            continue
        out += [Path(line) for line in lines if line.strip() and Path(line) not in out]
    return out


def linked_record_files(target: Path) -> list[Path]:
    """The record files in the directories `target`'s links files name (`linked_dirs`); one not there
    (its workers wrote beside the driver's record, or its filesystem is not reachable here) adds none."""
    out: list[Path] = []
    for folder in linked_dirs(target):
        try:
            out += [f for f in record_files(folder) if f not in out]
        except RecordError:
            continue
    return out


def record_path_for(base: str, rank: int | None, pid: int) -> Path:
    """The file one process writes, given the session's record base.

    `base` ending in `.jsonl` or `.jsonl.gz` is a file name (plain lines, or compressed):
    rank 0 (or a lone process) writes it, rank r writes `NAME.rank{r}.jsonl[.gz]`.
    Otherwise `base` is a directory and each process writes `rank{r}.jsonl.gz` in it
    (`rank0.jsonl.gz` when no rank): compressed, ~15x smaller. A name already taken gets
    the pid (`NAME.pid{pid}.jsonl[.gz]`, `rank{r}-{pid}.jsonl.gz`): nothing is overwritten.
    """
    path = Path(base)
    if is_record_name(path):
        suffix, stem = record_suffix(path), record_stem(path)
        named = path if not rank else path.with_name(f"{stem}.rank{rank}{suffix}")
        if named.exists():  # another process of the job without a rank of its own: never overwrite
            named = path.with_name(f"{record_stem(named)}.pid{pid}{suffix}")
        return named
    name = f"rank{rank if rank is not None else 0}{SUFFIX_GZ}"
    candidate = path / name
    if candidate.exists():  # a restarted rank, or a second non-rank process: never overwrite
        candidate = path / f"{record_stem(candidate)}-{pid}{SUFFIX_GZ}"
    return candidate


class RecordWriter:
    """Appends events to one file; only the agent's writer thread calls it.

    Unbuffered `os.write` on purpose: a process that forks while a buffered
    file holds unwritten data would flush that data twice (once per process).
    A file named `.jsonl.gz` is written compressed (pitstop/profiling/_recordfile.py),
    a `.jsonl` one as plain lines; both with consecutive steps in `steps` lines.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL: a record is never overwritten; the CLI checks first and fails with a clear line.
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o644)
        self._blocks = GzipBlocks() if path.name.endswith(SUFFIX_GZ) else None
        self._size = 0  # the file's size after this writer's last write

    def write_lines(self, lines: list[str]) -> None:
        if not lines:
            return
        data = ("\n".join(lines) + "\n").encode()
        # The lock and the size read cost ~10 us a write (median of 7x20,000 at load 18 on 2 cores), on the
        # writer thread, which writes every ~0.5 s.
        with _locked(self._fd):
            self._appended_since()
            out = data if self._blocks is None else self._blocks.compress(data)
            write_all(self._fd, out)
            self._size += len(out)

    def _appended_since(self) -> None:
        """Where another process appended since this writer's last write (the front's stall, read from outside
        while this process's training thread held the GIL: `append_events`), it closed this writer's open
        member first: the next lines start a member of their own. Called with the lock held."""
        size = os.fstat(self._fd).st_size
        if size != self._size and self._blocks is not None:
            self._blocks.abandon()
        self._size = size

    def write_events(self, events: list[Event]) -> None:
        """Write events in order: runs of consecutive steps as `steps` lines, losses to 9 digits."""
        self.write_lines(record_lines(events))

    def write(self, event: Event) -> None:
        self.write_events([event])

    def close(self) -> None:
        if self._fd >= 0:
            try:
                if self._blocks is not None:
                    with _locked(self._fd):
                        self._appended_since()
                        write_all(self._fd, self._blocks.finish())
            finally:
                os.close(self._fd)
                self._fd = -1


def append_end(path: Path, end: End) -> bool:
    """Append the `End` a process could not write (its launcher saw it die of a signal); False, and
    the file as it was, where its last line or member is not whole (a write torn by the kill).

    Only the launcher calls it, once the process is gone: nobody else writes the file. A compressed
    record's open member is closed first (`closing_tail`); the line goes in a member of its own.
    """
    return append_events(path, [end])


def append_events(path: Path, events: list[Event]) -> bool:
    """Append events the launcher saw about a process (its End, the stalls it read from outside while the
    agent was silent), as `append_end` does; False, and the file as it was, where it ends torn.

    The process may still run: its writer takes the same lock for each write (`RecordWriter`), and after
    this append starts a member of its own. Raises BlockingIOError where that writer holds the lock now
    (a write the training thread's hold on the GIL cut in two): nothing is appended then."""
    line = "".join(encode(e) + "\n" for e in events).encode()
    compressed = is_compressed(path)
    with open(path, "r+b") as handle, _locked(handle.fileno(), wait=False):
        size = os.fstat(handle.fileno()).st_size
        if compressed:
            closing = closing_tail(handle, size)
            if closing is None:
                return False
            start, tail = closing
            blocks = GzipBlocks()
            data = tail + blocks.compress(line) + blocks.finish()
        else:
            start = max(0, size - 1)
            handle.seek(start)
            if size and handle.read(1) != b"\n":
                return False
            data = line
        handle.seek(size)
        handle.write(data)
        handle.flush()
        handle.seek(start)
        written = handle.read()
        try:  # read back from the last member (or the last byte before the line): whole, and ending with it
            whole = gzip.decompress(written) if compressed else written
            if whole.endswith(b"\n" + line) or whole == line:
                return True
        except (OSError, EOFError, zlib.error):
            pass
        os.truncate(path, size)  # under the lock still: a live writer's next lines come after
        return False


@contextmanager
def _locked(fd: int, wait: bool = True) -> Iterator[None]:
    """An exclusive flock on a record file, for one write: the agent's writer and a front that appends to a
    live process's record (`append_events`) take turns. `wait` False: BlockingIOError where it is held."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX if wait else fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise
    except OSError:
        # A filesystem without flock (ENOLCK on some NFS and FUSE mounts): the record is still written, unlocked,
        # as before the front could append to a live record; losing the record over a lock would be worse.
        yield
        return
    try:
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)


def record_lines(events: list[Event]) -> list[str]:
    """The lines a record holds for `events`: each run of consecutive steps in `steps` lines.

    A loss read while steps wait for their line follows that line: it names its steps,
    and a loss every 32 steps had cut the lines to ~17 steps (a record 20% larger).
    Every other event keeps its place among the steps.
    """
    lines: list[str] = []
    steps: list[Step] = []
    losses: list[Loss] = []

    def flush() -> None:
        lines.extend(encode_steps(batch) for batch in batches(steps))
        lines.extend(encode_loss(loss) for loss in losses)
        steps.clear()
        losses.clear()

    for event in events:
        if type(event) is Step:
            steps.append(event)
        elif type(event) is Loss:
            losses.append(event)
        else:
            flush()
            lines.append(encode(event))
    flush()
    return lines


@dataclass
class ReadResult:
    """What a reader found besides the events."""

    torn: bool = False  # the last line was cut (a killed run)
    skipped: int = 0  # lines of kinds this version does not know


def first_line(path: Path) -> bytes:
    """The first line of a record file, plain or compressed (b"" when it has none yet)."""
    with open_record(path) as handle:
        lines = Lines.of(handle)
        return next(iter(lines.read()), (0, 0, b""))[2]


def iter_record(path: Path, result: ReadResult | None = None) -> Iterator[Event]:
    """Events of one record file, in order. Raises RecordError/SchemaError with the path."""
    for _, _, event in scan_record(path, result):
        yield event


def scan_record(path: Path, result: ReadResult | None = None, start: int = 0) -> Iterator[tuple[int, int, Event]]:
    """Events of one record file with the positions of each: (start, end, event).

    The positions let a replay come back to any event later (`RecordReader`) instead of
    holding the events: a 24-hour run at 10 ms steps is ~8.6 M steps. `start` (an
    event's position, from an index) reads on from there: what a record appended
    since its index was written needs, without the lines before it.
    """
    result = result if result is not None else ReadResult()
    handle = open_record(path)
    with handle:
        lines = Lines.of(handle)
        line_start, skip = split(start)
        lineno = 0
        resumed = start > 0
        first = not resumed
        for begin, end, raw in lines.read(line_start):
            lineno += 1
            if not raw.strip():
                continue
            try:
                events = decode_events(raw)
            except SchemaError as err:
                if "newer pitstop" in str(err):
                    raise SchemaError(f"{path}: {err}") from err
                where = f"line at {begin}" if resumed or lines.compressed else f"{lineno}"
                raise RecordError(f"{path}:{where}: corrupt record line ({err})") from err
            if not events:
                result.skipped += 1
                continue
            if first and not isinstance(events[0], Hello):
                raise RecordError(f"{path}: not a pitstop record (first event is not 'hello')")
            first = False
            last = len(events) - 1
            for k in range(skip, last + 1):
                yield position(begin, k), position(end) if k == last else position(begin, k + 1), events[k]
            skip = 0
        if lines.cut:
            result.torn = True  # the last line was cut (a killed run): stop quietly at the one before
        if first and not resumed:
            if lines.cut and lines.compressed and not lines.tail:
                raise RecordError(f"{path}: not a pitstop record (compressed data that does not decompress)")
            raise RecordError(f"{path}: empty record (the run wrote nothing)")


class RecordReader:
    """Reads events of a record file already scanned (`scan_record`) again, from their positions.

    `stop` is the end of the last event the scan read: a torn tail, or lines
    a still-running agent appended since, stay out of the replay.
    """

    def __init__(self, path: Path, stop: int) -> None:
        self.path = path
        self.stop = stop
        self.compressed = is_compressed(path)
        self._cache: MemberCache | None = None

    @contextmanager
    def cached(self) -> Iterator[None]:
        """Inside, each compressed member read is decompressed once (the last CACHED_MEMBERS are kept).

        For a pass that reads one stretch of the record several times (a restore reads each
        series on its own); outside one, nothing is held between reads.
        """
        if self._cache is not None or not self.compressed:
            yield
            return
        self._cache = MemberCache()
        try:
            yield
        finally:
            self._cache = None

    def events_from(self, start: int, kind: str | None = None, passing: int = 0) -> Iterator[tuple[int, int, Event]]:
        """(start, end, event) of each event from position `start` to `stop`; only `kind`'s when given.

        With `kind`, other lines are passed over by their prefix without decoding
        (`encode` writes `kind` first), which is what makes re-reading a window cheap.
        `passing`: the first that many events (of `kind`) are passed over, not yielded; a
        `steps` line wholly among them is not decoded (its `n` is at its start).
        """
        prefixes = _prefixes(kind)
        line_start, skip = split(start)
        with self._open() as handle:
            for begin, end, raw in Lines(handle, self.compressed, self._cache).read(line_start):
                if position(begin) >= self.stop:
                    return  # lines scanned after the reader was made (a live record), or a torn tail
                if prefixes and not raw.startswith(prefixes) and raw.startswith(b'{"kind":'):
                    skip = 0
                    continue
                if passing and position(end) <= self.stop:
                    n = _steps_in(raw)
                    if n is not None and n - skip <= passing:
                        passing -= n - skip
                        skip = 0
                        continue
                events = self._decode(raw, begin)
                last = len(events) - 1
                for k in range(skip, last + 1):
                    event = events[k]
                    stop = position(end) if k == last else position(begin, k + 1)
                    if stop > self.stop:
                        return
                    if kind is None or event.kind == kind:
                        if passing:
                            passing -= 1
                            continue
                        yield position(begin, k), stop, event
                skip = 0

    def events_at(self, positions: Iterable[int]) -> Iterator[Event]:
        """The events at `positions` (in that order)."""
        with self._open() as handle:
            cached, data = -1, b""
            for pos in positions:
                line, k = split(pos)
                if self.compressed:
                    member, at = in_member(line)
                    if member != cached:
                        cached, data = member, one_member(handle, member, self._cache)
                    nl = data.find(b"\n", at)
                    lines = Lines(handle, True, self._cache)
                    raw = data[at:nl + 1] if nl >= 0 else next(iter(lines.read(line)), (0, 0, b""))[2]
                    cached = -1 if nl < 0 else cached  # the handle moved: the next read starts afresh
                else:
                    handle.seek(line)
                    raw = handle.readline()
                events = self._decode(raw, line)
                if k < len(events):
                    yield events[k]

    def _open(self) -> BinaryIO:
        try:
            return open(self.path, "rb")
        except OSError as err:
            raise RecordError(f"cannot read record {self.path}: {err.strerror or err}") from err

    def _decode(self, raw: bytes, offset: int) -> list[Event]:
        if not raw.strip():
            return []
        try:
            return decode_events(raw)
        except SchemaError as err:  # it decoded when scanned: the file was changed since
            raise RecordError(f"{self.path}: changed while it was replayed (line at {offset}: {err})") from err


_STEPS_HEAD = re.compile(rb'\{"kind":"steps","n":(\d+),')


def _steps_in(raw: bytes) -> int | None:
    """The steps a `steps` line holds, read from its start without decoding it; None for another line."""
    head = _STEPS_HEAD.match(raw)
    return int(head.group(1)) if head is not None else None


def _prefixes(kind: str | None) -> tuple[bytes, ...]:
    if kind is None:
        return ()
    if kind == Step.kind:
        return (b'{"kind":"step"', b'{"kind":"steps"')
    return (f'{{"kind":"{kind}"'.encode(),)


def record_files(target: Path) -> list[Path]:
    """The record files a user means by `target`: a file, or every *.jsonl in a directory."""
    if target.is_dir():
        files = sorted([*target.glob("*.jsonl"), *target.glob("*" + SUFFIX_GZ)])
        if not files:
            raise RecordError(f"no record files (*.jsonl, *.jsonl.gz) in {target}")
        return files
    if not target.exists():
        raise RecordError(f"no record at {target}")
    return [target]


def read_records(target: Path) -> list[list[Event]]:
    """Every event of every file `target` names: one list per process."""
    return [list(iter_record(p)) for p in record_files(target)]
