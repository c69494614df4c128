"""Every finding's quoted figures agree with each other: a share is its part over its whole, a gain its before over after.

A moderate data-wait finding read "14% of step time (p50 4.2 ms of 9.2 ms) ...
from 9.2 ms to ~4.9 ms, up to 1.17x": 4.2 of 9.2 is 46% and 9.2 to 4.9 is 1.88x.
The runs here have steps of unequal length (a slow tail), where a p50 and a mean
part ways, and together they make every rule fire.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest

from pitstop.analysis import RULE_IDS, Finding, RunState, advise
from pitstop.events import Gpu, Model, Sample, Step
from tests.unit.test_cpu_contended import hogged_run
from tests.unit.test_rules import _kitchen_sink, _spiky, add_gpu_samples, add_steps, cuda_run, loader, runtime
from tests.unit.test_rules_trends import creeping_run, epoch_run, eval_run, threads_run

GiB = 1 << 30
_SCALE = {"µs": 1e-6, "ms": 1e-3, "s": 1.0, "B": 1.0, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}
_FIG = r"(\d[\d,]*(?:\.\d+)?) (µs|ms|s|B|KiB|MiB|GiB|TiB)\b"
_NUM = r"(\d+(?:\.\d+)?)"
# "14% (1.3 ms of 9.2 ms)", and the form that hid the disagreement: "14% of step time (p50 4.2 ms of 9.2 ms"
SHARE = re.compile(_NUM + r"%[^%()]*?\((?:p50 |mean )?" + _FIG + r" of (?:a |the )?" + _FIG)
# "peaked at 8 GiB of 80 GiB (10%)"
SHARE_AFTER = re.compile(_FIG + r" of " + _FIG + r" \(" + _NUM + r"%\)")
# "1.17x (9.2 ms to ~7.9 ms)", and "1.17x if the wait is hidden (step from 9.2 ms to ~4.9 ms)"
GAIN = re.compile(_NUM + r"x\b(?:(?!\d(?:\.\d+)?x\b)[^%]){0,60}?" + _FIG + r" to ~" + _FIG)
# "grew 300 MiB over steps 3-599 (503 MiB per 1,000 steps"
CREEP = re.compile(r"grew " + _FIG + r" over steps (\d+)-(\d+) \(" + _FIG + r" per 1,000 steps")


def _bounds(number: str, unit: str = "") -> tuple[float, float]:
    """The interval a printed number stands for: "4.2 ms" is 4.15-4.25 ms, in seconds or bytes."""
    digits = number.replace(",", "")
    half = 0.5 * 10 ** -(len(digits.split(".")[1]) if "." in digits else 0)
    scale = _SCALE.get(unit, 1.0)
    return (float(digits) - half) * scale, (float(digits) + half) * scale


def _ratio_bounds(part: tuple[float, float], whole: tuple[float, float]) -> tuple[float, float]:
    return part[0] / whole[1], part[1] / max(whole[0], 1e-12)


def _overlaps(a: tuple[float, float], b: tuple[float, float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def disagreements(f: Finding) -> list[str]:
    """Each quoted share or gain whose number is not the ratio of the figures quoted with it."""
    bad = []
    for text in [*f.evidence, f.gain, f.cause]:
        for m in SHARE.finditer(text):
            shown = tuple(v / 100 for v in _bounds(m[1]))
            if not _overlaps(shown, _ratio_bounds(_bounds(m[2], m[3]), _bounds(m[4], m[5]))):  # type: ignore[arg-type]
                bad.append(f"{f.rule}: {m[0]!r} in {text!r}")
        for m in SHARE_AFTER.finditer(text):
            shown = tuple(v / 100 for v in _bounds(m[5]))
            if not _overlaps(shown, _ratio_bounds(_bounds(m[1], m[2]), _bounds(m[3], m[4]))):  # type: ignore[arg-type]
                bad.append(f"{f.rule}: {m[0]!r} in {text!r}")
        for m in GAIN.finditer(text):
            if not _overlaps(_bounds(m[1]), _ratio_bounds(_bounds(m[2], m[3]), _bounds(m[4], m[5]))):
                bad.append(f"{f.rule}: {m[0]!r} in {text!r}")
        for m in CREEP.finditer(text):
            low, high = _bounds(m[5], m[6])
            per = (int(m[4]) - int(m[3])) / 1000
            if not _overlaps(_bounds(m[1], m[2]), (low * per, high * per)):
                bad.append(f"{f.rule}: {m[0]!r} in {text!r}")
    return bad


def _tail(run: RunState, n: int = 6, slow: float = 0.2) -> RunState:
    """A few slow steps after the others (a checkpoint, a GC pause): the mean step moves, the p50 does not."""
    last = run.steps[-1]
    t = last.t
    for i in range(n):
        t += slow
        run.add(Step(t=t, step=last.step + 1 + i, wall=slow, data_wait=last.data_wait, samples=last.samples,
                     loader=last.loader))
    return run


def _ignite_like() -> RunState:
    """ignite's moderate wait: p50 4.2 ms of a p50 9.2 ms step, a slow tail bringing the mean share to ~14%."""
    run = RunState()
    run.add(runtime(device="cpu", usable=8))
    run.add(loader(workers=0, batch=32))
    add_steps(run, 60, wall=0.0092, wait=0.0042)
    return _tail(run, n=8, slow=0.12)


