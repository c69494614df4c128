"""Provides the rules about numeric precision: float32 that autocast would speed up, float64 that it cannot."""

from __future__ import annotations

import re

from pitstop.analysis import format as fmt
from pitstop.analysis.command import tune_line
from pitstop.analysis._cpu import CONTENDED_WAIT_CORES, run_delay
from pitstop.analysis._context import MIN_STEPS, Context, Finding, truthy_override
from pitstop.analysis._rules_loop import DATA_WAIT_FRAC

# GPU families by name (NVML/torch device names). Ampere and newer have bf16
# tensor cores; Volta/Turing have fp16 tensor cores only; Pascal and older
# (GTX, P100, K80...) have none, so autocast brings little there.
_BF16 = re.compile(
    r"\bA\d{1,4}\b|\bH\d{2,3}\b|\bGH\d{3}\b|\bB\d{3}\b|\bL\d{1,2}S?\b|RTX\s*[345]0\d0|RTX\s*A\d{4}"
    r"|RTX\s*\d{4}\s*Ada|RTX\s*PRO",
    re.IGNORECASE,
)
_FP16 = re.compile(r"V100|\bT4\b|RTX\s*20\d0|TITAN\s*V\b|TITAN\s*RTX|Quadro\s*RTX", re.IGNORECASE)
_NO_TC = re.compile(r"GTX|\bP\d{1,3}\b|\bK\d{2}\b|\bM\d{2}\b|TITAN\s*X|Quadro\s*[PKM]\d", re.IGNORECASE)
# AMP typically shortens the matmul/conv part of a step 1.5-3x on tensor cores
# (NVIDIA's mixed-precision guide); the gain line applies that range to the
# measured compute time.
AMP_SPEEDUP = (1.5, 3.0)
# float32 over float64, per step: on this project's CPU (torch 2.13, one thread) a 1024x1024
# matmul ran 1.9x, an MLP training step 2.3x and a small conv net's step 5.0x faster in float32.
# GPUs: float64 runs at 1/2 of the float32 rate on A100/H100 (no TF32 counted) and 1/32-1/64 on
# consumer and L4/T4-class boards (NVIDIA's datasheets; not measured here).
FLOAT64_SLOWER_CPU = (1.9, 5.0)
FLOAT64_SLOWER_GPU = (2.0, 64.0)


def gpu_precision(names: list[str]) -> str | None:
    """"bf16", "fp16" or "none" (no tensor cores) from device names; None when unknown."""
    if not names:
        return None
    if any(_NO_TC.search(n) and not _BF16.search(n) and not _FP16.search(n) for n in names):
        return "none"
    if all(_BF16.search(n) for n in names):
        return "bf16"
    if any(_FP16.search(n) for n in names) or any(_BF16.search(n) for n in names):
        return "fp16"
    return None


def no_amp(ctx: Context) -> Finding | None:
    """fp32 training on a tensor-core GPU (autocast would run matmuls/convs far faster), or on a CPU with native bf16."""
    run, model, rt = ctx.run, ctx.run.model, ctx.run.runtime
    if rt is None or model is None or rt.device_type not in ("cuda", "cpu"):
        return None
    if model.autocast or model.grad_scaler or truthy_override(run, "amp", "autocast", "precision"):
        return None
    if model.dtype not in (None, "float32"):
        return None  # autocast casts float32 ops only: float64 has its own finding, a half type needs none
    if rt.device_type == "cpu":
        return _cpu_bf16(ctx)
    precision = gpu_precision(rt.device_names)
    if precision == "none":
        return None
    names = ", ".join(sorted(set(rt.device_names))) or "unknown GPU"
    evidence = [f"no autocast region and no GradScaler seen on {names}" + _dtype_seen(model.dtype)]
    evidence += _compute_share(ctx)
    if precision == "bf16":
        fix = (
            'with torch.autocast("cuda", dtype=torch.bfloat16):\n'
            "    loss = criterion(model(x), y)\n"
            "loss.backward()"
        )
    else:
        dtype = "torch.float16" if precision == "fp16" else (
            "torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16"
        )
        fix = (
            'scaler = torch.amp.GradScaler("cuda")  # needed for float16, harmless for bfloat16\n'
            f'with torch.autocast("cuda", dtype={dtype}):\n'
            "    loss = criterion(model(x), y)\n"
            "scaler.scale(loss).backward()\n"
            "scaler.step(optimizer)\n"
            "scaler.update()"
        )
    if ctx.compute_mean is not None and ctx.wall_mean is not None and ctx.wait_mean is not None:
        best = ctx.wait_mean + ctx.compute_mean / AMP_SPEEDUP[1]
        worst = ctx.wait_mean + ctx.compute_mean / AMP_SPEEDUP[0]
        gain = (
            f"typically 1.5-3x on the matmul/conv part: {fmt.speedup_range(ctx.wall_mean, best, worst)} "
            "in the mean step if all of its compute were matmuls and convolutions, and activations take "
            "about half the memory"
        )
    else:
        gain = "typically 1.5-3x on matmul/conv time, and activations take about half the memory"
    return Finding(
        rule="no-amp",
        title="Training in float32 on a GPU with tensor cores",
        severity="medium" if precision is not None else "low",
        evidence=evidence,
        cause="float32 matmuls and convolutions do not use the tensor cores' fast half-precision paths",
        fix=fix,
        gain=gain,
        knob="amp",
    )


