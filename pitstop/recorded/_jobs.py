"""Provides the grouping of records into jobs: one job across nodes, each node's front its own session.

Every process of one `pitstop run` shares its session id; a job over N nodes has
N fronts, so N sessions, and one job id its launcher gave every rank
(`Hello.job`: Slurm's job and step, torchrun's run id and rendezvous store, Ray
Train's run). Records group by that job id, and by session where there is none
(older records, a job on one node started without a launcher).

torchrun's run id is "none" unless `--rdzv-id` is given, so two jobs run one
after the other at the same rendezvous address share a job id. Their records
are told apart by their ranks: one job has one process of each rank (a restart
of a rank keeps its session), so two sessions holding the same rank are two runs.
Ray Train's driver has no job id of its own (its workers take theirs from Ray's
train context): it belongs to the job of the workers it started.
"""

from __future__ import annotations

from pitstop.analysis import RunState


def job_key(run: RunState) -> str | None:
    """The job a record belongs to: its launcher's job id, else its front's session; None without a Hello."""
    hello = run.hello
    if hello is None:
        return None
    return hello.job or hello.session


def _runs_of(members: list[RunState]) -> list[list[RunState]]:
    """The runs that reused one job id: sessions in order of start, each joining the first run that holds
    none of its ranks (one job has one process of each rank; a restarted rank keeps its session)."""
    by_session: dict[str, list[RunState]] = {}
    for run in members:
        assert run.hello is not None
        by_session.setdefault(run.hello.session, []).append(run)
    ordered = sorted(by_session.values(), key=lambda rs: min(r.hello.started for r in rs if r.hello is not None))
    clusters: list[tuple[set[int], list[RunState]]] = []
    for runs in ordered:
        ranks = {r.rank for r in runs if r.rank is not None}
        for held, cluster in clusters:
            if not ranks & held:
                held |= ranks
                cluster.extend(runs)
                break
        else:
            clusters.append((set(ranks), list(runs)))
    return [cluster for _, cluster in clusters]


def _parents_jobs(runs: list[RunState]) -> dict[tuple[str, int], str]:
    """(session, pid) -> job of the children it started: Ray Train's driver has no job of its own (its
    workers' job is Ray's train context), and belongs to the job its workers trained in."""
    out: dict[tuple[str, int], str] = {}
    for run in runs:
        hello = run.hello
        if hello is not None and hello.job and hello.parent_pid is not None:
            out.setdefault((hello.session, hello.parent_pid), hello.job)
    return out


def group(runs: list[RunState]) -> list[tuple[str | None, list[RunState]]]:
    """Runs grouped by job, earliest first; a run with no Hello is a group of its own."""
    groups: dict[str, list[RunState]] = {}
    parents = _parents_jobs(runs)
    for i, run in enumerate(runs):
        key = job_key(run)
        if run.hello is not None and not run.hello.job:
            key = parents.get((run.hello.session, run.hello.pid), key)
        groups.setdefault(key if key is not None else f"\0{i}", []).append(run)
    for key, members in list(groups.items()):
        if key.startswith("\0"):
            continue
        runs = _runs_of(members)
        if len(runs) > 1:
            del groups[key]
            for i, cluster in enumerate(runs):
                groups[f"{key} (run {i + 1})"] = cluster

    def started(item: tuple[str, list[RunState]]) -> float:
        return min((r.hello.started for r in item[1] if r.hello is not None), default=float("inf"))

    return [(None if key.startswith("\0") else key, members) for key, members in sorted(groups.items(), key=started)]
