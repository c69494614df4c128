"""Provides the lines of a record file by position: plain JSON lines (`.jsonl`), or the same lines gzip-compressed in blocks (`.jsonl.gz`).

A compressed record is a series of gzip members of at most BLOCK bytes of
lines each (as BGZF does for genomics data): `gzip -dc` and Python's `gzip`
read it as one file, and a reader can start at any member. The writer
compresses what each write brings and flushes it (Z_SYNC_FLUSH), so the lines
are on disk, readable, as soon as they are written; a run killed with SIGKILL
leaves a member without its end, read up to the last whole line in it.

A line's position is one int that grows with the file: its byte offset in a
plain file; (offset of its member << 17) | offset in the member's lines in a
compressed one (a line may run on into the next members). Positions of events
add the event's place in its line (a `steps` line holds many): LINE_BITS.
"""

from __future__ import annotations

import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from pitstop.errors import RecordError

GZIP_MAGIC = b"\x1f\x8b"
SUFFIX_GZ = ".jsonl.gz"
# 64 KiB of lines a member: a seek decompresses at most that (~0.2 ms). Measured on a real 10 ms loop's
# record, 1 MiB members would be 2% smaller.
BLOCK = 1 << 16
_IN_BLOCK_BITS = 17  # offsets 0..BLOCK inclusive (a line may end exactly at its member's end)
LINE_BITS = 9  # an event's place in its line: a `steps` line holds at most 512 steps
_READ = 1 << 16
# The writer compresses each pass's lines (~6 KB of ~200 steps of 1 ms) on its thread. On the 19 passes
# of a 1 ms workload's record (median of 7): level 6, zlib's default, 637 us of CPU a pass for 40,030
# bytes; level 3 203 us for 42,870; level 1 110 us for 45,996. Level 3 keeps the record within 7-12% of
# level 6's size (a 10 ms workload's 3,000 steps: 108,460 -> 116,173 bytes; an mnist run's 17,372 ->
# 19,479) for a third of its CPU; level 1 would add 14-23% for 0.5 us a step less.
_LEVEL = 3
# Members a MemberCache keeps (64 KiB of lines each): a job rank's restore reads its last ~30 s
# (steps, then samples, profiler windows and losses, each series on its own) from a few members.
CACHED_MEMBERS = 32


def position(line: int, k: int = 0) -> int:
    """The position of the k-th event of the line at line position `line`."""
    return (line << LINE_BITS) | k


def split(pos: int) -> tuple[int, int]:
    """(line position, the event's place in its line) of an event position."""
    return pos >> LINE_BITS, pos & ((1 << LINE_BITS) - 1)