def _cpu_bf16(ctx: Context) -> Finding | None:
    """fp32 on a CPU with native bf16: something to try with `pitstop tune`, never a promise.

    On such CPUs (avx512_bf16 / amx_bf16) bf16 autocast ran 1.5x and 2.3x
    faster on two real training scripts; on others, or on a model
    of small layers, it can be slower, so only a measurement decides. Without
    native bf16 (or when unknown) nothing is said: emulated bf16 is slower.
    """
    rt = ctx.run.runtime
    if rt is None or rt.cpu_bf16 is not True:
        return None
    if ctx.data_frac is not None and ctx.data_frac > DATA_WAIT_FRAC:
        return None  # the step waits for data: faster compute would only wait longer
    evidence = ["this CPU has native bfloat16 (avx512_bf16 or amx_bf16 in /proc/cpuinfo); no autocast region seen"
                + _dtype_seen(ctx.run.model.dtype if ctx.run.model is not None else None)]
    evidence += _compute_share(ctx)
    return Finding(
        rule="no-amp",
        title="Training in float32 on a CPU with native bfloat16",
        severity="low",
        evidence=evidence,
        cause=(
            "bfloat16 autocast lets matmuls and convolutions use the CPU's bf16 instructions "
            "(AVX512-BF16, AMX); whether this model gains depends on its ops and shapes"
        ),
        fix=(
            f"{tune_line(ctx.run.hello, ['amp'])}   # measures bf16 autocast against float32, in fresh runs\n"
            "# if it wins, run with the config it writes, or in the script:\n"
            'with torch.autocast("cpu", dtype=torch.bfloat16):\n'
            "    loss = criterion(model(x), y)"
        ),
        gain=(
            "unknown until measured: bf16 autocast ran 1.5-2.3x faster on two training scripts on such "
            "CPUs, and can be slower on others"
        ),
        knob="amp",
    )


def _dtype_seen(dtype: str | None) -> str:
    """", parameters in float32" when the record says (older records do not)."""
    return f", parameters in {dtype}" if dtype else ""


def _compute_share(ctx: Context) -> list[str]:
    """"compute: 54% (5.0 ms of 9.2 ms) of the mean step": the part faster arithmetic shortens."""
    if ctx.compute_mean is None or not ctx.wall_mean:
        return []
    return [f"compute: {fmt.share(ctx.compute_mean, ctx.wall_mean)} of the mean step, over {ctx.n} steps"]


def float64(ctx: Context) -> Finding | None:
    """The model's parameters are float64: every op runs at the slow double-precision rate, and autocast skips it."""
    model, rt = ctx.run.model, ctx.run.runtime
    if model is None or model.dtype != "float64":
        return None
    on = "GPU" if ctx.cuda else "CPU"
    evidence = ["most of the model's parameters are float64 (model.double(), or torch.set_default_dtype(torch.float64))"]
    evidence += _compute_share(ctx)
    if model.autocast:
        evidence.append("autocast is on, but it casts float32 ops only: float64 ops run as they are")
    if rt is not None and rt.device_names and ctx.cuda:
        evidence.append(f"on {', '.join(sorted(set(rt.device_names)))}")
    low, high = FLOAT64_SLOWER_GPU if ctx.cuda else FLOAT64_SLOWER_CPU
    gain = f"float32 arithmetic is typically {low:g}-{high:g}x faster than float64 on a {on}"
    if ctx.compute_mean is not None and ctx.wall_mean is not None and ctx.wait_mean is not None and ctx.n >= MIN_STEPS:
        best = ctx.wait_mean + ctx.compute_mean / high
        worst = ctx.wait_mean + ctx.compute_mean / low
        waited = run_delay(ctx.run, ctx.run.first_step_t) if ctx.run.first_step_t is not None else None
        if waited is not None and waited >= CONTENDED_WAIT_CORES:
            # Its threads waited for a core: that share of compute does not shrink with faster arithmetic
            # (width-1024 MLP beside other processes at load 9-12 on 2 cores: float32 measured x1.11).
            gain += (f": at most {fmt.speedup(ctx.wall_mean, best)} in the mean step, a bound: its threads waited "
                     f"{waited:.2f} cores' worth for a CPU, and that wait does not shrink")
        else:
            gain += f": {fmt.speedup_range(ctx.wall_mean, best, worst)} in the mean step"
    gain += ", and parameters, gradients and optimizer state take half the memory"
    return Finding(
        rule="float64",
        title=f"Training in float64 on a {on}",
        severity="medium",
        evidence=evidence,
        cause=(
            "float64 ops run at half the SIMD width on a CPU and at 1/2 to 1/64 of the float32 rate on GPUs; "
            "autocast and tensor cores do not apply to them"
        ),
        fix=(
            "model = model.float()  # unless the loss truly needs double precision\n"
            "x = x.float()  # inputs too: a float64 input promotes every op it meets\n"
            "# where the script set it: torch.set_default_dtype(torch.float32)"
        ),
        gain=gain,
        knob=None,
    )
