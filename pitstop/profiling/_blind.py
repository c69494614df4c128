"""Provides the agent's blind-spot watch: a process that never steps says what pitstop saw and what to do.

"steps 0, findings: none" for a run that trained is the worst thing pitstop
can print (Hugging Face's run_clm.py trained 40 steps and got exactly that).
Where this process has not stepped after BLIND_AFTER_S, or when it ends
without a step, the watch looks at what the sampler saw: child processes busy
on the CPU that have no record of their own (training in a subprocess pitstop
does not measure), and at the hooks' count of torch.autograd.grad calls (a loop
that takes its gradients there and updates the parameters itself). It says so
once, as a Note, which every front shows (the
live status line, the TUI, the end summary). A torch imported past the import
watcher is the agent's other blind spot: it hooks it late and says so
(`Agent._hook_late`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from pitstop.errors import PitstopError
from pitstop.profiling.record import first_line, is_record_name
from pitstop.profiling.sampler import compiling

# 30 s: the scripts measured here took their first step 1.6-4.1 s after the agent
# started (mnist_hogwild's children, a script importing transformers first, on a
# loaded 2-core machine); 30 s leaves a real model's build and first batch room,
# and comes before a person watching the status line gives up. The end of the run
# checks again, however short it was.
BLIND_AFTER_S = float(os.environ.get("PITSTOP_BLIND_AFTER_S", "30"))
# Percent of one core. An idle helper (the resource tracker) reads 0%; the training
# subprocess of tests' train_in_subprocess.py read 53% on a loaded 2-core machine.
BUSY_CPU = 20.0
# torch.autograd.grad calls that say a loop takes its own gradients: torch.compile's tracing of a
# backward calls it too, 2 to 4 times a compiled graph (a 2-layer GPT-2 under HF Trainer's
# torch_compile: 2, and a false "updates its parameters itself" after its 89 s first step), where
# the hand-made loops measured call it once or more per iteration (2,000 and 4,000 times).
GRADS_MIN = 50
# Children started by multiprocessing carry an agent that measures them from their first step: busy and
# without a record they are still starting (a DDP rank importing torch and building its model), not
# blind, until this long. pytorch/examples' multigpu.py pattern (mp.spawn, 2 gloo ranks) took its first
# step after more than 40 s on the 2-core machine at load 6-10, and read "not measured" meanwhile.
MP_CHILD_AFTER_S = 300.0
WHAT_TO_DO = ("run the training under `pitstop run` itself, start it with multiprocessing (its children "
              "are measured), or call pitstop.step() once per step")


def blind_message(after_s: float | None, busy_children: dict[int, float], grads: int = 0) -> str | None:
    """What to tell a person about a process that saw no step; None when nothing suggests training.

    `after_s`: seconds since the agent started (None at the end of the run);
    `busy_children`: unmeasured child pid -> the most CPU it used (percent of a core);
    `grads`: this process's torch.autograd.grad calls. This process's own CPU is no
    evidence: the parent of tests' hogwild.py, which only imports torch, starts
    children and waits, peaked at 51% and 100% of a core. Gradients are: functorch's
    ensembling example (torch.func's grad, its own update) trained 4,000 iterations,
    MAML with `p.data -= lr * g` 2,000, and both read "steps 0, findings: none".
    """
    when = "by the end of the run" if after_s is None else f"after {after_s:.0f} s"
    if grads >= GRADS_MIN and not busy_children:
        return (f"no training step seen in this process {when}, while it took gradients with torch.autograd.grad "
                f"{grads:,} times (torch.func's grad goes through it) and no optimizer stepped and no backward() "
                "ran: a loop that updates its parameters itself is not seen; call pitstop.step() once per "
                "training iteration")
    if not busy_children:
        return None
    pids = sorted(busy_children)
    shown = ", ".join(str(p) for p in pids[:8]) + (f" and {len(pids) - 8} more" if len(pids) > 8 else "")
    peak = max(busy_children.values())
    return (f"no training step seen in this process {when}, while its child processes {shown} were busy "
            f"(up to {peak:.0f}% CPU) and have no record: if they train, pitstop did not see it (a child "
            f"started by subprocess or another launcher is not measured; one started by multiprocessing is, "
            f"from its first optimizer step or backward()); {WHAT_TO_DO}")


class BlindWatch:
    """What the sampler saw of a process that has not stepped; says it once (see module doc)."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self.said = False
        self.busy: dict[int, float] = {}  # child pid -> most CPU seen (role "child": not a DataLoader worker)

    def seen(self, procs: list[Any]) -> None:
        """A sampler reading (sampler thread). Only while nothing stepped: a cost of a few dict writes."""
        if self.said:
            return
        for p in procs:
            if p.role == "child" and p.cpu is not None and p.cpu >= BUSY_CPU:
                self.busy[p.pid] = max(self.busy.get(p.pid, 0.0), p.cpu)

    def check(self, agent: Any, final: bool = False) -> None:
        """Writer thread (2 Hz) and stop(): note the blind spot once, if there is one."""
        if self.said or agent.dormant or agent.disabled or agent.step_index > 0:
            return
        elapsed = time.monotonic() - self.started
        if not final and (elapsed < BLIND_AFTER_S or compiling()):
            # A first step still compiling is no blind spot: its grad calls are the tracer's, its busy
            # children inductor's compile workers (a false note on HF Trainer with torch_compile).
            return
        recorded = _recorded_pids(agent.record_path) if self.busy else {}
        if any(parent == agent.pid for parent in recorded.values()):
            # Children of this process train with records of their own (a spawned DDP job's ranks):
            # what else is busy is theirs (their DataLoader workers), and they are measured.
            self.said = True
            return
        busy = {pid: cpu for pid, cpu in self.busy.items() if pid not in recorded}
        if not final and busy and elapsed < MP_CHILD_AFTER_S and all(map(_by_multiprocessing, busy)):
            return  # (its children will record once they step; the end of the run checks again)
        message = blind_message(None if final else elapsed, busy, agent.clock.grads)
        if message is not None:
            self.said = True
            agent.note("warn", "blind", message, once="blind")


def _by_multiprocessing(pid: int) -> bool:
    """A child started by multiprocessing (so measured from its first step): a spawn's command line runs
    multiprocessing's `spawn_main` (a forkserver's too); a fork's is its parent's, unchanged."""
    import psutil

    try:
        proc = psutil.Process(pid)
        cmdline = proc.cmdline()
        if any("multiprocessing" in part for part in cmdline):
            return True
        parent = proc.parent()
        return parent is not None and parent.cmdline() == cmdline
    except psutil.Error:
        return False


def _recorded_pids(record: Path | None) -> dict[int, int | None]:
    """{pid: its parent's pid where pitstop started it as a child} of every process recording beside
    `record`, from the first line (`hello`) of each file.

    A file name is no guide: a child agent names its file with its pid, but a rank a
    script started itself (Lightning's DDP re-runs the script as rank 1) writes `rank1.jsonl`.
    Read once, when a blind spot is about to be said.
    """
    pids: dict[int, int | None] = {}
    if record is None:
        return pids
    try:
        files = [p for p in record.parent.iterdir() if is_record_name(p)]
    except OSError:
        return pids
    for path in files:
        try:
            hello = json.loads(first_line(path))
            pid, parent = hello.get("pid"), hello.get("parent_pid")
        except (PitstopError, ValueError, AttributeError):
            continue
        if isinstance(pid, int):
            pids[pid] = parent if isinstance(parent, int) else None
    return pids
