"""Provides the rules about how the model runs: precision, layout, cudnn, DataParallel, NaN."""

from __future__ import annotations

import re

from pitstop.analysis import format as fmt
from pitstop.analysis.command import tune_line
from pitstop.analysis._context import MIN_STEPS, Context, Finding, truthy_override
from pitstop.analysis._rules_loop import DATA_WAIT_FRAC
from pitstop.analysis._stats import percentile

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
# channels_last typically gains 10-30% on conv nets under AMP (PyTorch's
# channels-last tutorial); little in fp32.
CHANNELS_LAST_GAIN = (0.10, 0.30)
# Steps whose IQR is under 25% of the median look like fixed input shapes:
# with shapes that change, cudnn's algorithm per shape differs and so does time.
CUDNN_STABLE_SPREAD = 0.25
# With benchmark on, each new input shape re-runs the autotuner: a compute spike
# of several times the median. 3x the p50 compute on at least 5% of the steps
# (and at least 3 steps) is the evidence of changing shapes we accept, since the
# stream does not carry shapes.
CUDNN_SPIKE_RATIO = 3.0
CUDNN_SPIKE_FRAC = 0.05
CUDNN_SPIKE_MIN = 3
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
    faster on two real training scripts (issue 10); on others, or on a model
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


def channels_last(ctx: Context) -> Finding | None:
    """A conv net in NCHW on CUDA: tensor-core convolutions want NHWC."""
    run, model = ctx.run, ctx.run.model
    if not ctx.cuda or model is None or model.conv2d <= 0 or model.channels_last_params > 0:
        return None
    if truthy_override(run, "channels_last", "memory_format"):
        return None
    amp = model.autocast or truthy_override(run, "amp", "autocast", "precision")
    evidence = [f"{model.conv2d} Conv2d modules, no 4-D parameter in channels_last (all NCHW)"]
    evidence.append("autocast is on" if amp else "autocast is off: the gain is mostly with AMP")
    gain = "typically 10-30% on conv-heavy models under AMP, little in float32"
    if ctx.compute_p50 is not None and amp:
        gain += (
            f": compute p50 {fmt.duration(ctx.compute_p50)} could fall to "
            f"~{fmt.duration(ctx.compute_p50 * (1 - CHANNELS_LAST_GAIN[1]))}-"
            f"{fmt.duration(ctx.compute_p50 * (1 - CHANNELS_LAST_GAIN[0]))}"
        )
    return Finding(
        rule="channels-last",
        title="Convolutions run in NCHW layout",
        severity="medium" if amp else "low",
        evidence=evidence,
        cause="cudnn's tensor-core convolution kernels work in NHWC; NCHW inputs are transposed each call",
        fix=(
            "model = model.to(memory_format=torch.channels_last)\n"
            "x = x.to(device, memory_format=torch.channels_last, non_blocking=True)"
        ),
        gain=gain,
        knob="channels_last",
    )


def cudnn_benchmark_off(ctx: Context) -> Finding | None:
    """cudnn.benchmark off in a conv net whose step time is steady (shapes look fixed)."""
    run, model = ctx.run, ctx.run.model
    if not ctx.cuda or model is None or model.conv2d <= 0 or model.cudnn_benchmark is not False:
        return None
    if truthy_override(run, "cudnn"):
        return None
    if ctx.n < MIN_STEPS or ctx.wall_spread is None or ctx.wall_spread > CUDNN_STABLE_SPREAD:
        return None  # steps vary: shapes may change, and then benchmark would hurt
    return Finding(
        rule="cudnn-benchmark",
        title="cudnn.benchmark is off with fixed input shapes",
        severity="low",
        evidence=[
            f"torch.backends.cudnn.benchmark is False with {model.conv2d} Conv2d modules",
            f"step time is steady (p50 {fmt.duration(ctx.wall_p50)}, IQR {ctx.wall_spread:.0%} of it over "
            f"{ctx.n} steps), which suggests fixed input shapes",
        ],
        cause="without benchmark, cudnn picks a convolution algorithm by heuristic instead of timing them",
        fix="torch.backends.cudnn.benchmark = True  # before the first forward",
        gain=(
            f"often 5-20% of convolution time for fixed shapes; the autotuning costs a few "
            f"slow steps once (step p50 now {fmt.duration(ctx.wall_p50)})"
        ),
        knob="cudnn_benchmark",
    )