def is_compressed(path: Path) -> bool:
    """Whether `path` holds gzip members (by its first bytes, whatever its name)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(2) == GZIP_MAGIC
    except OSError:
        return False


def in_member(line: int) -> tuple[int, int]:
    """(file offset of its member, offset in the member's lines) of a compressed record's line position."""
    return line >> _IN_BLOCK_BITS, line & ((1 << _IN_BLOCK_BITS) - 1)


def file_offset(pos: int, compressed: bool) -> int:
    """The byte of the file an event position starts in (for a compressed file, its member's start)."""
    line = pos >> LINE_BITS
    return line >> _IN_BLOCK_BITS if compressed else line


class GzipBlocks:
    """Compresses lines into gzip members of at most BLOCK bytes, each write flushed (writer side).

    Returns the bytes to append; the caller writes them with one `os.write`.
    """

    def __init__(self, level: int = _LEVEL) -> None:
        self.level = level
        self._zip: zlib._Compress | None = None
        self._in_block = 0

    def compress(self, data: bytes) -> bytes:
        out = []
        view = memoryview(data)
        while view:
            if self._zip is None:
                self._zip = zlib.compressobj(self.level, zlib.DEFLATED, 31)
                self._in_block = 0
            piece = view[:BLOCK - self._in_block]
            out.append(self._zip.compress(piece))
            self._in_block += len(piece)
            view = view[len(piece):]
            if self._in_block == BLOCK:
                out.append(self._zip.flush(zlib.Z_FINISH))
                self._zip = None
        if self._zip is not None:
            out.append(self._zip.flush(zlib.Z_SYNC_FLUSH))
        return b"".join(out)

    def abandon(self) -> None:
        """Forget the open member: another writer closed it (`closing_tail`) and appended after it."""
        self._zip = None

    def finish(self) -> bytes:
        """The end of the open member (its CRC and length): a record closed by its run ends whole."""
        if self._zip is None:
            return b""
        tail = self._zip.flush(zlib.Z_FINISH)
        self._zip = None
        return tail


def open_record(path: Path) -> BinaryIO:
    try:
        return open(path, "rb")
    except FileNotFoundError as err:
        raise RecordError(f"no record at {path}") from err
    except IsADirectoryError as err:
        raise RecordError(f"{path} is a directory, not a record file") from err
    except OSError as err:
        raise RecordError(f"cannot read record {path}: {err.strerror or err}") from err


class MemberCache:
    """The lines of the last CACHED_MEMBERS whole members read, by file offset, with where the next one starts.

    Restoring a rank reads each series on its own, so the same members were decompressed
    once a series: 7.6 ms of decompression a rank (under cProfile) of benchmarks/replay_memory.py's
    128-rank job, where the whole record decompresses in 4.7 ms; restoring its 128 ranks took 3.3 s
    of CPU without this cache and 2.7 s with it. Only members read to their end are
    kept (a record only grows past them); a reader holds one while it restores (`RecordReader.cached`).
    """

    def __init__(self, size: int = CACHED_MEMBERS) -> None:
        self.size = size
        self._members: OrderedDict[int, tuple[bytes, int]] = OrderedDict()

    def get(self, member: int) -> tuple[bytes, int] | None:
        """(the member's lines, the file offset of the next member), or None when not kept."""
        hit = self._members.get(member)
        if hit is not None:
            self._members.move_to_end(member)
        return hit

    def put(self, member: int, data: bytes, following: int) -> None:
        self._members[member] = (data, following)
        self._members.move_to_end(member)
        while len(self._members) > self.size:
            self._members.popitem(last=False)


class Lines:
    """The whole lines of one record file from a line position on: (start, end, bytes with their newline).

    `cut` is set when the file ended inside a line, or inside compressed data that
    does not decompress (what a killed writer leaves): the lines before it are read.
    `cache`: members decompressed before by this reader, used instead of decompressing them again.
    """

    def __init__(self, handle: BinaryIO, compressed: bool, cache: MemberCache | None = None) -> None:
        self.handle = handle
        self.compressed = compressed
        self.cache = cache
        self.cut = False
        self.tail = b""  # the cut line's bytes

    @classmethod
    def of(cls, handle: BinaryIO) -> Lines:
        """The lines of an open record file, plain or compressed by its first bytes."""
        compressed = handle.read(2) == GZIP_MAGIC
        handle.seek(0)
        return cls(handle, compressed)

    def read(self, start: int = 0) -> Iterator[tuple[int, int, bytes]]:
        if not self.compressed:
            yield from self._plain(start)
        else:
            yield from self._gzip(start)

    def _plain(self, start: int) -> Iterator[tuple[int, int, bytes]]:
        handle = self.handle
        handle.seek(start)
        offset = start
        for raw in handle:
            begin, offset = offset, offset + len(raw)
            if not raw.endswith(b"\n"):
                self.cut, self.tail = True, raw
                return
            yield begin, offset, raw

    def _gzip(self, start: int) -> Iterator[tuple[int, int, bytes]]:
        member, skip = in_member(start)
        carry = b""
        carry_start = 0
        for base, data in self.members(member):
            if skip:
                data, first = data[skip:], skip
                skip = 0
            else:
                first = 0
            at = 0
            while True:
                nl = data.find(b"\n", at)
                if nl < 0:
                    break
                begin = (base << _IN_BLOCK_BITS) | (first + at)
                if carry:
                    line, begin, carry = carry + data[:nl + 1], carry_start, b""
                else:
                    line = data[at:nl + 1]
                at = nl + 1
                yield begin, (base << _IN_BLOCK_BITS) | (first + at), line
            if at < len(data):
                if not carry:
                    carry_start = (base << _IN_BLOCK_BITS) | (first + at)
                carry += data[at:]
        if carry:
            self.cut, self.tail = True, carry

    def members(self, member: int) -> Iterator[tuple[int, bytes]]:
        """(file offset of each member, its lines) from the member at `member` to the end of the file."""
        handle = self.handle
        handle.seek(member)
        pending = b""
        base = member
        cache = self.cache
        while True:
            hit = cache.get(base) if cache is not None else None
            if hit is not None:
                data, base_next = hit
                if data:
                    yield base, data
                base, pending = base_next, b""
                handle.seek(base)
                continue
            unzip = zlib.decompressobj(31)
            out = []
            used = 0  # compressed bytes of this member consumed
            while not unzip.eof:
                chunk = pending or handle.read(_READ)
                pending = b""
                if not chunk:
                    break
                try:
                    out.append(unzip.decompress(chunk))
                except zlib.error:
                    self.cut = True  # not gzip from here on: what a torn write or a foreign tail leaves
                    if out:
                        yield base, b"".join(out)
                    return
                used += len(chunk) - len(unzip.unused_data)
                pending = unzip.unused_data
            data = b"".join(out)
            if cache is not None and unzip.eof:
                cache.put(base, data, base + used)  # before the yield: a caller may stop at the first member
            if data:
                yield base, data
            if not unzip.eof:
                return  # the open member of a live run, or one a killed run left: read to its last flush
            base += used
            if not pending:
                pending = handle.read(_READ)
                if not pending:
                    return


def one_member(handle: BinaryIO, member: int, cache: MemberCache | None = None) -> bytes:
    """The lines the member at file offset `member` holds (to its last flush when it is open)."""
    return next(Lines(handle, True, cache).members(member), (member, b""))[1]


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


# The end of a deflate stream after a sync flush: an empty final block (fixed Huffman, end-of-block).
_EMPTY_FINAL_BLOCK = b"\x03\x00"
_SYNC_MARK = b"\x00\x00\xff\xff"
# A member holds at most BLOCK bytes of lines; compressed, far less: its start is in the last 256 KiB.
_TAIL_SCAN = 1 << 18


def closing_tail(handle: BinaryIO, size: int) -> tuple[int, bytes] | None:
    """(where its last member starts, the bytes that make a compressed record whole again after its
    writer died mid-member).

    b"" when it already ends with a whole member; None when its end is not one a writer
    left between two writes (a torn write, foreign bytes): then nothing may be appended.
    The open member's deflate stream ends at a sync flush (`GzipBlocks.compress`), so an
    empty final block and the gzip trailer (CRC-32 and length of its lines) close it.
    """
    start = max(0, size - _TAIL_SCAN)
    handle.seek(start)
    tail = handle.read(size - start)
    at = len(tail)
    while True:
        at = tail.rfind(GZIP_MAGIC + b"\x08", 0, at)
        if at < 0:
            return None
        unzip = zlib.decompressobj(31)
        try:
            data = unzip.decompress(tail[at:])
        except zlib.error:
            continue  # not a member's start (the bytes happened to look like one)
        if unzip.unused_data:
            continue  # a whole member that more bytes follow: the open one starts later (or not at all)
        if unzip.eof:
            return start + at, b""
        if not (data.endswith(b"\n") and tail.endswith(_SYNC_MARK)):
            return None
        return start + at, _EMPTY_FINAL_BLOCK + (zlib.crc32(data) & 0xFFFFFFFF).to_bytes(4, "little") \
            + (len(data) & 0xFFFFFFFF).to_bytes(4, "little")
