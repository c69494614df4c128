"""Malformed records: every decode error is one line naming file and line, never a traceback (issue 13, seam 9)."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from pitstop.cli import main
from pitstop.errors import SchemaError
from pitstop.events import (
    Copies,
    DataLoaderInfo,
    End,
    Event,
    Gpu,
    Hello,
    KernelStat,
    Loss,
    Model,
    Note,
    OpStat,
    Proc,
    ProfileWindow,
    Rank,
    Runtime,
    Sample,
    Step,
    decode,
    encode,
)

SEED = 13
CASES = 150
# Values of every JSON type: a mutation swaps a field's value for one of another type.
OTHER_TYPES: list[Any] = ["x", 7, 2.5, True, None, [1], {"a": 1}]


def valid_record() -> list[Event]:
    """A short run with every kind of event, nested objects included."""
    events: list[Event] = [
        Hello(schema=1, pitstop_version="0.1.0", session="s1", pid=42, ppid=1, host="h", argv=["python", "t.py"],
              cwd="/tmp", started=1.0, python="3.11.7", rank=0, world_size=1, script="t.py"),
        Runtime(t=1.1, torch_version="2.13.0", cuda_version=None, device_type="cpu", cpu_count=2, usable_cpus=2,
                unavailable={"gpu": "CPU build"}),
        DataLoaderInfo(t=1.2, id=0, num_workers=2, batch_size=32, pin_memory=False, persistent_workers=False,
                       prefetch_factor=2, overrides={"num_workers": 2}, skipped={"batch_size": "custom sampler"}),
        Model(t=1.3, conv2d=2, optimizers=1),
        Rank(t=1.3, rank=0, world_size=1, local_rank=0),
    ]
    t = 2.0
    for i in range(12):
        t += 0.1
        events.append(Step(t=t, step=i, wall=0.1, data_wait=0.02 + 0.001 * i, samples=32, host_rss=100 << 20, loader=0))
        if i % 4 == 3:
            events.append(Sample(t=t, gpus=[Gpu(index=0, name="H100", util=90.0, mem_used=1 << 30, mem_total=8 << 30,
                                                unavailable={"pcie_tx_kbs": "not supported"})],
                                 procs=[Proc(pid=42, role="main", cpu=99.0, rss=5 << 20),
                                        Proc(pid=43, role="worker", cpu=20.0, rss=1 << 20, loader=0)],
                                 system_cpu=50.0))
    events += [
        Loss(t=t, steps=[10, 11], values=[0.5, None], nonfinite=[11]),
        ProfileWindow(t=t, step_start=5, step_end=8, device="cpu", duration_s=0.3,
                      ops=[OpStat(name="aten::addmm", calls=5, self_us=10.0, total_us=12.0)],
                      kernels=[KernelStat(name="k", calls=1, total_us=2.0, mean_us=2.0)],
                      copies=Copies(h2d_bytes=100, h2d_pageable=1), syncs_per_step={"aten::item": 1.0},
                      phases_ms={"data": 1.0, "forward": 2.0}),
        Note(t=t, level="warn", source="sampler", message="NVML unavailable"),
        End(t=t + 0.1, steps=12, dropped=0, exit_code=0),
    ]
    return events


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into a decoded JSON value (dict keys and list indexes)."""
    out = []
    if isinstance(value, dict):
        for k, v in value.items():
            out.append((*prefix, k))
            out += _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out.append((*prefix, i))
            out += _paths(v, (*prefix, i))
    return out


def mutate(line: str, rng: random.Random) -> str:
    """Drop a key, change a value's type, or truncate the line."""
    how = rng.choice(("drop", "retype", "truncate"))
    if how == "truncate":
        return line[: rng.randrange(1, len(line))]
    data = json.loads(line)
    paths = [p for p in _paths(data) if p != ("kind",)]
    if how == "drop":
        paths = [p for p in paths if not isinstance(p[-1], int)] or paths
    path = rng.choice(paths)
    parent = data
    for key in path[:-1]:
        parent = parent[key]
    if how == "drop" and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        current = parent[path[-1]]
        parent[path[-1]] = rng.choice([v for v in OTHER_TYPES if type(v) is not type(current)])
    return json.dumps(data, separators=(",", ":"))


def fuzzed_records(tmp_path: Path) -> list[tuple[Path, int, str]]:
    """CASES records, each one valid record with one line mutated: (file, 1-based line number, the line)."""
    rng = random.Random(SEED)
    lines = [encode(e) for e in valid_record()]
    out = []
    for case in range(CASES):
        index = rng.randrange(len(lines))
        bad = mutate(lines[index], rng)
        path = tmp_path / f"case{case}.jsonl"
        path.write_text("\n".join([*lines[:index], bad, *lines[index + 1:]]) + "\n")
        out.append((path, index + 1, bad))
    return out


def test_decode_raises_only_its_one_line_schema_error(tmp_path: Path) -> None:
    refused = 0
    for _path, _lineno, line in fuzzed_records(tmp_path):
        try:
            event = decode(line)
        except SchemaError as err:
            refused += 1
            assert "\n" not in str(err)
            continue
        if event is not None:  # what decode accepts is a well-formed event: it encodes again
            assert decode(encode(event)) == event
    assert refused > CASES // 2  # most mutations break a line: the checks above did run on errors


def test_view_summary_of_a_malformed_record_is_one_line_naming_file_and_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    failed = 0
    for path, lineno, line in fuzzed_records(tmp_path):
        try:
            decode(line)
            broken = False
        except SchemaError:
            broken = True
        code = main(["view", str(path), "--summary"])  # a traceback here fails the test with it
        err = capsys.readouterr().err
        if broken:
            failed += 1
            assert code != 0, f"{path}:{lineno} ({line}) was read without an error"
            assert err.startswith(f"pitstop: error: {path}:{lineno}: "), err
            assert len(err.strip().splitlines()) == 1, err
        else:
            assert code == 0 or (err.startswith("pitstop: error: ") and len(err.strip().splitlines()) == 1), err
    assert failed > CASES // 2


def test_a_sample_without_its_process_fields_names_the_field(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # The record line issue 13 found: `view --summary` ended in "TypeError: Proc.__init__() missing 3 ...".
    lines = [encode(e) for e in valid_record()]
    index = next(i for i, line in enumerate(lines) if line.startswith('{"kind":"sample"'))
    data = json.loads(lines[index])
    data["procs"][1] = {"loader": 0}
    lines[index] = json.dumps(data)
    path = tmp_path / "r.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert main(["view", str(path), "--summary"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"pitstop: error: {path}:{index + 1}: corrupt record line "
                   "(malformed 'sample' event: procs[1]: missing 'cpu', 'pid', 'role', 'rss')")
