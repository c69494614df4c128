"""Provides the index file saved beside a record (`rank0.jsonl.index`): a StreamIndex, written atomically, checked before use.

Indexing a 24-hour record at 10 ms steps means decoding ~9 M lines: 186 s
before a viewer's first screen, 93 s for `view --summary`. The index file keeps
what that pass learned (checkpoints of the folded RunState, where the series
events lie), so the next reader restores the last checkpoint, reads back one
window of recent history and folds only the lines appended since.

The record is the truth, never the index: an index is used only when the
record still starts with the bytes it was built from and holds, unchanged, the
bytes where it stopped (CRC-32 of both ends of what it covers); any mismatch,
a torn or foreign file, or an index of another pitstop version is set aside
and the record indexed again (the 256 bytes before each checkpoint are checked
too). A gzip-compressed JSON document, written to a
temporary file and renamed over the old one, so a reader never sees half an index.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import zlib
from array import array
from pathlib import Path
from typing import Any

from pitstop._version import __version__
from pitstop.analysis import SERIES, RunState
from pitstop.profiling._recordfile import file_offset, is_compressed
from pitstop.recorded._index import Checkpoint, SavedState, StreamIndex

# 2: positions of events (compressed records, `steps` lines), not bytes; 3: the machine's CPU folded
# over the samples the process's is (an index of 2 restored a different mean than a pass over the record);
# 4: the training part of steps marked eval folded into the totals (`RunState.eval_train_wall`);
# 5: the steps whose loss was read (`RunState.losses_read`); 6: where each new optimizer's model
# starts (`RunState.model_starts`); 7: the second optimizer's non-finite steps (`RunState.other_nonfinite_steps`).
FORMAT = 7
SUFFIX = ".index"
_PROBE = 4096  # bytes of the record checked at each end of what an index covers


def index_path(record: Path) -> Path:
    """Where the index of `record` lives: beside it, `NAME.jsonl.index`."""
    return record.with_name(record.name + SUFFIX)


def _covered(record: Path, stop: int) -> int | None:
    """The bytes of the record an index covering position `stop` checks: [0, this).

    A plain record's up to `stop`. A compressed one's up to its size now: the events
    up to `stop` lie in compressed bytes before it, which a writer never changes
    (sync-flushed deflate output is only ever appended to).
    """
    if not is_compressed(record):
        return file_offset(stop, False)
    try:
        return record.stat().st_size
    except OSError:
        return None


def _fingerprint(record: Path, stop: int) -> tuple[int, int] | None:
    """CRC-32 of the record's first bytes and of the bytes just before byte `stop`; None if it is shorter."""
    try:
        with open(record, "rb") as handle:
            head = handle.read(min(_PROBE, stop))
            handle.seek(max(0, stop - _PROBE))
            tail = handle.read(stop - max(0, stop - _PROBE))
    except OSError:
        return None
    if len(head) != min(_PROBE, stop) or len(tail) != stop - max(0, stop - _PROBE):
        return None
    return zlib.crc32(head), zlib.crc32(tail)


def _probes(record: Path, positions: list[int]) -> list[int] | None:
    """CRC-32 of the 256 bytes before each position (each checkpoint's): a record changed between them shows."""
    out = []
    compressed = is_compressed(record)
    positions = [file_offset(pos, compressed) for pos in positions]
    try:
        with open(record, "rb") as handle:
            for pos in positions:
                handle.seek(max(0, pos - 256))
                out.append(zlib.crc32(handle.read(pos - max(0, pos - 256))))
    except OSError:
        return None
    return out


