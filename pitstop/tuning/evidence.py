"""Provides what a trial's own findings name: each knob a finding says confirms it, at the value its fix suggests.

The baseline's record goes through the same rules `pitstop run` shows
(`pitstop.analysis.advise`), so the tuner measures first the knob the run's
evidence names: a Lightning run whose summary said "data wait 48% ... fix
num_workers=1" spent a 4-trial budget on the baseline and amp=bf16, and never
tried workers, because the tuner judged the loader with its own arithmetic.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pitstop.analysis import RunState, advise
from pitstop.errors import PitstopError
from pitstop.profiling.record import ReadResult, iter_record, siblings

# The value a finding's fix line suggests, per knob (the first match in the fix text).
_VALUE = {
    "num_workers": re.compile(r"\bnum_workers=(\d+)"),
    "batch_size": re.compile(r"\bbatch_size=(\d+)"),
    "prefetch_factor": re.compile(r"\bprefetch_factor=(\d+)"),
    "threads": re.compile(r"set_num_threads\((\d+)\)"),
}
_SWITCHES = ("pin_memory", "persistent_workers", "cudnn_benchmark", "channels_last")


def suggested(knob: str, fix: str) -> Any:
    """The value of `knob` that a fix suggests, or None when it names none."""
    if knob in _VALUE:
        found = _VALUE[knob].search(fix)
        return int(found.group(1)) if found else None
    if knob in _SWITCHES:
        return True
    if knob == "amp":
        return "fp16" if re.search(r"float16|fp16", fix) and "bfloat16" not in fix else "bf16"
    return None


def evidence_of(record: Path, warmup: int) -> dict[str, Any]:
    """Knob -> suggested value, most important finding first; empty when the record cannot be read."""
    run = RunState()
    files = [record, *siblings(record, "rank")]
    try:
        for event in iter_record(files[1] if len(files) > 1 else record, ReadResult()):
            run.add(event)
    except PitstopError:
        return {}
    return named_knobs(advise(run, warmup).findings)


def named_knobs(findings: Any) -> dict[str, Any]:
    """Knob -> the value its finding's fix suggests, the first finding naming it winning; a finding
    may name several (`num_workers,threads`: workers with the threads beside them)."""
    out: dict[str, Any] = {}
    for finding in findings:
        for knob in finding.knob.split(",") if finding.knob else ():
            if knob in out:
                continue
            value = suggested(knob, finding.fix)
            if value is not None:
                out[knob] = value
    return out
