"""Provides `pitstop tune`: its options, and the run that searches, reports and writes the tuned config."""

from __future__ import annotations

import argparse
import json
import platform
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import pitstop
from pitstop.config import save_config
from pitstop.errors import ConfigError, TuneError, UsageError
from pitstop.profiling.launch import Target
from pitstop.tuning.journal import Journal, JournaledEvaluator
from pitstop.tuning.report import format_report, progress_line, to_json
from pitstop.tuning.results import Candidate, TrialResult
from pitstop.tuning.runner import TrialRunner, TrialSpec
from pitstop.tuning.space import Space, build_space, parse_knobs
from pitstop.tuning.strategy import Budget, Outcome, Search

# Options that take a value, for the CLI's split of `[OPTIONS] SCRIPT ARGS...`.
VALUE_OPTIONS = frozenset({"--budget", "--steps", "--warmup", "--min-time", "--out", "--journal",
                           "--knobs", "--trial-timeout"})
DEFAULT_BUDGET = "10m"
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `pitstop tune` (the target itself is parsed by the CLI)."""
    parser.add_argument("--budget", default=DEFAULT_BUDGET, metavar="LIMIT",
                        help="time (90s, 10m, 1h) or a number of trials (20); default %(default)s")
    parser.add_argument("--batch-size", action="store_true", dest="tune_batch",
                        help="also tune the batch size (changes training dynamics: the config then "
                             "carries learning-rate guidance)")
    parser.add_argument("--steps", type=int, default=DEFAULT_STEPS, metavar="N",
                        help="measured steps per short trial (survivors run 2N); default %(default)s")
    parser.add_argument("--warmup", type=int, default=DEFAULT_WARMUP, metavar="N",
                        help="steps dropped at the start of every trial; default %(default)s")
    parser.add_argument("--min-time", type=float, default=2.0, metavar="SECONDS",
                        help="short trials measure at least this long (--steps grows to fit); "
                             "default %(default)s")
    parser.add_argument("--out", default="pitstop.toml", metavar="FILE",
                        help="where the tuned config goes; default %(default)s")
    parser.add_argument("--force", action="store_true",
                        help="overwrite --out and start a fresh journal")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the finished trials of an interrupted tune (its journal)")
    parser.add_argument("--journal", metavar="PATH",
                        help="journal of finished trials; default .pitstop-tune/<script>.journal.jsonl next to --out")
    parser.add_argument("--knobs", metavar="LIST",
                        help="only these knobs: workers,pin_memory,persistent_workers,prefetch_factor,"
                             "batch_size,amp,cudnn_benchmark,channels_last")
    parser.add_argument("--trial-timeout", type=float, metavar="SECONDS",
                        help="kill a trial after this long (a hang); default: 6x the baseline's pace + 30 s")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--in-place", action="store_true",
                        help="run trials in the script's own directory instead of a scratch one")


def parse_budget(text: str) -> Budget:
    """`90s`, `10m`, `1.5h` -> seconds of trial time; a bare integer -> trials."""
    value = text.strip().lower()
    if re.fullmatch(r"\d+", value):
        trials = int(value)
        if trials < 1:
            raise UsageError("--budget must allow at least one trial")
        return Budget(trials=trials)
    found = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(s|sec|m|min|h)", value)
    if not found:
        raise UsageError(f"--budget {text!r}: give a time (90s, 10m, 1h) or a number of trials (20)")
    scale = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600}[found.group(2)]
    return Budget(seconds=float(found.group(1)) * scale)


def script_words(target: Target) -> str:
    """The target as `pitstop run` takes it (for the config's header and provenance)."""
    if target.script:
        return shlex.join([target.script, *target.args])
    if target.module:
        return shlex.join(["-m", target.module, *target.args])
    return "-- " + shlex.join([*target.launcher, *target.args])


class _Stop(Exception):
    """SIGTERM or SIGHUP (an SSH drop): stop like Ctrl+C, leaving the journal consistent."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace, target: Target) -> int:
    """Tune `target`; 0 with a written config, 1 when no configuration could be measured, 130 interrupted."""
    cwd = Path.cwd()
    target.check(cwd)
    if args.steps < 10:
        raise UsageError("--steps must be at least 10 (five windows of two steps)")
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    budget = parse_budget(args.budget)
    knobs = parse_knobs(args.knobs)
    out = Path(args.out)
    if out.exists() and not args.force:
        raise ConfigError(f"{out}: exists; use --force to overwrite it")
    journal_path = Path(args.journal) if args.journal else out.parent / ".pitstop-tune" / f"{target.stem}.journal.jsonl"
    header = {"target": target.describe(), "cwd": str(cwd), "steps": args.steps,
              "warmup": args.warmup, "knobs": sorted(knobs) if knobs else None,
              "batch_size": bool(args.tune_batch), "in_place": bool(args.in_place),
              "min_time": args.min_time}
    journal = Journal(journal_path, header, resume=args.resume, force=args.force)
    spec = TrialSpec(target=target, cwd=cwd, records=journal_path.parent / f"{target.stem}.records",
                     warmup=args.warmup, in_place=args.in_place)
    runner = TrialRunner(spec, timeout=args.trial_timeout)
    evaluator = JournaledEvaluator(journal, runner, on_replay=runner.adopt)
    baseline: list[TrialResult] = []

    def progress(result: TrialResult, index: int, planned: int) -> None:
        if result.stage == "baseline" and not baseline:
            baseline.append(result)
        print(progress_line(result, index, planned, baseline[0] if baseline else None),
              file=sys.stderr, flush=True)

    def space_for(base: TrialResult) -> Space:
        if base.facts is None:
            raise TuneError("the baseline trial recorded no facts about the script")
        return build_space(base.facts, knobs, bool(args.tune_batch))

    print(f"pitstop tune: {target.describe()} (budget {args.budget}, {args.steps} steps/trial"
          f"{', batch size on' if args.tune_batch else ''}); journal {journal_path}",
          file=sys.stderr, flush=True)
    started = time.monotonic()
    old = {sig: signal.signal(sig, _raise_stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        outcome = Search(evaluator, space_for, budget, args.steps, on_result=progress,
                         min_seconds=args.min_time).run()
    except (KeyboardInterrupt, _Stop) as err:
        runner.kill()
        done = sum(1 for line in journal_path.read_text().splitlines() if '"kind":"trial"' in line)
        why = f"stopped by {err}" if isinstance(err, _Stop) else "interrupted"
        print(f"pitstop tune: {why}; {done} finished trials are in {journal_path}; "
              "rerun with --resume to continue", file=sys.stderr)
        return 130
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    elapsed = time.monotonic() - started
    title = (f"pitstop tune: {target.describe()} — {len(outcome.results)} trials "
             f"({journal.resumed} from the journal) in {elapsed:.0f} s")
    written: str | None = None
    if outcome.winner is not None:
        cfg = outcome.winner.to_config(provenance(outcome, target, args, elapsed),
                                       guidance(outcome.winner, outcome.space))
        written = str(save_config(cfg, out, force=args.force))
    if args.json:
        print(json.dumps(to_json(outcome, written), indent=2))
    else:
        print(format_report(outcome, title))
        if written:
            print(f"\nWrote {written}. Train with it:  pitstop run --config {written} {script_words(target)}")
    if outcome.winner is None:
        print(f"pitstop tune: {outcome.message}", file=sys.stderr)
        return 1
    return 0


def provenance(outcome: Outcome, target: Target, args: argparse.Namespace, elapsed: float) -> dict[str, Any]:
    base = outcome.baseline
    facts = base.facts if base is not None else None
    devices = facts.device_names if facts and facts.device_names else []
    return {
        "pitstop": pitstop.__version__,
        "torch": facts.torch_version if facts else None,
        "cuda": facts.cuda_version if facts else None,
        "python": platform.python_version(),
        "device": ", ".join(devices) if devices else (facts.device_type if facts else None),
        "host": platform.node(),
        "script": script_words(target),
        "command": target.describe(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "unit": base.unit if base else None,
        "baseline_throughput": round(outcome.baseline_throughput, 3) if outcome.baseline_throughput else None,
        "throughput": round(outcome.throughput, 3) if outcome.throughput else None,
        "speedup": round(outcome.speedup, 4) if outcome.speedup else None,
        "spread": round(outcome.spread, 4) if outcome.spread is not None else None,
        "confirmed": outcome.confirmed,
        "trials": len(outcome.results),
        "tune_seconds": round(elapsed, 1),
        "batch_size_tuned": bool(outcome.space and outcome.space.batch_tuned),
    }


def guidance(winner: Candidate, space: Space | None) -> dict[str, Any]:
    """Learning-rate guidance when the batch size changed (and a note when it was not tuned)."""
    new = winner.get("batch_size")
    own = (space.own.get("batch_size") if space else None) or None
    if new and own and new != own:
        factor = new / own
        return {
            "batch_size": f"changed from {own} to {new} (x{factor:g}); samples/s was measured, "
                          "time to a given accuracy was not",
            "learning_rate": f"scale the learning rate by {factor:g} (linear scaling rule, SGD) or "
                             f"by {factor ** 0.5:.3g} (square-root rule, Adam-type optimizers), "
                             "with a warm-up over the first epochs; check the loss curve",
        }
    return {}
