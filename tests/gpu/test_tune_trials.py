"""Tuner trials on a real GPU (issue 15): AMP fp16 with the script's GradScaler, bf16, channels-last and
cudnn.benchmark run and apply; an fp16 loss that overflows is rejected."""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.profiling.launch import Target
from pitstop.tuning.results import Candidate
from pitstop.tuning.runner import TrialRunner, TrialSpec
from tests.gpu._kit import CONV, GPU, keep

pytestmark = GPU

STEPS = 12


def runner(tmp_path: Path, *args: str) -> TrialRunner:
    target = Target(script=str(CONV), args=("--steps", "100000", "--item-every", "0", *args))
    return TrialRunner(TrialSpec(target, cwd=tmp_path, records=tmp_path / "trials", warmup=3))


def kept(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    keep(request, *sorted((tmp_path / "trials").glob("*.jsonl")))


def test_amp_channels_last_and_cudnn_benchmark_trials_run_on_the_gpu(tmp_path: Path,
                                                                   request: pytest.FixtureRequest) -> None:
    run = runner(tmp_path)
    try:
        base = run(Candidate(), STEPS, "baseline")
        assert base.ok, (base.status, base.reason)
        facts = base.facts
        assert facts is not None and facts.device_type == "cuda" and facts.grad_scaler and facts.conv2d > 0, facts
        for knob, value in (("amp", "bf16"), ("amp", "fp16"), ("channels_last", True), ("cudnn_benchmark", True)):
            result = run(Candidate.of({knob: value}), STEPS, "compute")
            # "ok" means it ran, measured, kept its loss in tolerance and was applied (else "rejected").
            assert result.status == "ok", (knob, value, result.status, result.reason)
            assert result.throughput and result.mem_kind == "gpu", result
    finally:
        kept(request, tmp_path)


def test_a_diverging_fp16_loss_is_rejected_and_bf16_is_not(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    run = runner(tmp_path, "--fp16-overflow")
    try:
        assert run(Candidate(), STEPS, "baseline").ok
        bf16 = run(Candidate.of({"amp": "bf16"}), STEPS, "compute")
        assert bf16.status == "ok", (bf16.status, bf16.reason)  # bf16 has fp32's range: no overflow
        fp16 = run(Candidate.of({"amp": "fp16"}), STEPS, "compute")
        assert fp16.status in ("nan", "diverged") and not fp16.ok, (fp16.status, fp16.reason)
    finally:
        kept(request, tmp_path)
