"""Provides the CUDA Flight Recorder's view of a stall: which collective this rank is in, from torch's own dump.

Where a job runs NCCL with torch's Flight Recorder on
(`TORCH_NCCL_TRACE_BUFFER_SIZE` > 0), torch keeps a ring of the latest
collectives of each process group with their state. When a stall is
detected the stall watch takes its dump in-process
(`torch._C._distributed_c10d._dump_nccl_trace`, a pickled dict, the format
`torch.distributed.flight_recorder` reads: `entries` of `profiling_name`
"nccl:all_reduce", `collective_seq_id`, `state` scheduled / started /
completed, `process_group` [name, description], `input_sizes`,
`time_created_ns`) and says it in a few lines: the collectives not completed
(the one this rank waits in) and the last one completed. Ranks whose
sequence numbers differ are the ones that did not reach the same collective.
Gloo and the CPU keep no such record: then there is nothing to say.
"""

from __future__ import annotations

import os
import pickle
import sys
import time
from collections.abc import Mapping
from typing import Any

ENV = "TORCH_NCCL_TRACE_BUFFER_SIZE"
# Lines kept: the open collectives (at most this many) and the last completed one.
MAX_OPEN = 3


def enabled(environ: Mapping[str, str] = os.environ) -> bool:
    """The Flight Recorder is on: a buffer size above 0."""
    try:
        return int(environ.get(ENV, "0") or "0") > 0
    except ValueError:
        return False


def _entry_text(e: Mapping[str, Any], now_ns: int | None) -> str:
    name = str(e.get("profiling_name") or "?")
    seq = e.get("collective_seq_id")
    if e.get("is_p2p"):
        seq = e.get("p2p_seq_id", seq)
    group = e.get("process_group")
    pg = f", group {group[0]}" + (f" ({group[1]})" if len(group) > 1 and group[1] else "") \
        if isinstance(group, (list, tuple)) and group else ""
    sizes = e.get("input_sizes")
    size = f", input sizes {sizes}" if sizes else ""
    age = ""
    created = e.get("time_created_ns")
    # Wall-clock nanoseconds (c10::getTime); a value below 2001's would be another clock: no age then.
    if now_ns is not None and isinstance(created, int) and created > 10**18:
        age = f", queued {max(0.0, (now_ns - created) / 1e9):.0f} s ago"
    return f"{name} (seq {seq}, {e.get('state', '?')}{pg}{size}{age})"


def summarize(dump: Mapping[str, Any], now_ns: int | None = None) -> list[str]:
    """A Flight Recorder dump as lines: the collectives not completed, the last completed one."""
    entries = [e for e in dump.get("entries") or [] if isinstance(e, Mapping)]
    if not entries:
        return ["flight recorder: no collective recorded"]
    open_ = [e for e in entries if e.get("state") != "completed"]
    done = [e for e in entries if e.get("state") == "completed"]
    out = []
    if open_:
        first = open_[0]
        out.append(f"flight recorder: in {_entry_text(first, now_ns)}")
        out.extend(f"flight recorder: then {_entry_text(e, now_ns)}" for e in open_[1:MAX_OPEN])
        if len(open_) > MAX_OPEN:
            out.append(f"flight recorder: {len(open_) - MAX_OPEN} more not completed")
    else:
        out.append("flight recorder: every recorded collective completed (the wait is not in one)")
    if done:
        out.append(f"flight recorder: last completed {_entry_text(done[-1], None)}")
    return out


def take() -> list[str]:
    """This process's dump, summarised; [] where the Flight Recorder is off or torch has no NCCL here."""
    if not enabled():
        return []
    torch = sys.modules.get("torch")
    if torch is None:
        return []
    try:
        dump_fn = torch._C._distributed_c10d._dump_nccl_trace
    except AttributeError:
        return [f"flight recorder: {ENV} is set, but this torch has no NCCL (no dump to take)"]
    try:
        raw = dump_fn(includeCollectives=True, includeStackTraces=False, onlyActive=False)
        dump = pickle.loads(raw)
    except Exception as err:  # noqa: BLE001 - said in the stall event
        return [f"flight recorder: dump failed: {type(err).__name__}: {err}"]
    if not isinstance(dump, Mapping):
        return ["flight recorder: the dump is not a dict (an unknown format)"]
    return summarize(dump, time.time_ns())
