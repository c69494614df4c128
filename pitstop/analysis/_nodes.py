"""Provides the node view of a job: which node each rank ran on, ranks never seen, slow nodes.

A job over several nodes is one job (`JobSummary` over every rank, whatever
node wrote its record); what the nodes add is where each rank ran
(`Hello.node`, else its host), which ranks of the world size no record was read
for and on which node they would have run, and a node all of whose ranks are
stragglers: there the node is slow (its GPUs, its network, its disks), not a rank.
Pure functions over RunStates and a JobSummary; every front shares them.
"""

from __future__ import annotations

from dataclasses import dataclass

from pitstop.analysis._job import JobSummary
from pitstop.analysis._state import RunState


@dataclass(frozen=True)
class Missing:
    """A rank of the world size no record was read for, with the node it would have run on where known."""

    rank: int
    node_rank: int | None  # rank // ranks per node, when the launcher said how many a node runs
    node: str | None  # that node's name, when another of its ranks wrote

    @property
    def text(self) -> str:
        where = f" on node {self.node}" if self.node else (f" on node rank {self.node_rank}" if self.node_rank is not None
                                                           else "")
        return f"rank {self.rank}{where}"


@dataclass(frozen=True)
class Nodes:
    """The nodes of a job as its records tell them."""

    job: str | None  # the launcher's job id (Hello.job), None for a job on one front
    launcher: str | None
    node_of: dict[int, str]  # rank -> node name
    nodes: tuple[str, ...]  # in order of their first rank
    expected_nodes: int | None  # what the launcher said (GROUP_WORLD_SIZE, SLURM_JOB_NUM_NODES)
    world_size: int | None
    missing: tuple[Missing, ...]
    slow: tuple[tuple[str, tuple[int, ...]], ...]  # (node, its ranks) whose every rank is a straggler

    @property
    def spans(self) -> bool:
        """More than one node, seen or said by the launcher."""
        return len(self.nodes) > 1 or (self.expected_nodes or 1) > 1


def node_name(run: RunState) -> str | None:
    """The node a run's process ran on: the launcher's name for it, else its host."""
    hello = run.hello
    if hello is None:
        return None
    return hello.node or hello.host


def _ranges(ranks: list[int]) -> str:
    """"0-7, 9" for [0..7, 9]."""
    out: list[str] = []
    start = prev = None
    for r in sorted(ranks):
        if start is not None and prev is not None and r == prev + 1:
            prev = r
            continue
        if start is not None:
            out.append(str(start) if start == prev else f"{start}-{prev}")
        start = prev = r
    if start is not None:
        out.append(str(start) if start == prev else f"{start}-{prev}")
    return ", ".join(out)


def nodes(runs: list[RunState], summary: JobSummary | None = None) -> Nodes:
    """Where the ranks of one job ran, which are missing, and (with its `summary`) which nodes are slow."""
    hellos = [r.hello for r in runs if r.hello is not None]
    job = next((h.job for h in hellos if h.job), None)
    launcher = next((h.launcher for h in hellos if h.launcher), None)
    node_of: dict[int, str] = {}
    by_node_rank: dict[int, str] = {}
    order: list[str] = []
    per_node: int | None = None
    ranked = any(r.rank is not None for r in runs)
    for run in sorted(runs, key=lambda r: (r.rank is None, r.rank or 0)):
        name, hello = node_name(run), run.hello
        if name is None or hello is None:
            continue
        # A process that is no rank (Ray Train's driver) runs no share of the job: its node is not one of the
        # job's ("2 seen of 1 (node-b: ranks 0-1; vm: ranks )" for workers on a cluster started apart).
        if name not in order and (run.rank is not None or not ranked):
            order.append(name)
        if run.rank is not None:
            node_of[run.rank] = name
        if hello.node_rank is not None:
            by_node_rank.setdefault(hello.node_rank, name)
        per_node = per_node or hello.local_world_size
    expected = max((h.nodes for h in hellos if h.nodes), default=None)
    world = max((r.hello.world_size for r in runs if r.hello is not None and r.hello.world_size), default=None)
    missing: list[Missing] = []
    if world is not None:
        for rank in range(world):
            if rank in node_of:
                continue
            node_rank = rank // per_node if per_node else None
            missing.append(Missing(rank, node_rank, by_node_rank.get(node_rank) if node_rank is not None else None))
    slow: list[tuple[str, tuple[int, ...]]] = []
    if summary is not None and len(order) > 1:
        lagging = {s.rank for s in summary.stragglers if s.rank is not None}
        for name in order:
            mine = tuple(sorted(r for r, n in node_of.items() if n == name))
            if mine and set(mine) <= lagging and any(r not in lagging for r in node_of):
                slow.append((name, mine))
    return Nodes(job, launcher, node_of, tuple(order), expected, world, tuple(missing), tuple(slow))


def node_lines(view: Nodes, label: str) -> list[str]:
    """Rows of the job block (`label` formats a row: "  nodes       2 ..."): the nodes, slow nodes, missing ranks."""
    if not view.spans and not view.missing:
        return []
    lines = []
    if view.spans:
        counts = {name: sum(1 for n in view.node_of.values() if n == name) for name in view.nodes}
        said = f" of {view.expected_nodes}" if view.expected_nodes and view.expected_nodes != len(view.nodes) else ""
        if len(set(counts.values())) == 1 and len(view.nodes) > 4:
            each = f"{next(iter(counts.values()))} ranks each"
        else:
            each = "; ".join(f"{name}: rank{'s' if counts[name] != 1 else ''} "
                             f"{_ranges([r for r, n in view.node_of.items() if n == name])}" for name in view.nodes)
        lines.append(label("nodes", f"{len(view.nodes)} seen{said} ({each})"))
    for i, (name, ranks) in enumerate(view.slow):
        which = (f"its only rank is a straggler (rank {ranks[0]})" if len(ranks) == 1 else
                 f"all its {len(ranks)} ranks are stragglers (ranks {_ranges(list(ranks))}): the node is slow, not a rank")
        lines.append(label("slow node" if i == 0 else "", f"{name}: {which}"))
    if view.missing:
        shown = ", ".join(m.text for m in view.missing[:8]) + (f" and {len(view.missing) - 8} more"
                                                                 if len(view.missing) > 8 else "")
        lines.append(label("missing", f"{shown}: no record of {'them' if len(view.missing) > 1 else 'it'} was read "
                                      "(its node never wrote, or its node's records were not given)"))
    return lines


def partial_line(view: Nodes, seen: int, here: str | None = None) -> str | None:
    """What one node's own records say of the job when the others ran elsewhere; None when all were read.
    `here`: this node's record (a directory or file), named in the command that reads them together."""
    if view.world_size is None or seen >= view.world_size or not view.missing:
        return None
    if not view.job and (view.expected_nodes or 1) <= 1:
        return None  # ranks of one front that never wrote: the job block's missing row says it
    elsewhere = {m.node_rank for m in view.missing if m.node_rank is not None}
    where = f" (node rank{'s' if len(elsewhere) != 1 else ''} {_ranges(sorted(elsewhere))})" if elsewhere else ""
    return (f"pitstop: these are {seen} of world size {view.world_size} ranks; the others ran on other nodes{where}. "
            f"Read them together: pitstop view {here or 'NODE0_RECORD'} OTHER_NODES_RECORDS... --summary (every "
            "node's record directory), or record every node into one shared directory (--record /shared/run)")
