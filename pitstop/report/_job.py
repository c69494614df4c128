"""Provides a job's report parts: the ranks its charts draw, its headline rows, and every rank's findings.

A job's report leads with the job: a 2-rank job whose rank 1 waited for its
batches (85% of its step) read as rank 0's run, "data wait 10%", with rank 0's
charts only, because every rank's step time is the same in DDP (each waits for
the slowest in the all-reduce). The headline names the straggler with its
figures and each rank's data wait, and the charts draw each rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pitstop.analysis import Finding, JobSummary, RankRow, RunState, advise
from pitstop.analysis import format as fmt
from pitstop.charts import pick_ranks
from pitstop.report._series import RunSeries

# Up to 8 ranks each get a line in the report's charts (Okabe-Ito has 8 colours
# that stay apart); of more, the stragglers, else the slowest, and the median.
MOST_DRAWN = 8
# Per-rank figures on one headline row for up to this many ranks; of more, the lowest,
# the median and the highest (the Ranks table lists every rank).
MOST_LISTED = 8


@dataclass(frozen=True)
class RankSeries:
    """One process of the record with its whole-run series, as the charts draw it."""

    label: str  # "rank 1"
    why: str  # why it is drawn among many: "straggler" | "slowest" | "median"; "" when all are
    run: RunState
    series: RunSeries

    @property
    def name(self) -> str:
        """The legend's text: "rank 7 (straggler)", or "rank 1" when every rank is drawn."""
        return f"{self.label} ({self.why})" if self.why else self.label


def drawn(ranked: Sequence[tuple[str, RunState]], series: dict[int, RunSeries], job: JobSummary | None,
          most: int = MOST_DRAWN) -> list[RankSeries]:
    """The ranks the charts draw (`pick_ranks`), each with its series (`series` keyed by id(run))."""
    named = [s.label for s in job.stragglers] if job is not None else []
    return [RankSeries(label, why, run, series[id(run)]) for label, run, why in pick_ranks(ranked, most, named)]


def _listed(rows: Sequence[RankRow], key: Callable[[RankRow], float | None], text: Callable[[RankRow], str]) -> str:
    """Each rank's figure on one line: "rank 0 10%, rank 1 85%"; of many, the lowest, median and highest."""
    known = sorted((r for r in rows if key(r) is not None), key=lambda r: key(r) or 0.0)
    if not known:
        return fmt.na("no rank measured a training step")
    if len(known) <= MOST_LISTED:
        return ", ".join(f"{row.label} {text(row)}" for row in rows if key(row) is not None)
    ends = (("lowest", known[0]), ("median", known[len(known) // 2]), ("highest", known[-1]))
    return (", ".join(f"{what} {row.label} {text(row)}" for what, row in ends)
            + f" (of {len(known)} ranks; every rank in the Ranks table)")


def headline(job: JobSummary) -> list[tuple[str, str]]:
    """The job's figures as (label, text) rows: ranks, throughput, stragglers and why, data wait and step per rank."""
    status = {s: sum(1 for r in job.rows if r.status == s) for s in ("running", "finished", "gone", "stopped")}
    seen = f"{job.ranks} seen" + (f" of world size {job.world_size}" if job.world_size is not None else "")
    rows = [("ranks", seen + " (" + ", ".join(f"{n} {s}" for s, n in status.items() if n) + ")")]
    through = (f"{fmt.rate(job.samples_per_s, 'samples')} (sum over ranks)" if job.samples_per_s is not None
               else fmt.na("a rank did not report its batch size, or no measured step"))
    if job.steps_per_s is not None:
        through += f", {fmt.rate(job.steps_per_s, 'steps')} (the slowest rank's)"
    rows.append(("job throughput", through))
    for i, s in enumerate(job.stragglers):
        rows.append(("straggler" if i == 0 else "", f"{s.text}; the job waits {fmt.pct(s.share)} of its "
                     f"{fmt.duration(s.job_step_s)} step (p50 over the same steps) on {s.label}"))
    if not job.stragglers:
        rows.append(("straggler", "none (no rank persistently slower than the others)"))
    rows.append(("data wait", _listed(job.rows, lambda r: r.data_wait_frac, lambda r: (
        f"{fmt.pct(r.data_wait_frac)} of its step (p50 {fmt.duration(r.data_wait_p50_s)})"))))
    rows.append(("step p50", "over every measured step: "
                 + _listed(job.rows, lambda r: r.step_p50_s, lambda r: fmt.duration(r.step_p50_s))))
    for row in job.gone:
        last = f", last step {row.last_step}" if row.last_step is not None else ", before its first step"
        rows.append(("gone", f"{row.label} (pid {row.pid}): {row.status_reason}{last}"))
    if job.stopped is not None:
        rows.append(("stopped", job.stopped.removeprefix("stopped ")))
        for row in job.stopped_ranks:
            last = f", last step {row.last_step}" if row.last_step is not None else ", before its first step"
            rows.append(("", f"{row.label} (pid {row.pid}): {row.status_reason}{last}"))
    return rows


def rank_findings(ranked: Sequence[tuple[str, RunState]], warmup: int) -> tuple[list[Finding], list[str]]:
    """Every rank's findings, one per rule (the first rank's that has it, saying how many others do),
    titled with the rank; and the rule failures as notes."""
    by_rule: dict[str, tuple[str, Finding, list[str]]] = {}
    notes = []
    for label, run in ranked:
        advice = advise(run, warmup)
        notes += [f"{label}: {failure.text}" for failure in advice.failures]
        for f in advice.findings:
            if f.rule in by_rule:
                by_rule[f.rule][2].append(label)
            else:
                by_rule[f.rule] = (label, f, [])
    found = []
    for label, f, others in by_rule.values():
        names = ", ".join(others[:MOST_LISTED]) + (", ..." if len(others) > MOST_LISTED else "")
        also = f" (and {fmt.count(len(others), 'other rank')}: {names})" if others else ""
        found.append(dataclasses.replace(f, title=f"{label}{also}: {f.title}"))
    return found, notes


__all__ = ["MOST_DRAWN", "RankSeries", "drawn", "headline", "rank_findings"]
