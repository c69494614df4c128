"""Provides recorded runs as RunStates: every record file a path names, read through its index, grouped by job.

Shared by every front that reads records (the headless summary, `pitstop view`,
`pitstop compare`) and by a run's end summary; it sits below them so that no
front imports another. A record file is folded through its index
(`index_file`): the index saved beside it is restored and only what was
appended since is read, and the index is saved again when it grew.
Also which processes of a run trained (`_trained`): a hogwild run trains in
`multiprocessing` children, each with its own record (`hello.parent_pid`).
"""

from __future__ import annotations

from pathlib import Path

from pitstop.analysis import JobState, RunState
from pitstop.profiling._lastsignal import trace_path
from pitstop.profiling.record import is_record_name, linked_record_files, record_files, siblings
from pitstop.recorded import _jobs, _sidecar
from pitstop.recorded._index import StreamIndex
from pitstop.recorded._sigterm import sigterm_end
from pitstop.recorded._streams import FileStream
from pitstop.recorded._windows import JOB_FULL_RANKS, job_limits
from pitstop.recorded._trained import FINDINGS_NONE, annotate, children_of, job_lines


def index_file(path: Path, index: StreamIndex | None = None, limits: dict[str, int] | None = None) -> StreamIndex:
    """The index of one record file, folded to its end: restored from the saved index where it can be trusted.

    The index is saved again (atomically) when this pass read lines it did not cover:
    a record indexed for the first time, or one that grew since (a live run, the
    lines a run killed with SIGKILL wrote after the index it left). `index`: one this
    returned before for `path` (the keeper's, between its passes), folded on from there.
    `limits`: the most of each series its RunState holds (`StreamIndex.limits`: a job's ranks).
    """
    loaded = True
    if index is None:
        index = StreamIndex(FileStream(path))
        index.limits = limits
        loaded = _sidecar.load(index, path)
        index.stream.cover(index.checkpoints[-1].pos)
    covered = index.checkpoints[-1].fed
    index.index()
    if not loaded or index.total > covered:
        _sidecar.save(index, path, index.stream.stop)
    return index


def _children_of(target: Path, files: list[Path]) -> list[Path]:
    """Records of the other processes of a run beside its `NAME.jsonl` record: the other ranks'
    `NAME.rank{R}.jsonl` and the children that trained, `NAME.pid{PID}.jsonl` (`record_path_for`).

    Without them a torchrun job under `pitstop run --record NAME.jsonl` read as rank 0
    alone, and a hogwild run as "steps 0" while its children trained. A directory
    target already names every record in it.
    """
    if target.is_dir() or not is_record_name(target) or len(files) != 1:
        return []
    return siblings(target, "rank") + siblings(target, "pid")


def job_files(target: Path | list[Path]) -> tuple[list[Path], list[Path]]:
    """(the record files `target` names, the records of the same run's other processes beside a `NAME.jsonl`).

    The second may hold another run's files that happen to share the name: a reader
    keeps those whose `hello.session` is the first file's (as `load_runs` does).
    Several targets (each node's record directory of one job) name every file of each.
    """
    if isinstance(target, list):
        files: list[Path] = []
        children: list[Path] = []
        for one in target:
            more, kids = job_files(one)
            files += [f for f in more if f not in files]
            children += [f for f in kids if f not in children and f not in files]
        return files, children
    files = record_files(target)
    return files, _children_of(target, files) + [f for f in linked_record_files(target) if f not in files]


def load_runs(target: Path | list[Path]) -> tuple[list[RunState], list[str]]:
    """RunStates of every record file `target` names (with its children's), and notes about torn files.
    `target`: a record file or directory, or several (one per node of a job, read as one).

    The ranks of a job of more than JOB_FULL_RANKS hold a share of the series windows
    (`job_limits`), but its first rank (`primary`) and every run of a smaller job hold their own.
    """
    indexes: dict[int, StreamIndex] = {}
    runs: list[RunState] = []
    notes = []
    files, children = job_files(target)
    limits = job_limits(len(files) + len(children))
    for path in files + children:
        index = index_file(path, limits=limits)
        run = index.run
        assert isinstance(index.stream, FileStream)
        if path in children and not _same_session(run, runs[0] if runs else None):
            continue  # another run's file that happens to share the name
        if index.stream.read.torn:
            notes.append(f"note: {path} ends in a cut line (the run was killed); read up to its last whole line")
        end = sigterm_end(run, path)
        if end is not None:
            # The process died of SIGTERM (faulthandler wrote its stacks, then the signal ended it: `_lastsignal`).
            run.add(end)
            notes.append(f"note: pid {run.pid} was ended by SIGTERM; every thread's stack at that moment is in "
                         f"{trace_path(path)}")
        runs.append(run)
        indexes[id(run)] = index
    if limits is not None:
        for _, members in sessions(runs):
            for run in members if len(members) <= JOB_FULL_RANKS else [primary(members)]:
                index = indexes[id(run)]
                runs[runs.index(run)] = index.set_limits(None, index.end) or run
    runs.sort(key=lambda r: (r.hello.rank if r.hello and r.hello.rank is not None else -1, r.hello.pid if r.hello else 0))
    return runs, notes


def primary(runs: list[RunState]) -> RunState:
    """The run a job is shown by (`JobState.primary`): rank 0's, else the first by rank, then pid."""
    return JobState.of_runs(runs).primary() or runs[0]


def _same_session(run: RunState, main: RunState | None) -> bool:
    return (run.hello is not None and main is not None and main.hello is not None
            and run.hello.session == main.hello.session)


def sessions(runs: list[RunState]) -> list[tuple[str | None, list[RunState]]]:
    """Runs grouped by job (`_jobs.group`: the launcher's job id across nodes, else `hello.session`),
    earliest first; a run with no Hello is a group of its own."""
    return _jobs.group(runs)


__all__ = ["FINDINGS_NONE", "JOB_FULL_RANKS", "annotate", "children_of", "index_file", "job_files", "job_limits",
           "job_lines", "load_runs", "primary", "sessions"]
