"""Provides the rules about how the model runs: layout, cudnn, DataParallel, NaN (precision: _rules_precision)."""

from __future__ import annotations

from pitstop.analysis import format as fmt
from pitstop.analysis._context import MIN_STEPS, Context, Finding, truthy_override
from pitstop.analysis._loaderfix import loader_fix
from pitstop.analysis._models import ModelSpan, model_spans
from pitstop.analysis._state import RunState
from pitstop.analysis._stats import percentile

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
            "# or keep it and make shapes fixed: pad/bucket sizes, and no last partial batch:\n"
            + loader_fix(ctx.loader(), ["...", "drop_last=True"])
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
    """The loss went NaN or inf: the run is no longer learning from that step.

    Either optimizer's loss: a GAN's G (optimizer 2, `Loss.optimizer`) can go NaN while D's is
    still finite; read from D's alone, the finding came a step late, or never where D's stayed finite.
    """
    run = ctx.run
    if not run.nonfinite_steps and not run.other_nonfinite_steps:
        return None
    mine = min(run.nonfinite_steps) if run.nonfinite_steps else None
    other = min(run.other_nonfinite_steps) if run.other_nonfinite_steps else None
    first = min(k for k in (mine, other) if k is not None)
    two = other is not None or run.other_loss is not None  # a second optimizer's loss was read (a GAN's G)
    evidence = []
    if mine is not None:
        total = run.nonfinite_total
        # At fast steps the agent reads one step's loss every 10 ms: the count is of the steps read.
        steps = run.total_steps
        read = "" if run.losses_read >= steps else f" of {run.losses_read:,} losses read (one every 10 ms at most)"
        whose = "optimizer 1's loss" if two else "loss"
        evidence.append(f"{whose} was NaN or inf at step {mine} "
                        f"({total} non-finite step{'s' if total != 1 else ''}{read or ' in all'})")
    if other is not None:
        count = run.other_nonfinite_total
        evidence.append(f"optimizer 2's loss (a GAN's G: the second optimizer to step) was NaN or inf from step {other} "
                        f"({count} non-finite step{'s' if count != 1 else ''} of those read)")
    # Which optimizer's loss the title names: the one that went first (a GAN's G, then D from G's NaN output).
    which = ("" if not two else " (optimizer 1's)" if other is None or (mine is not None and mine < other)
             else " (optimizer 2's: a GAN's G)" if mine is None or other < mine else " (both optimizers')")
    # The model that went non-finite, where the run trained several in turn (a sweep's trials).
    model = next((m for m in model_spans(run, 0) if m.first_step <= first <= m.last_step), None)
    begin = model.first_step if model is not None else (run.head[0].step if run.head else 0)
    before = [(k, v) for k, v in run.losses.items() if begin <= k < first and v is not None]
    if before:
        k, v = max(before)
        evidence.append(f"last finite loss{' of optimizer 1' if two else ''} before it: {v:.4g} at step {k}")
    if other is not None and run.other_loss is not None and run.other_loss[0] < other:
        evidence.append(f"optimizer 2's last finite loss before its own: {run.other_loss[1]:.4g} at step "
                        f"{int(run.other_loss[0])}")
    if model is not None:
        evidence.append(f"in model {model.index} of {len(model_spans(run, 0))} trained one after another "
                        f"(steps {model.first_step}-{model.last_step})")
    gain = _nonfinite_gain(run, first, model)
    # Non-finite at the first step whose loss was read, with no finite one before: no update had run
    # yet to diverge. pytorch/examples' FSDP2 example read NaN from step 0 because its parameters were
    # left uninitialised after `to_empty()`; clipping gradients (which it already did) cannot help.
    from_start = not before and first <= begin + 1
    fp16_unscaled = run.model is not None and run.model.autocast and not run.model.grad_scaler
    if fp16_unscaled:
        evidence.append("autocast is on without a GradScaler (float16 gradients can overflow)")
    if from_start:
        return Finding(
            rule="nonfinite-loss",
            title=f"Non-finite loss from the first step (step {first}){which}",
            severity="high",
            evidence=evidence,
            cause=("the loss was never finite, so no update diverged it: the parameters or the inputs hold NaN "
                   "or inf before training (parameters left uninitialised, e.g. after `model.to_empty(device=...)` "
                   "without initialising them; NaN in the data; log(0) or 0/0 in the loss)"),
            # The FSDP2 example calls model.reset_parameters() after to_empty(), but its Transformer's own
            # resets only the embeddings, norm and output: the 10 blocks kept whatever memory held. Resetting
            # every submodule that has one made its loss finite from step 0.
            fix=("# before the first step: which parameters are not finite?\n"
                 "print([n for n, p in model.named_parameters() if not p.isfinite().all()])\n"
                 "# after model.to_empty(device=...), initialise every submodule (a model's own reset_parameters()\n"
                 "# may cover only its top-level layers):\n"
                 "for m in model.modules():\n"
                 "    if hasattr(m, 'reset_parameters'): m.reset_parameters()\n"
                 "# and check a batch: assert torch.isfinite(x).all()"),
            gain=gain,
            knob=None,
        )
    return Finding(
        rule="nonfinite-loss",
        title=f"Non-finite loss from step {first}{which}",
        severity="high",
        evidence=evidence,
        cause=(
            "exploding gradients, a learning rate too high, float16 overflow without a "
            "GradScaler, or bad input (a NaN in the data, log(0), division by zero)"
        ),
        fix=(
            ("# the script clips its gradients already (clip_grad_norm_ or clip_grad_value_ was called):\n"
             "# lower the learning rate or add warm-up; with float16 autocast use torch.amp.GradScaler\n"
             if run.model is not None and run.model.grad_clip else
             "torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)  # before optimizer.step()\n"
             "# lower the learning rate or add warm-up; with float16 autocast use torch.amp.GradScaler\n")
            + "# find the op: torch.autograd.set_detect_anomaly(True)  (slow: debugging only)"
        ),
        gain=gain,
        knob=None,
    )


def _nonfinite_gain(run: RunState, first: int, model: ModelSpan | None) -> str:
    """What the non-finite steps cost, as the record shows it: until the end, until finite again, or until
    the next model (a sweep's next trial, finite at once: "until the loss is finite again" read as more)."""
    last = run.last_step if run.last_step is not None else first
    after = [k for k, v in run.losses.items() if k > first and v is not None]
    if run.other_nonfinite_steps:  # finite again means both optimizers' losses (a GAN's D and G)
        other_last = max(run.other_nonfinite_steps)
        other_again = run.other_loss is not None and run.other_loss[0] > other_last
        after = [k for k in after if k > other_last] if other_again else []
    end = model.last_step if model is not None else last
    wasted = end - first + 1
    if model is not None and model.last_step < last:
        again = [k for k in after if k <= model.last_step]
        if not again:
            return (f"steps {first}-{model.last_step} ({wasted}) of model {model.index} were wasted: its loss "
                    f"stayed non-finite; the next model's was finite from step {after[0]}" if after else
                    f"steps {first}-{model.last_step} ({wasted}) of model {model.index} were wasted")
    if after:
        return f"the steps from {first} until the loss was finite again at step {after[0]} were wasted"
    n = last - first + 1
    return f"every step from step {first} to the last ({last}: {n} step{'s' if n != 1 else ''}) was wasted"
