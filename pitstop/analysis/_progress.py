"""Provides the text of a first training step still running: what the training process has done so far.

A first step can take minutes (pytorch/examples' time_sequence_prediction: an
LBFGS step of ~100 s, its closure evaluated ~20 times; a compile; a big
model's first step). "waiting for its first training step" for two minutes
read as a hang. Every front (the tuner's progress line, the Trials view,
`pitstop run --headless`, the live TUI) says the same facts, worded here once.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from pitstop.analysis import format as fmt
from pitstop.analysis._cpu import cpu_now, cpu_text
from pitstop.analysis._state import RunState
from pitstop.events import Progress


def seconds_text(seconds: float) -> str:
    """`45 s`, `2m30s`: a first step's time to the second (`format.span` said `2 min` for 2 min to 2 min 59 s
    of time_sequence_prediction's first step, over ten lines whose closures moved)."""
    s = int(round(seconds))
    return f"{s} s" if s < 120 else f"{s // 60}m{s % 60:02d}s"


def progress_text(progress: Progress, clock: Callable[[float], str] = seconds_text) -> str:
    """`LBFGS step running for 75 s: 14 closures; 14 backward, 1 batch fetched` (`clock` formats seconds).

    Batches are left out while none was fetched: a script without a DataLoader
    (time_sequence_prediction) fetches none, and "0 batches" said nothing there.
    """
    compiling = progress.compiling_s
    if compiling is not None:
        # The compile is what the first step is doing: said first, then the counters.
        rest = progress_text(dataclasses.replace(progress, compiling_s=None), clock)
        return f"torch.compile compiling for {clock(compiling)}; " + rest.removesuffix(": still setting up")
    batches = f"{fmt.count(progress.batches, 'batch', 'batches')} fetched" if progress.batches else ""
    backwards = fmt.count(progress.backwards, "backward", "backward")
    if progress.optimizer_s is not None:
        step = f"{progress.optimizer or 'optimizer'} step running for {clock(progress.optimizer_s)}"
        if progress.closures:
            step += f": {fmt.count(progress.closures, 'closure')}"
        return f"{step}; {backwards}" + (f", {batches}" if batches else "")
    if progress.backward_s is not None:
        # In a backward now: a first backward that hangs (a DDP peer that never came) said "no backward yet".
        done = f", {fmt.count(progress.backwards, 'backward', 'backward')} done before it" if progress.backwards else ""
        return (f"backward running for {clock(progress.backward_s)}{done}" + (f", {batches}" if batches else "")
                + ", no optimizer step yet")
    if progress.backwards:
        return f"{backwards}" + (f", {batches}" if batches else "") + ", no optimizer step yet"
    if progress.grads:  # gradients taken by torch.autograd.grad: training, not setting up
        return (f"{fmt.count(progress.grads, 'torch.autograd.grad call')}"
                + (f", {batches}" if batches else "") + ", no backward or optimizer step yet")
    if progress.forward is not None:
        return (f"{progress.forward}.forward running, " + (f"{batches}, " if batches else "no batch fetched, ")
                + "no backward yet")
    if batches:
        return f"{batches}, no backward yet"
    return "no batch fetched, no backward yet: still setting up"


def first_step_text(progress: Progress, elapsed: float, clock: Callable[[float], str] = seconds_text,
                    sep: str = " ") -> str:
    """`first training step not done after 1m20s (LBFGS step running for 1m15s: 14 closures; ...)`;
    `sep` goes before the parenthesis (a new line where one line is too narrow for both)."""
    return f"first training step not done after {clock(elapsed)}{sep}({progress_text(progress, clock)})"


def first_step_progress(run: RunState) -> tuple[Progress, float] | None:
    """The latest progress of a process that has not ended a step, with the seconds from its agent's start
    to that reading; None once it stepped, or when its agent sent none (torch not imported yet, an older agent)."""
    if run.last_step is not None or run.end is not None or not run.samples or run.hello is None:
        return None  # (an ended process's first step will not end: no progress to tell)
    sample = run.samples[-1]
    if sample.progress is None:
        return None
    return sample.progress, max(0.0, sample.t - run.hello.started)


def first_step_status(run: RunState) -> str | None:
    """The status line of a process whose first step has not ended: the progress, and how busy its CPU is."""
    found = first_step_progress(run)
    if found is None:
        return None
    progress, elapsed = found
    cpu = cpu_now(run)
    busy = cpu.main is not None or cpu.machine_pct is not None or any(g.cores is not None for g in cpu.loaders)
    text = first_step_text(progress, elapsed)
    return f"{text} | cpu {cpu_text(cpu, short=True)}" if busy else text
