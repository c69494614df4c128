"""Provides derived figures and advice over pitstop events: pure functions shared by every front.

Standard library and `pitstop.events` only (no torch, textual or rich): the TUI,
the headless printer, `pitstop view`, `pitstop report`, `pitstop compare` and the
tuner all read runs through here, and print figures through `pitstop.analysis.format`.
The `_*` modules are private: a front imports only what this package exports
(the TUI reached into `_summary` and `_rules_loop`).
"""

from __future__ import annotations

from pitstop.analysis import format
from pitstop.analysis._compare import StepComparison, compare_steps, slower_beyond
from pitstop.analysis._context import MIN_STEPS, WARMUP, Advice, Finding, RuleFailure
from pitstop.analysis._cpu import (Contention, CpuFigures, LoaderCpu, contention, cpu_mean, cpu_now, cpu_text,
                                   loader_label, other_cores)
from pitstop.analysis._figures import (
    PHASE_LABELS,
    PHASES,
    DataVerdict,
    PhaseShare,
    StepSplit,
    data_verdict,
    op_phase,
    op_step_share,
    op_time_us,
    step_split,
    window_phases,
    window_step_s,
)
from pitstop.analysis._anatomy import PhaseSplit, phase_split, shares_text
from pitstop.analysis._job import (
    JOB_RULE_IDS,
    STRAGGLER_THRESHOLD,
    JobSummary,
    RankRow,
    job_advice,
    job_findings,
    job_summary,
    rank_status,
    stragglers,
    stream_label,
)
from pitstop.analysis._jobstate import JobState
from pitstop.analysis._models import ModelSpan, model_spans
from pitstop.analysis._nodes import Missing, Nodes, node_lines, node_name, nodes, partial_line
from pitstop.analysis._progress import first_step_progress, first_step_status, first_step_text, progress_text
from pitstop.analysis._rates import RECENT_STEPS, Rates, is_measured, last_measured, rates, rates_of, recent_rates
from pitstop.analysis._rules import RULE_IDS, advise, findings
from pitstop.analysis._state import SERIES, RunState, StreamBatch
from pitstop.analysis._stall import (Wait, dead_worker_finding, describe, headline, job_cause, job_stall_finding,
                                     stack_text, stacks_text, stall_block, stall_finding, stall_open, stall_title,
                                     stall_word, stalled_for,
                                     thread_lines)
from pitstop.analysis._scale import SCALE_PCT, above, scale_top
from pitstop.analysis._straggler import Straggler
from pitstop.analysis._stats import median_and_spread, percentile
from pitstop.analysis._summary import (
    Summary,
    end_reason_text,
    end_text,
    format_summary,
    gpu_reason,
    models_lines,
    note_text,
    status_line,
    summarize,
)

__all__ = [
    "JOB_RULE_IDS",
    "MIN_STEPS",
    "PHASES",
    "PHASE_LABELS",
    "RECENT_STEPS",
    "RULE_IDS",
    "STRAGGLER_THRESHOLD",
    "WARMUP",
    "Advice",
    "Contention",
    "CpuFigures",
    "DataVerdict",
    "Finding",
    "JobState",
    "ModelSpan",
    "JobSummary",
    "Missing",
    "Nodes",
    "LoaderCpu",
    "PhaseShare",
    "PhaseSplit",
    "RankRow",
    "Rates",
    "RuleFailure",
    "RunState",
    "SERIES",
    "StepComparison",
    "StepSplit",
    "Straggler",
    "StreamBatch",
    "Summary",
    "advise",
    "compare_steps",
    "contention",
    "cpu_mean",
    "cpu_now",
    "cpu_text",
    "data_verdict",
    "end_reason_text",
    "end_text",
    "findings",
    "node_lines",
    "node_name",
    "nodes",
    "partial_line",
    "first_step_progress",
    "first_step_status",
    "first_step_text",
    "format",
    "format_summary",
    "model_spans",
    "models_lines",
    "gpu_reason",
    "is_measured",
    "job_advice",
    "job_findings",
    "job_summary",
    "last_measured",
    "loader_label",
    "median_and_spread",
    "note_text",
    "op_phase",
    "other_cores",
    "op_step_share",
    "op_time_us",
    "percentile",
    "SCALE_PCT",
    "above",
    "scale_top",
    "phase_split",
    "progress_text",
    "shares_text",
    "rank_status",
    "rates",
    "rates_of",
    "recent_rates",
    "slower_beyond",
    "status_line",
    "Wait",
    "dead_worker_finding",
    "describe",
    "headline",
    "job_cause",
    "job_stall_finding",
    "stall_block",
    "stack_text",
    "stacks_text",
    "stall_finding",
    "stall_open",
    "stall_title",
    "stall_word",
    "stalled_for",
    "thread_lines",
    "step_split",
    "stragglers",
    "stream_label",
    "summarize",
    "window_phases",
    "window_step_s",
]
