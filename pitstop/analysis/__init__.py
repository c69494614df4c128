"""Provides derived figures and advice over pitstop events: pure functions shared by every front.

Standard library and `pitstop.events` only (no torch, textual or rich): the TUI,
the headless printer, `pitstop view` and the tuner all read runs through here.
"""

from __future__ import annotations

from pitstop.analysis._anatomy import PhaseSplit, phase_split
from pitstop.analysis._context import Finding
from pitstop.analysis._job import (
    STRAGGLER_THRESHOLD,
    JobSummary,
    RankRow,
    Straggler,
    job_findings,
    job_summary,
    rank_status,
    stragglers,
)
from pitstop.analysis._rules import RULE_IDS, findings, run_rules
from pitstop.analysis._state import JobState, RunState, StreamBatch
from pitstop.analysis._stats import median_and_spread, percentile
from pitstop.analysis._summary import (
    Summary,
    fmt_bytes,
    fmt_ms,
    fmt_pct,
    format_summary,
    status_line,
    summarize,
)

__all__ = [
    "RULE_IDS",
    "STRAGGLER_THRESHOLD",
    "Finding",
    "JobState",
    "JobSummary",
    "PhaseSplit",
    "RankRow",
    "Straggler",
    "RunState",
    "StreamBatch",
    "Summary",
    "findings",
    "fmt_bytes",
    "fmt_ms",
    "fmt_pct",
    "format_summary",
    "job_findings",
    "job_summary",
    "median_and_spread",
    "percentile",
    "phase_split",
    "rank_status",
    "run_rules",
    "status_line",
    "stragglers",
    "summarize",
]
