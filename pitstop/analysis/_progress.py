"""Provides the text of a first training step still running: what the training process has done so far.

A first step can take minutes (pytorch/examples' time_sequence_prediction: an
LBFGS step of ~100 s, its closure evaluated ~20 times; a compile; a big
model's first step). "waiting for its first training step" for two minutes
read as a hang. Every front (the tuner's progress line, the Trials view,
`pitstop run --headless`, the live TUI) says the same facts, worded here once.
"""

from __future__ import annotations

from collections.abc import Callable

from pitstop.analysis import format as fmt
from pitstop.analysis._cpu import cpu_now, cpu_text
from pitstop.analysis._state import RunState
from pitstop.events import Progress


def progress_text(progress: Progress, clock: Callable[[float], str] = fmt.span) -> str:
    """`LBFGS step running for 1m15s: 14 closures; 14 backward, 1 batch fetched` (`clock` formats seconds)."""
    counts = (f"{fmt.count(progress.backwards, 'backward', 'backward')}, "
              f"{fmt.count(progress.batches, 'batch', 'batches')} fetched")
    if progress.optimizer_s is not None:
        step = f"{progress.optimizer or 'optimizer'} step running for {clock(progress.optimizer_s)}"
        if progress.closures:
            step += f": {fmt.count(progress.closures, 'closure')}"
        return f"{step}; {counts}"
    if progress.backwards or progress.batches:
        return f"{counts}, no optimizer step yet"
    return "no batch fetched, no backward yet: still setting up"


def first_step_text(progress: Progress, elapsed: float, clock: Callable[[float], str] = fmt.span) -> str:
    """`first training step not done after 1m20s (LBFGS step running for 1m15s: 14 closures; ...)`."""
    return f"first training step not done after {clock(elapsed)} ({progress_text(progress, clock)})"


def first_step_progress(run: RunState) -> tuple[Progress, float] | None:
    """The latest progress of a process that has not ended a step, with the seconds from its agent's start
    to that reading; None once it stepped, or when its agent sent none (torch not imported yet, an older agent)."""
    if run.last_step is not None or not run.samples or run.hello is None:
        return None
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