def cudnn_benchmark_shapes(ctx: Context) -> Finding | None:
    """cudnn.benchmark on while compute time spikes: changing shapes re-run the autotuner."""
    model = ctx.run.model
    if not ctx.cuda or model is None or model.conv2d <= 0 or model.cudnn_benchmark is not True:
        return None
    if ctx.n < MIN_STEPS or not ctx.compute_p50:
        return None
    limit = CUDNN_SPIKE_RATIO * ctx.compute_p50
    spikes = [s for s in ctx.steps if s.compute > limit]
    if len(spikes) < max(CUDNN_SPIKE_MIN, CUDNN_SPIKE_FRAC * ctx.n):
        return None
    extra = sum(s.compute - ctx.compute_p50 for s in spikes)
    worst = max(s.compute for s in spikes)
    return Finding(
        rule="cudnn-benchmark-shapes",
        title="cudnn.benchmark is on but steps spike (changing shapes?)",
        severity="medium",
        evidence=[
            f"{len(spikes)} of {ctx.n} steps ({len(spikes) / ctx.n:.0%}) spent over "
            f"{CUDNN_SPIKE_RATIO:.0f}x the p50 compute {fmt.duration(ctx.compute_p50)} (up to {fmt.duration(worst)})",
            "torch.backends.cudnn.benchmark is True: each new input shape re-runs the autotuner",
            f"p95 compute {fmt.duration(percentile((s.compute for s in ctx.steps), 95))}",
        ],
        cause=(
            "variable input shapes (a last partial batch, varying image sizes or sequence "
            "lengths) make cudnn re-benchmark"
        ),
        fix=(
            "torch.backends.cudnn.benchmark = False\n"
            "# or keep it and make shapes fixed: DataLoader(..., drop_last=True), pad/bucket sizes"
        ),
        gain=f"the spikes cost ~{fmt.share(extra, ctx.wall_sum, fmt.seconds)} of the {ctx.n} measured steps' time",
        knob="cudnn_benchmark",
    )


def data_parallel(ctx: Context) -> Finding | None:
    """nn.DataParallel: one process, threads per GPU, everything gathered on GPU 0."""
    model, rt = ctx.run.model, ctx.run.runtime
    if model is None or not model.data_parallel:
        return None
    evidence = ["nn.DataParallel wraps the model"]
    if rt is not None and rt.device_names:
        evidence.append(f"{len(rt.device_names)} GPUs: {', '.join(rt.device_names)}")
    per_gpu: dict[int, list[float]] = {}
    for s in ctx.gpu_samples:
        for g in s.gpus:
            if g.util is not None:
                per_gpu.setdefault(g.index, []).append(g.util)
    if len(per_gpu) > 1:
        means = {i: sum(v) / len(v) for i, v in sorted(per_gpu.items())}
        evidence.append("GPU util: " + ", ".join(f"gpu{i} {m:.0f}%" for i, m in means.items()))
        gain = (
            f"DDP keeps every GPU busy; now the least busy runs at {min(means.values()):.0f}% "
            f"and the busiest at {max(means.values()):.0f}%"
        )
    else:
        gain = "DDP usually scales close to linearly where DataParallel stalls on GPU 0 and the GIL"
    return Finding(
        rule="data-parallel",
        title="nn.DataParallel instead of DistributedDataParallel",
        severity="medium",
        evidence=evidence,
        cause=(
            "DataParallel runs one Python thread per GPU under the GIL, re-copies the model "
            "each step and scatters/gathers through GPU 0"
        ),
        fix=(
            "# torchrun --nproc_per_node=NGPU train.py\n"
            'torch.distributed.init_process_group("nccl")\n'
            'local_rank = int(os.environ["LOCAL_RANK"]); torch.cuda.set_device(local_rank)\n'
            "model = torch.nn.parallel.DistributedDataParallel(model.cuda(), device_ids=[local_rank])\n"
            "sampler = torch.utils.data.distributed.DistributedSampler(dataset)"
        ),
        gain=gain,
        knob=None,
    )


def nonfinite_loss(ctx: Context) -> Finding | None:
    """The loss went NaN or inf: the run is no longer learning from that step."""
    run = ctx.run
    if not run.nonfinite_steps:
        return None
    first = min(run.nonfinite_steps)
    total = run.nonfinite_total
    evidence = [
        f"loss was NaN or inf at step {first} "
        f"({total} non-finite step{'s' if total != 1 else ''} in all)"
    ]
    before = [(k, v) for k, v in run.losses.items() if k < first and v is not None]
    if before:
        k, v = max(before)
        evidence.append(f"last finite loss before it: {v:.4g} at step {k}")
    model = run.model
    fp16_unscaled = model is not None and model.autocast and not model.grad_scaler
    if fp16_unscaled:
        evidence.append("autocast is on without a GradScaler (float16 gradients can overflow)")
    return Finding(
        rule="nonfinite-loss",
        title=f"Non-finite loss from step {first}",
        severity="high",
        evidence=evidence,
        cause=(
            "exploding gradients, a learning rate too high, float16 overflow without a "
            "GradScaler, or bad input (a NaN in the data, log(0), division by zero)"
        ),
        fix=(
            "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # before optimizer.step()\n"
            "# lower the learning rate or add warm-up; with float16 autocast use torch.amp.GradScaler\n"
            "# find the op: torch.autograd.set_detect_anomaly(True)  (slow: debugging only)"
        ),
        gain=f"every step after step {first} is wasted until the loss is finite again",
        knob=None,
    )
