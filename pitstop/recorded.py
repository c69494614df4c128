"""Provides recorded runs as RunStates: every record file a path names, read through the one reader, grouped by job.

Shared by every front that reads records (the headless summary, `pitstop view`,
`pitstop compare`) and by a run's end summary; it sits below them so that no
front imports another. Also the summary lines that say which processes of a
run trained: a hogwild run trains in `multiprocessing` children, each with its
own record (`hello.parent_pid`), and its main process never steps; read process
by process it said "steps 0, findings: none" for the process a person started.
"""

from __future__ import annotations

import glob
from pathlib import Path

from pitstop.analysis import RunState
from pitstop.profiling.record import ReadResult, iter_record, record_files


def _children_of(target: Path, files: list[Path]) -> list[Path]:
    """Records of child processes that trained beside a `NAME.jsonl` record: `NAME.pid{PID}.jsonl`.

    A hogwild child of `pitstop run --record NAME.jsonl` records there (`record_path_for`);
    without them the run read as "steps 0" while its children trained. A directory
    target already names every record in it.
    """
    if target.is_dir() or target.suffix != ".jsonl" or len(files) != 1:
        return []
    return sorted(target.parent.glob(f"{glob.escape(target.stem)}.pid*.jsonl"))


def load_runs(target: Path) -> tuple[list[RunState], list[str]]:
    """RunStates of every record file `target` names (with its children's), and notes about torn files."""
    runs = []
    notes = []
    files = record_files(target)
    children = _children_of(target, files)
    for path in files + children:
        result = ReadResult()
        run = RunState()
        for event in iter_record(path, result):
            run.add(event)
        if path in children and not _same_session(run, runs[0] if runs else None):
            continue  # another run's file that happens to share the name
        if result.torn:
            notes.append(f"note: {path} ends in a cut line (the run was killed); read up to its last whole line")
        runs.append(run)
    runs.sort(key=lambda r: (r.hello.rank if r.hello and r.hello.rank is not None else -1, r.hello.pid if r.hello else 0))
    return runs, notes


def _same_session(run: RunState, main: RunState | None) -> bool:
    return (run.hello is not None and main is not None and main.hello is not None
            and run.hello.session == main.hello.session)


def sessions(runs: list[RunState]) -> list[tuple[str | None, list[RunState]]]:
    """Runs grouped by job (`hello.session`), earliest first; a run with no Hello is a group of its own."""
    groups: dict[str, list[RunState]] = {}
    for i, run in enumerate(runs):
        key = run.hello.session if run.hello is not None else f"\0{i}"
        groups.setdefault(key, []).append(run)

    def started(item: tuple[str, list[RunState]]) -> float:
        return min((r.hello.started for r in item[1] if r.hello is not None), default=float("inf"))

    return [(None if key.startswith("\0") else key, members) for key, members in sorted(groups.items(), key=started)]


# -- which processes trained ------------------------------------------------------
FINDINGS_NONE = "findings: none"


def children_of(run: RunState, runs: list[RunState]) -> list[RunState]:
    """The runs of `runs` recorded by child processes `run` started (hogwild trainers)."""
    pid = run.pid
    if pid is None:
        return []
    return sorted((r for r in runs if r.hello is not None and r.hello.parent_pid == pid), key=lambda r: r.pid or 0)


def _listed(children: list[RunState]) -> str:
    return ", ".join(f"{r.pid} ({r.total_steps} steps)" for r in children)


def job_lines(runs: list[RunState]) -> list[str]:
    """Rows for a job block with child trainers: who trained, and the steps of every process added up."""
    rows = []
    for run in runs:
        children = children_of(run, runs)
        if children:
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
        at = next((i for i, line in enumerate(lines) if line.startswith("  steps ")), None)
        if at is not None:
            lines.insert(at + 1, extra)
        why = "this process did not step; its children trained, their summaries follow"
    else:
        why = "no training step was seen in this process, so no rule had anything to judge; see the notes"
    return "\n".join(f"{FINDINGS_NONE} ({why})" if line.startswith(FINDINGS_NONE + " (") else line for line in lines)


__all__ = ["annotate", "children_of", "job_lines", "load_runs", "sessions"]
