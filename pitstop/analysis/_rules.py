"""Provides `findings`: every advice rule run over one RunState, most important first."""

from __future__ import annotations

from collections.abc import Callable

from pitstop.analysis import _rules_loop as loop
from pitstop.analysis import _rules_model as model
from pitstop.analysis import _rules_resources as resources
from pitstop.analysis import _rules_share as share
from pitstop.analysis import _rules_trends as trends
from pitstop.analysis._context import SEVERITY_RANK, WARMUP, Context, Finding, measure
from pitstop.analysis._state import RunState

Rule = Callable[[Context], "Finding | None"]

# Order breaks severity ties: what breaks the run first (NaN, OOM, shm), then
# what costs the most time as a rule (data stalls, host-bound steps), then
# layout and settings that shave a fraction.
RULES: tuple[tuple[str, Rule], ...] = (
    ("nonfinite-loss", model.nonfinite_loss),
    ("gpu-memory-pressure", resources.memory_pressure),
    ("memory-creep", trends.memory_creep),
    ("shm-small", resources.shm_small),
    ("data-wait", loop.data_wait),
    ("epoch-stall", trends.epoch_stall),
    ("eval-share", share.eval_share),
    ("low-gpu-util", loop.low_gpu_util),
    ("host-sync", loop.host_syncs),
    ("data-parallel", model.data_parallel),
    ("no-amp", model.no_amp),
    ("pageable-h2d", loop.pageable_copies),
    ("workers-oversubscribed", resources.workers_oversubscribed),
    ("cpu-oversubscribed", share.cpu_oversubscribed),
    ("data-wait-moderate", share.data_wait_moderate),
    ("cudnn-benchmark-shapes", model.cudnn_benchmark_shapes),
    ("channels-last", model.channels_last),
    ("cudnn-benchmark", model.cudnn_benchmark_off),
    ("gpu-memory-headroom", resources.memory_headroom),
)
RULE_IDS: tuple[str, ...] = tuple(rule_id for rule_id, _ in RULES)


def findings(run: RunState, warmup: int = WARMUP) -> list[Finding]:
    """Every rule that fires on this run, by severity then by the order of RULES.

    Never raises: a rule that fails on odd data is skipped (its id goes to
    `run_rules(...)[1]` for anyone who wants to know), because advice is never
    worth breaking a viewer over.
    """
    return run_rules(run, warmup)[0]


def run_rules(run: RunState, warmup: int = WARMUP) -> tuple[list[Finding], list[str]]:
    """(findings sorted most important first, ids of rules that raised and were skipped)."""
    try:
        ctx = measure(run, warmup)
    except Exception:  # noqa: BLE001 - a broken stream must not break a viewer
        return [], list(RULE_IDS)
    found: list[tuple[int, int, Finding]] = []
    failed: list[str] = []
    for order, (rule_id, rule) in enumerate(RULES):
        try:
            result = rule(ctx)
        except Exception:  # noqa: BLE001 - one odd value skips one rule, not all advice
            failed.append(rule_id)
            continue
        if result is not None:
            found.append((SEVERITY_RANK.get(result.severity, len(SEVERITY_RANK)), order, result))
    found.sort(key=lambda item: (item[0], item[1]))
    return [f for _, _, f in found], failed
