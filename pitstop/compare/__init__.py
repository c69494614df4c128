"""Provides `pitstop compare A B`: two recorded runs, a verdict with its interval, and what changed.

Exit codes (docs/compare.md): 0 compared (and B is not slower than
`--fail-if-slower` allows); 1 B is slower than A by more than PCT beyond the
noise; 2 an error: a record that cannot be read, or runs that are not
comparable; 3 `--fail-if-slower` was asked but a run was too short to tell.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from pitstop.analysis import RunState, slower_beyond
from pitstop.compare._model import Comparison, build, primary
from pitstop.compare._text import comparison_text, distribution_plot, verdict_text
from pitstop.errors import UsageError

EXIT_OK = 0
EXIT_SLOWER = 1
EXIT_TOO_SHORT = 3


def load_job(path: Path, name: str) -> list[RunState]:
    """Every process of the one run a record file or session directory holds."""
    from pitstop.recorded import load_runs, sessions

    runs, _ = load_runs(path)
    groups = sessions(runs)
    if len(groups) > 1:
        ids = ", ".join(session or "unknown" for session, _ in groups)
        raise UsageError(f"{name} ({path}) holds records of {len(groups)} different runs ({ids}): "
                         "give one run's file or directory")
    return runs


def script_key(script: str) -> str:
    """What makes two runs the same program: the module for -m, else the script's file name."""
    script = script.strip()
    if script.startswith("-m "):
        return script
    first = script.split()[0] if script.split() else ""
    return Path(first).name


def comparable(a: list[RunState], b: list[RunState]) -> str:
    """"" when the runs can be compared, else the one-line reason they cannot."""
    sa = primary(a).hello
    sb = primary(b).hello
    script_a = sa.script if sa is not None else ""
    script_b = sb.script if sb is not None else ""
    if script_key(script_a) != script_key(script_b):
        return f"A ran {script_a or '?'} and B ran {script_b or '?'}: not the same script"
    return ""


def compare_paths(a: Path, b: Path, force: bool = False) -> Comparison:
    """Load and compare; UsageError (one line) when the runs are not comparable and `force` is off."""
    runs_a, runs_b = load_job(a, "A"), load_job(b, "B")
    reason = comparable(runs_a, runs_b)
    if reason and not force:
        raise UsageError(f"not comparable: {reason} (--force compares them anyway)")
    return build(str(a), runs_a, str(b), runs_b, forced=reason)


def gate(c: Comparison, pct: float | None) -> int:
    """The exit code of `--fail-if-slower PCT` (EXIT_OK without it)."""
    if pct is None:
        return EXIT_OK
    slower = slower_beyond(c.steps, pct)
    if slower is None:
        return EXIT_TOO_SHORT
    return EXIT_SLOWER if slower else EXIT_OK


def gate_text(c: Comparison, pct: float, code: int) -> str:
    """One line for CI logs saying why the gate passed or failed."""
    if code == EXIT_TOO_SHORT:
        return f"pitstop: --fail-if-slower {pct:g}: cannot tell, {c.steps.reason} (exit {code})"
    st = c.steps
    assert st.ratio is not None and st.low is not None and st.high is not None
    # One decimal, not format.change's whole percent above 1%: a gate is read against its
    # threshold, and "+5%" would not say whether +4.96% passed --fail-if-slower 5.
    where = (f"B's step time is {(st.ratio - 1) * 100:+.1f}% against A "
             f"({st.confidence:.0%} interval {(st.low - 1) * 100:+.1f}% to {(st.high - 1) * 100:+.1f}%)")
    if code == EXIT_SLOWER:
        return f"pitstop: --fail-if-slower {pct:g}: failed: {where}, all of it over the +{pct:g}% allowed (exit {code})"
    return f"pitstop: --fail-if-slower {pct:g}: passed: {where}, not all of it over the +{pct:g}% allowed"


def to_json(c: Comparison, pct: float | None = None, code: int | None = None) -> str:
    """The comparison for machines: every figure, in seconds, bytes and fractions."""
    def metric(m: Any) -> dict[str, Any]:
        return {**dataclasses.asdict(m), "change": m.change}

    def side(s: Any) -> dict[str, Any]:
        d = dataclasses.asdict(s)
        d.pop("walls")
        return d

    out: dict[str, Any] = {
        "a": side(c.a),
        "b": side(c.b),
        "verdict": c.steps.verdict,
        "verdict_text": verdict_text(c.steps),
        "steps": {**dataclasses.asdict(c.steps), "change": c.steps.change},
        "metrics": [metric(m) for m in c.metrics],
        "phases_ms": [metric(m) for m in c.phases],
        "ops_us": [metric(m) for m in c.ops],
        "settings": [dataclasses.asdict(s) for s in c.settings],
        "findings": {
            "appeared": [dataclasses.asdict(f) for f in c.appeared],
            "gone": [dataclasses.asdict(f) for f in c.gone],
            "kept": [dataclasses.asdict(f) for f in c.kept],
        },
        "notes": list(c.notes),
    }
    if pct is not None:
        out["fail_if_slower"] = {"pct": pct, "exit_code": code}
    return json.dumps(_finite(out), indent=2, allow_nan=False, default=str)


def _finite(value: Any) -> Any:
    """NaN and inf become null: JSON has no such numbers, and a reader must not choke on one."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


__all__ = [
    "EXIT_OK",
    "EXIT_SLOWER",
    "EXIT_TOO_SHORT",
    "Comparison",
    "comparable",
    "compare_paths",
    "comparison_text",
    "distribution_plot",
    "gate",
    "gate_text",
    "script_key",
    "to_json",
]
