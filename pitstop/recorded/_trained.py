"""Provides the summary lines that say which processes of a run trained (hogwild children, a main process that never stepped)."""

from __future__ import annotations

from pathlib import PurePath

from pitstop.analysis import RunState

FINDINGS_NONE = "findings: none"


def children_of(run: RunState, runs: list[RunState]) -> list[RunState]:
    """The runs of `runs` recorded by child processes `run` started (hogwild trainers)."""
    pid = run.pid
    if pid is None:
        return []
    return sorted((r for r in runs if r.hello is not None and r.hello.parent_pid == pid), key=lambda r: r.pid or 0)

def _listed(children: list[RunState]) -> str:
    return ", ".join(f"{r.pid} ({r.total_steps} steps)" for r in children)

def _ray(children: list[RunState]) -> bool:
    """These children are Ray Train workers (their job is Ray's train context)."""
    return any(r.hello is not None and r.hello.launcher == "ray" for r in children)


def _elsewhere(run: RunState, children: list[RunState]) -> list[str]:
    """The directories the children's records are in, where not the driver's own (Ray Train's storage path)."""
    own = str(PurePath(run.hello.record).parent) if run.hello is not None and run.hello.record else None
    out: list[str] = []
    for child in children:
        if child.hello is None or not child.hello.record:
            continue
        folder = str(PurePath(child.hello.record).parent)
        if folder != own and folder not in out:
            out.append(folder)
    return out


def job_lines(runs: list[RunState]) -> list[str]:
    """Rows for a job block with child trainers: who trained, and the steps of every process added up."""
    rows = []
    for run in runs:
        children = children_of(run, runs)
        if children and _ray(children):
            rows.append(("driver", f"pid {run.pid}, Ray Train's driver: it does not train; its {len(children)} Ray "
                                   f"Train workers did: {_listed(children)}"))
            elsewhere = _elsewhere(run, children)
            if elsewhere:
                rows.append(("records", f"the workers' under the run's storage path: {', '.join(elsewhere)}"))
        elif children:
            rows.append(("children", f"{len(children)} child processes of pid {run.pid} trained: {_listed(children)}"))
    if not rows:
        return []
    total = sum(r.total_steps for r in runs)
    trained = sum(1 for r in runs if r.total_steps)
    rows.append(("all steps", f"{total} across {trained} training processes ({len(runs)} processes recorded)"))
    return [f"  {label:<11} {text}" for label, text in rows]

def annotate(text: str, run: RunState, runs: list[RunState]) -> str:
    """One process's summary, told where its training went: children that trained, or a step never seen."""
    if run.total_steps:
        return text
    children = children_of(run, runs)
    lines = text.split("\n")
    if children:
        total = sum(r.total_steps for r in children)
        extra = f"  {'children':<11} trained in child processes {_listed(children)}: {total} steps in all (below)"
        why = "this process did not step; its children trained, their summaries follow"
        if _ray(children):
            extra = (f"  {'driver':<11} Ray Train's driver: it does not train, as a launcher does not; its "
                     f"{len(children)} Ray Train workers trained {total} steps in all (the job block above)")
            why = "Ray Train's driver does not train; its workers did, their summaries follow"
        at = next((i for i, line in enumerate(lines) if line.startswith("  steps ")), None)
        if at is not None:
            lines.insert(at + 1, extra)
    elif any(note.level in ("warn", "error") for note in run.notes):
        why = "no training step was seen in this process, so no rule had anything to judge; see the notes"
    else:
        why = ("no training step was seen in this process (no optimizer step, backward call or pitstop.step()), "
               "so no rule had anything to judge")
    return "\n".join(f"{FINDINGS_NONE} ({why})" if line.startswith(FINDINGS_NONE + " (") else line for line in lines)