def _runs() -> Iterator[tuple[str, RunState]]:
    yield "ignite-like moderate data wait", _ignite_like()
    yield "kitchen sink", _tail(_kitchen_sink())
    cpu = RunState()
    cpu.add(runtime(device="cpu", usable=8))
    cpu.add(loader(workers=0, batch=32))
    add_steps(cpu, 30, wall=0.03, wait=0.02)
    yield "data-bound on a CPU", _tail(cpu)
    busy = cuda_run(loader(workers=8), usable=4)
    add_steps(busy, 30, wall=0.03, wait=0.01)
    yield "data-bound with every core busy", _tail(busy)
    idle = cuda_run(loader(batch=32), Model(t=0.7, conv2d=5, cudnn_benchmark=False))
    t = add_steps(idle, 30, wall=0.02, wait=0.001)
    _tail(idle, n=2, slow=0.03)
    add_gpu_samples(idle, 10, util=40.0, t0=t, used=8 * GiB)
    yield "host-bound GPU with room", idle
    pressure = cuda_run(loader(batch=64))
    t = add_steps(pressure, 30, wall=0.02)
    add_gpu_samples(pressure, 3, util=90.0, t0=t, used=79 * GiB, retries=1)
    add_gpu_samples(pressure, 3, util=90.0, t0=t + 2, used=79 * GiB, retries=6)
    yield "GPU memory full", pressure
    spiky = cuda_run(Model(t=0.7, conv2d=5, cudnn_benchmark=True))
    _spiky(spiky, 43, spike_every=10, spike_wait=0.0)
    yield "cudnn re-benchmarking", spiky
    dp = cuda_run(Model(t=0.7, data_parallel=True), names=("NVIDIA A100", "NVIDIA A100"))
    t = add_steps(dp, 20, wall=0.02)
    for i in range(5):
        dp.add(Sample(t=t + i, gpus=[Gpu(index=0, name="A100", util=95.0), Gpu(index=1, name="A100", util=35.0)]))
    yield "DataParallel", dp
    for device in ("cpu", "cuda"):
        double = cuda_run(Model(t=0.7, dtype="float64"), loader(batch=32), device=device)
        add_steps(double, 30, wall=0.05, wait=0.005)
        yield f"float64 on {device}", _tail(double)
    yield "memory creep", creeping_run(per_step=1 << 20)
    yield "epoch stall", epoch_run()
    yield "evaluation share", eval_run(passes=4, eval_s=1.0)
    yield "CPU threads oversubscribed", threads_run(threads=4, worker_cpu=60.0)
    yield "CPU contended by other processes", hogged_run(other_pct=100.0, swing=True)


RUNS = dict(_runs())


@pytest.mark.parametrize("name", list(RUNS))
def test_every_quoted_share_and_gain_is_the_ratio_of_the_figures_beside_it(name: str) -> None:
    advice = advise(RUNS[name])
    assert advice.failures == ()
    assert advice.findings, f"{name}: no finding to check"
    bad = [line for f in advice.findings for line in disagreements(f)]
    assert bad == []


def test_the_runs_above_make_every_rule_fire() -> None:
    fired = {f.rule for run in RUNS.values() for f in advise(run).findings}
    assert fired == set(RULE_IDS)


def test_the_check_catches_the_ignite_finding_as_it_was_printed() -> None:
    printed = Finding(rule="data-wait-moderate", title="", severity="low", evidence=[
        "data wait is 14% of step time over 60 steps (p50 4.2 ms of 9.2 ms): under the 20% of a data-bound "
        "run, still worth up to 1.17x"], gain="up to 1.17x if the wait is hidden (step from 9.2 ms to ~4.9 ms)")
    assert len(disagreements(printed)) == 2
