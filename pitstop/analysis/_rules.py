"""Provides `findings`: every advice rule run over one RunState, most important first."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from pitstop.analysis import _rules_loop as loop
from pitstop.analysis import _rules_model as model
from pitstop.analysis import _rules_precision as precision
from pitstop.analysis import _rules_resources as resources
from pitstop.analysis import _rules_share as share
from pitstop.analysis import _rules_trends as trends
from pitstop.analysis import _stall as stall
from pitstop.analysis.command import tune_line
from pitstop.analysis._context import SEVERITY_RANK, WARMUP, Advice, Context, Finding, RuleFailure, measure
from pitstop.errors import reason_of
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
    ("float64", precision.float64),
    ("no-amp", precision.no_amp),
    ("pageable-h2d", loop.pageable_copies),
    ("workers-oversubscribed", resources.workers_oversubscribed),
    ("cpu-oversubscribed", share.cpu_oversubscribed),
    ("cpu-contended", resources.cpu_contended),
    ("data-wait-moderate", share.data_wait_moderate),
    ("cudnn-benchmark-shapes", model.cudnn_benchmark_shapes),
    ("channels-last", model.channels_last),
    ("cudnn-benchmark", model.cudnn_benchmark_off),
    ("gpu-memory-headroom", resources.memory_headroom),
)
RULE_IDS: tuple[str, ...] = tuple(rule_id for rule_id, _ in RULES)


def findings(run: RunState, warmup: int = WARMUP) -> list[Finding]:
    """Every rule that fires on this run, by severity then by the order of RULES.

    Never raises, and drops the failures: a front uses `advise`, which keeps them
    to show (a rule that raised vanished from every front).
    """
    return list(advise(run, warmup).findings)


def advise(run: RunState, warmup: int = WARMUP) -> Advice:
    """Every rule over this run: the findings sorted most important first, and the rules that raised.

    Never raises: one odd value skips one rule, not all advice, because advice is
    never worth breaking a viewer over; the skipped rule is reported, not hidden.
    """
    stuck = _stall_advice(run)
    try:
        ctx = measure(run, warmup)
    except Exception as err:  # noqa: BLE001 - a broken stream must not break a viewer
        return stuck + Advice(failures=(RuleFailure("measure", reason_of(err)),))
    found: list[tuple[int, int, Finding]] = []
    failed: list[RuleFailure] = []
    for order, (rule_id, rule) in enumerate(RULES):
        try:
            result = rule(ctx)
        except Exception as err:  # noqa: BLE001 - reported in Advice.failures
            failed.append(RuleFailure(rule_id, reason_of(err)))
            continue
        if result is not None:
            if result.knob and not result.tune:
                result = replace(result, tune=tune_line(run.hello, result.knob.split(",")))
            found.append((SEVERITY_RANK.get(result.severity, len(SEVERITY_RANK)), order, result))
    found.sort(key=lambda item: (item[0], item[1]))
    return stuck + Advice(tuple(f for _, _, f in found), tuple(failed))


def _stall_advice(run: RunState) -> Advice:
    """A stall, or a dead DataLoader worker, first: they need no measured step (a run stuck at step 19
    has fewer than the timing rules wait for), and nothing else matters while the run does not move."""
    found: list[Finding] = []
    failed: list[RuleFailure] = []
    for rule_id, rule in (("stall", stall.stall_finding), ("worker-died", stall.dead_worker_finding)):
        try:
            result = rule(run)
        except Exception as err:  # noqa: BLE001 - reported in Advice.failures
            failed.append(RuleFailure(rule_id, reason_of(err)))
            continue
        if result is not None:
            found.append(result)
    return Advice(tuple(found), tuple(failed))
