"""The event schema: every kind round-trips through JSON lines; versions are enforced."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import pytest

from pitstop.errors import SchemaError
from pitstop.events import (
    EVENT_TYPES,
    SCHEMA_VERSION,
    Applied,
    Rank,
    Copies,
    DataLoaderInfo,
    End,
    Gpu,
    Hello,
    KernelStat,
    Loss,
    Model,
    Note,
    OpStat,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Frame,
    Stall,
    Step,
    ThreadStack,
    decode,
    encode,
)

HELLO = Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="s1", pid=42, ppid=1, host="h",
              argv=["python", "train.py"], cwd="/tmp", started=1.5, python="3.11.7", rank=1, world_size=2)

ALL = [
    HELLO,
    Runtime(t=1.0, torch_version="2.13.0", cuda_version=None, device_type="cpu", usable_cpus=2,
            unavailable={"gpu": "CPU build"}),
    Step(t=2.0, step=3, wall=0.1, data_wait=0.04, samples=32, mem_allocated=10, host_rss=100),
    Loss(t=2.0, steps=[1, 2], values=[0.5, None], nonfinite=[2]),
    Sample(t=3.0, gpus=[Gpu(index=0, name="H100", util=97.0, mem_used=1, mem_total=2,
                            unavailable={"pcie_tx_kbs": "not supported"})],
           procs=[Proc(pid=1, role="main", cpu=99.0, rss=5), Proc(pid=2, role="worker", cpu=None, rss=6)],
           system_cpu=50.0),
    DataLoaderInfo(t=1.0, id=1, num_workers=2, batch_size=32, pin_memory=True, persistent_workers=False,
                   prefetch_factor=2, overrides={"num_workers": 2}, skipped={"batch_size": "custom sampler"}),
    Applied(t=1.0, applied={"amp": "bf16 on cuda"}, skipped={"cudnn_benchmark": "no CUDA"}),
    Model(t=1.0, conv2d=3, optimizers=2, grad_scaler=True),
    ProfileWindow(t=4.0, step_start=10, step_end=15, device="cpu",
                  ops=[OpStat(name="aten::addmm", calls=5, self_us=10.0, total_us=12.0)],
                  kernels=[KernelStat(name="k", calls=1, total_us=2.0, mean_us=2.0)],
                  copies=Copies(h2d_bytes=100, h2d_pageable=1), syncs_per_step={"aten::item": 1.0}),
    Rank(t=1.0, rank=1, world_size=2, local_rank=1),
    Note(t=1.0, level="warn", source="sampler", message="NVML unavailable"),
    Stall(t=8.0, phase="start", step=19, since_s=80.0, threshold_s=60.0,
          stacks=[ThreadStack(pid=42, role="main", frames=[Frame("D.__getitem__", "/w/hang.py", 11, code="x()"),
                                                           Frame("sleep", "/usr/lib/python3.11/x.py", 3, library=True)],
                              state="D", wchan="nfs_wait")],
          notes=["py-spy is not installed"]),
    End(t=9.0, steps=100, dropped=0, exit_code=0),
]


def test_every_kind_is_covered() -> None:
    assert {type(e).kind for e in ALL} == set(EVENT_TYPES)


@pytest.mark.parametrize("event", ALL, ids=lambda e: e.kind)
def test_round_trip(event: object) -> None:
    line = encode(event)  # type: ignore[arg-type]
    assert "\n" not in line
    assert json.loads(line)["kind"] == event.kind  # type: ignore[attr-defined]
    assert line.startswith('{"kind":"')  # the socket server classifies by this prefix
    assert decode(line) == event


def test_nonfinite_floats_become_null_not_invalid_json() -> None:
    line = encode(Step(t=1.0, step=0, wall=math.inf, data_wait=math.nan))
    assert json.loads(line)["wall"] is None


def test_unknown_kind_is_skipped_and_unknown_fields_ignored() -> None:
    assert decode('{"kind":"from-the-future","x":1}') is None
    step = decode('{"kind":"step","t":1,"step":0,"wall":0.1,"data_wait":0,"new_field":7}')
    assert isinstance(step, Step) and step.wall == 0.1


def test_newer_schema_is_refused_with_a_clear_reason() -> None:
    line = encode(HELLO).replace(f'"schema":{SCHEMA_VERSION}', f'"schema":{SCHEMA_VERSION + 1}')
    with pytest.raises(SchemaError, match="newer pitstop"):
        decode(line)


@pytest.mark.parametrize("line", ["not json", "[1, 2]", '{"kind":"step","t":1}'])
def test_malformed_lines_raise_schema_error(line: str) -> None:
    with pytest.raises(SchemaError):
        decode(line)


def _twin(event: Any) -> Any:
    """The same fields in a class that `@dataclass(frozen=True)` made whole: its repr, == and hash as reference."""
    names = [f.name for f in dataclasses.fields(event)]
    twin = dataclasses.make_dataclass(type(event).__name__, [(name, Any) for name in names], frozen=True)
    return twin(**{name: getattr(event, name) for name in names})


def _hash(value: Any) -> int | str:
    try:
        return hash(value)
    except TypeError as err:  # a list or dict field: unhashable, as a frozen dataclass with one is
        return str(err)


@pytest.mark.parametrize("event", ALL, ids=lambda e: e.kind)
def test_events_read_compare_and_hash_as_frozen_dataclasses_with_methods_generated_once(event: Any) -> None:
    # Generated per class (21), @dataclass's repr, eq and hash cost every pitstop process 15 ms of its start
    # (43 -> 28 ms of this module's import): the classes share one of each (events._Shared).
    from pitstop.events import _Shared

    nested = [value for value in vars(event).values() if dataclasses.is_dataclass(value)]
    nested += [item for value in vars(event).values() if type(value) is list for item in value
               if dataclasses.is_dataclass(item)]
    for obj in [event, *nested]:
        kind = type(obj)
        assert (kind.__repr__, kind.__eq__, kind.__hash__) == (_Shared.__repr__, _Shared.__eq__, _Shared.__hash__)
        twin = _twin(obj)
        assert repr(obj) == repr(twin) and _hash(obj) == _hash(twin)
        copy = dataclasses.replace(obj)
        assert copy == obj and not copy != obj and obj != twin and (obj == 1) is False
        with pytest.raises(dataclasses.FrozenInstanceError):
            obj.t = 0.0  # type: ignore[misc]
    if dataclasses.fields(event)[1].type in ("int", "float", "str"):
        other = dataclasses.replace(event, **{dataclasses.fields(event)[1].name: None})
        assert other != event and (event == other) is False


def test_compute_is_wall_minus_data_wait() -> None:
    assert Step(t=0, step=0, wall=0.1, data_wait=0.03).compute == pytest.approx(0.07)