def save(index: StreamIndex, record: Path, stop: int) -> bool:
    """Write `index` of `record` (covering bytes [0, stop)) beside it; False when it cannot (read-only dir)."""
    covered = _covered(record, stop)
    fingerprint = None if covered is None else _fingerprint(record, covered)
    probes = _probes(record, [ck.pos for ck in index.checkpoints[1:]])
    if fingerprint is None or probes is None or index.total == 0:
        return False
    try:
        doc: dict[str, Any] = {
            "format": FORMAT, "pitstop": __version__, "stop": stop, "bytes": covered, "crc": list(fingerprint),
            "probes": probes,
            "series": list(SERIES), "strides": list(index.strides), "every": index.every,
            "first_t": index.first_t, "total": index.total,
            "offsets": [_pack(a) for a in index.offsets], "profile_times": _pack(index.profile_times),
            "checkpoints": _checkpoints(index.checkpoints[1:]),
        }
    except TypeError:  # a RunState field it cannot save: no index rather than a wrong one
        return False
    target = index_path(record)
    temp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        temp.write_bytes(gzip.compress(json.dumps(doc, separators=(",", ":")).encode(), compresslevel=1))
        os.replace(temp, target)
    except OSError:
        temp.unlink(missing_ok=True)
        return False
    return True


def _checkpoints(checkpoints: list[Checkpoint]) -> list[dict[str, Any]]:
    """Each checkpoint with only the RunState fields that changed since the one before (most stay)."""
    out = []
    previous: dict[str, str] = {}
    for ck in checkpoints:
        state = ck.state.to_checkpoint()
        changed = {}
        for name, value in state.items():
            text = json.dumps(value, separators=(",", ":"))
            if previous.get(name) != text:
                changed[name] = value
                previous[name] = text
        out.append({"t": ck.t, "fed": ck.fed, "pos": ck.pos, "last_t": ck.last_t,
                    "counts": list(ck.counts), "state": changed})
    return out


def load(index: StreamIndex, record: Path) -> bool:
    """Fill a fresh `index` from the index file beside `record`; False when there is none to trust."""
    try:
        doc = json.loads(gzip.decompress(index_path(record).read_bytes()))
    except (OSError, EOFError, ValueError, zlib.error):
        return False
    try:
        if doc["format"] != FORMAT or doc["pitstop"] != __version__ or doc["series"] != list(SERIES):
            return False
        if len(doc["strides"]) != len(SERIES):
            return False
        stop = int(doc["stop"])
        if _fingerprint(record, int(doc["bytes"])) != tuple(doc["crc"]):
            return False  # the record changed, or is another one: it is the truth
        state: dict[str, Any] = {}
        checkpoints = []
        for item in doc["checkpoints"]:
            state.update(item["state"])
            checkpoints.append(Checkpoint(float(item["t"]), int(item["fed"]), int(item["pos"]), item["last_t"],
                                          tuple(item["counts"]), SavedState(dict(state))))
        offsets = [_unpack(text, "q") for text in doc["offsets"]]
        profile_times = _unpack(doc["profile_times"], "d")
    except (KeyError, TypeError, ValueError, AttributeError):
        return False
    if not checkpoints or checkpoints[-1].pos != stop or len(offsets) != len(SERIES):
        return False
    if set(checkpoints[0].state.to_checkpoint()) != _state_fields():
        # Saved by a RunState with other fields (a FORMAT not bumped, a build between versions): restoring
        # its checkpoint raised ValueError out of `view --summary` once RunState gained a field.
        return False
    if _probes(record, [ck.pos for ck in checkpoints]) != doc.get("probes"):
        return False
    index.strides = tuple(int(s) for s in doc["strides"])
    index.first_t = doc["first_t"]
    index.offsets, index.profile_times = offsets, profile_times
    index.checkpoints.extend(checkpoints)
    return True


def _state_fields() -> set[str]:
    """The fields a checkpoint of this pitstop's RunState saves (the first checkpoint saves every one)."""
    return set(RunState().__dict__)


def _pack(values: array) -> str:  # type: ignore[type-arg]
    return base64.b64encode(values.tobytes()).decode()


def _unpack(text: str, typecode: str) -> array:  # type: ignore[type-arg]
    values = array(typecode)
    values.frombytes(base64.b64decode(text))
    return values
