"""Provides the pure parts of gpu_acceptance.py: its table, verdicts against targets, the test results it reads
from pytest's JUnit XML, the order of alternating runs and their ratios, and the time budget of each part."""

from __future__ import annotations

import itertools
import random
import statistics
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from pitstop.tuning.results import Candidate
from pitstop.tuning.space import Space

OK, MISS, FAIL, SKIP, INFO = "ok", "MISS", "FAIL", "skip", ""


@dataclass(frozen=True)
class Row:
    """One line of the table: what was measured, the figure, the target it is held to, and the verdict."""

    part: str
    figure: str
    target: str = ""
    verdict: str = INFO
    detail: str = ""  # printed on the line below, indented
    value: float | None = None  # the figure as a number, for the JSON


@dataclass(frozen=True)
class Target:
    """`<= 1.01` or `>= 2.5`."""

    op: str
    bound: float

    def __str__(self) -> str:
        return f"{self.op} {self.bound:g}"

    def judge(self, value: float | None) -> str:
        if value is None:
            return FAIL
        met = value <= self.bound if self.op == "<=" else value >= self.bound
        return OK if met else MISS


def judged(part: str, figure: str, value: float | None, target: Target, detail: str = "") -> Row:
    """A row whose verdict is its value against the target."""
    return Row(part, figure, str(target), target.judge(value), detail, value)


def failed(part: str, why: str, target: str = "") -> Row:
    return Row(part, f"error: {why}", target, FAIL)


def skipped(part: str, why: str, target: str = "") -> Row:
    return Row(part, f"not measured: {why}", target, SKIP)


def format_table(title: Sequence[str], rows: Sequence[Row], width: int = 118) -> str:
    """Plain text, aligned: part, figure, target, verdict; details indented under their row."""
    part_w = min(34, max([len(r.part) for r in rows] + [4]))
    target_w = max([len(r.target) for r in rows] + [6])
    verdict_w = max([len(r.verdict) for r in rows] + [7])
    figure_w = max(20, width - part_w - target_w - verdict_w - 6)
    lines = [*title, "",
             f"{'part'.ljust(part_w)}  {'figure'.ljust(figure_w)}  {'target'.ljust(target_w)}  verdict"]
    lines.append("-" * len(lines[-1]))
    for r in rows:
        figure = r.figure if len(r.figure) <= figure_w else r.figure[: figure_w - 1] + "…"
        lines.append(f"{r.part[:part_w].ljust(part_w)}  {figure.ljust(figure_w)}  {r.target.ljust(target_w)}  "
                     f"{r.verdict}".rstrip())
        if len(r.figure) > figure_w:
            lines.append(f"{' ' * (part_w + 2)}{r.figure}")
        if r.detail:
            lines.append(f"{' ' * (part_w + 2)}{r.detail}")
    counts = {v: sum(1 for r in rows if r.verdict == v) for v in (OK, MISS, FAIL, SKIP)}
    lines += ["", ", ".join(f"{n} {v}" for v, n in counts.items())]
    return "\n".join(lines)


def exit_code(rows: Sequence[Row]) -> int:
    """0: every target met and every part ran; 1: a target missed, or a part failed or was not measured."""
    return 1 if any(r.verdict in (MISS, FAIL, SKIP) for r in rows) else 0


def to_json(title: Sequence[str], rows: Sequence[Row], facts: dict[str, Any]) -> dict[str, Any]:
    return {"title": list(title), "facts": facts, "rows": [asdict(r) for r in rows], "exit_code": exit_code(rows)}


# ---------------------------------------------------------------- pytest's results


@dataclass(frozen=True)
class CaseOutcome:
    """One test as pytest's JUnit XML reports it."""

    name: str  # "test_module::test_name"
    outcome: str  # "passed" | "failed" | "error" | "skipped"
    seconds: float
    message: str = ""


def junit_outcomes(xml_text: str) -> list[CaseOutcome]:
    """Every test case of a JUnit XML report (pytest --junitxml)."""
    root = ET.fromstring(xml_text)
    out = []
    for case in root.iter("testcase"):
        module = case.get("classname", "").rsplit(".", 1)[-1]
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed"}.get(tag, tag)
                message = (found.get("message") or found.text or "").strip().splitlines()[0:1]
                message = message[0] if message else ""
                break
        out.append(CaseOutcome(f"{module}::{case.get('name', '?')}", outcome, float(case.get("time", 0.0)), message))
    return out


def rows_of_tests(outcomes: Sequence[CaseOutcome]) -> list[Row]:
    """A summary row (with the skip reasons), then one row per test module and test: its outcome and time, and
    the first line of its message when it failed."""
    counts = {k: sum(1 for o in outcomes if o.outcome == k) for k in ("passed", "failed", "error", "skipped")}
    summary = ", ".join(f"{n} {k}" for k, n in counts.items() if n or k in ("passed", "failed"))
    verdict = OK if outcomes and counts["passed"] == len(outcomes) else FAIL if counts["failed"] or counts[
        "error"] or not outcomes else SKIP
    reasons = "; ".join(dict.fromkeys(o.message for o in outcomes if o.outcome == "skipped" and o.message))
    rows = [Row(f"tests/gpu ({len(outcomes)} tests)", summary, "all pass", verdict, detail=reasons,
                value=float(counts["passed"]))]
    for o in outcomes:
        module, _, test = o.name.partition("::")
        mark = {"passed": OK, "skipped": SKIP}.get(o.outcome, FAIL)
        rows.append(Row(f"  {module}", f"{o.outcome} in {o.seconds:.1f} s: {test}", "", mark,
                        detail=o.message if o.outcome in ("failed", "error") else "", value=o.seconds))
    return rows


# ---------------------------------------------------------------- alternating runs


def alternation(rounds: int, arms: tuple[str, str] = ("plain", "config")) -> list[tuple[int, str]]:
    """(round, arm) in ABBA order, so a drift of the machine lands on both arms alike."""
    order = []
    for i in range(rounds):
        pair = arms if i % 2 == 0 else arms[::-1]
        order += [(i, arm) for arm in pair]
    return order


def paired_ratios(runs: dict[tuple[int, str], float | None], arms: tuple[str, str] = ("plain", "config")
                  ) -> list[float]:
    """config / plain round by round, for the rounds where both arms measured a figure."""
    rounds = sorted({i for i, _ in runs})
    out = []
    for i in rounds:
        base, other = runs.get((i, arms[0])), runs.get((i, arms[1]))
        if base and other:
            out.append(other / base)
    return out


@dataclass(frozen=True)
class Ratio:
    median: float
    low: float
    high: float
    n: int

    def text(self) -> str:
        spread = f", x{self.low:.2f}..x{self.high:.2f}" if self.n > 1 else ""
        return f"x{self.median:.2f} ({self.n} round{'s' if self.n != 1 else ''}{spread})"


def summarize(ratios: Sequence[float]) -> Ratio | None:
    if not ratios:
        return None
    return Ratio(statistics.median(ratios), min(ratios), max(ratios), len(ratios))


def measure_alternating(rounds: int, measure: Callable[[int, str], float | None],
                        more_time: Callable[[], bool] = lambda: True) -> dict[tuple[int, str], float | None]:
    """Run `measure(round, arm)` in ABBA order; a round starts only while `more_time()` says both runs fit."""
    runs: dict[tuple[int, str], float | None] = {}
    order = alternation(rounds)
    for k in range(0, len(order), 2):
        if not more_time():
            break
        for i, arm in order[k:k + 2]:
            runs[(i, arm)] = measure(i, arm)
    return runs


# ---------------------------------------------------------------- time


@dataclass
class Deadline:
    """The whole run's time, shared out: a part gets its own budget or what is left after the parts to come."""

    total_s: float
    clock: Callable[[], float] = time.monotonic
    start: float = field(default=0.0)

    def __post_init__(self) -> None:
        self.start = self.clock()

    def left(self) -> float:
        return self.total_s - (self.clock() - self.start)

    def elapsed(self) -> float:
        return self.clock() - self.start

    def grant(self, want: float, reserve: float = 0.0, least: float = 0.0) -> float:
        """Seconds for a part that wants `want`, keeping `reserve` for the parts after it; 0 when under `least`."""
        can = min(want, self.left() - reserve)
        return can if can >= max(least, 1.0) else 0.0


# ---------------------------------------------------------------- the grid


def grid_candidates(space: Space, pick: Candidate, quick: bool) -> list[Candidate]:
    """The grid the tuner's pick is held against, in a fixed shuffled order (a grid cut short by time is a sample).

    Workers (the script's own, about half the most, and the most of the tuner's values) x every AMP mode x channels-last
    x cudnn.benchmark; the data knobs and the batch size as the pick set them: the full grid of all eight
    knobs is thousands of runs (36 here, 16 with `quick`: two worker counts and bf16 only).
    """
    workers = space.workers or [int(space.own.get("num_workers") or 0)]
    half = min(workers, key=lambda w: abs(w - workers[-1] / 2))
    counts = [workers[0], workers[-1]] if quick else [workers[0], half, workers[-1]]
    amps = [None, *(a for a in space.compute.get("amp", []) if not quick or a == "bf16")]
    layouts = [None, *space.compute.get("channels_last", [])]
    cudnn = [None, *space.compute.get("cudnn_benchmark", [])]
    fixed = {k: v for k, v in pick.as_dict().items() if k in ("pin_memory", "persistent_workers",
                                                               "prefetch_factor", "batch_size")}
    out: list[Candidate] = []
    for count, amp, layout, bench in itertools.product(dict.fromkeys(counts), amps, layouts, cudnn):
        cand = Candidate().with_("num_workers", count, space.own)
        for knob, value in fixed.items():
            if count or knob not in ("persistent_workers", "prefetch_factor"):  # both need workers
                cand = cand.with_(knob, value, space.own)
        for knob, value in (("amp", amp), ("channels_last", layout), ("cudnn_benchmark", bench)):
            if value is not None:
                cand = cand.with_(knob, value, space.own)
        if cand not in out:
            out.append(cand)
    random.Random(15).shuffle(out)
    return out
