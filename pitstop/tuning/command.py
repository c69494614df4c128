"""Provides `pitstop tune`: its options, and the run that searches, reports and writes the tuned config."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

from pitstop._version import __version__
from pitstop.config import fit_to_cpus, load_config, save_config, usable_cpus
from pitstop.errors import ConfigError, TuneError, UsageError
from pitstop.events import Progress
from pitstop.analysis.command import Command
from pitstop.profiling.launch import Target, typed_env
from pitstop.tuning.guard import FileGuard
from pitstop.tuning.held import held_signals
from pitstop.tuning.journal import Journal, JournaledEvaluator, companion, default_journal
from pitstop.tuning.journalformat import Record, Start, Totals, TrialProgress, TrialStart, TuneEnd
from pitstop.tuning.report import batch_tried, format_report, progress_line, tick_line, to_json, tune_status
from pitstop.tuning.results import KNOBS, Candidate, TrialResult
from pitstop.tuning.runner import FIRST_STEP_TIMEOUT, FIRST_TRIAL_LIMIT, Tick, TrialRunner, TrialSpec, path_hint
from pitstop.tuning.space import Space, build_space, parse_knobs
from pitstop.tuning.strategy import Budget, Outcome, Search

DEFAULT_BUDGET = "10m"
DEFAULT_STEPS = 30
DEFAULT_WARMUP = 5
# Headless: a running trial reports its steps this often on stderr.
TICK_LINE_EVERY_S = 10.0
# The journal gets a running trial's steps at most once a second while they move (the
# view's bar moves at 4 Hz polls; a line a tick, 2 Hz, made a 1-hour tune's journal 7200
# lines), and every 10 s while they do not (a baseline waiting minutes for its first step).
PROGRESS_RECORD_EVERY_S = 1.0
PROGRESS_RECORD_QUIET_S = 10.0


# How --help names a knob where its name alone would mislead: findings print `--knobs num_workers`, and
# batch_size is tried only with --batch-size (it changes training dynamics).
_KNOB_HELP = {"num_workers": "workers (num_workers)", "batch_size": "batch_size (with --batch-size)"}


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
                        help="where the tuned config goes (written only when something beats the "
                             "script's own settings); default %(default)s")
    parser.add_argument("--force", action="store_true",
                        help="overwrite --out and start a fresh journal")
    parser.add_argument("--resume", action="store_true",
                        help="reuse the finished trials of an interrupted tune (its journal)")
    parser.add_argument("--journal", metavar="PATH",
                        help="journal of finished trials; default .pitstop-tune/<script>-<key>.journal.jsonl "
                             "next to --out (the key tells scripts of the same name apart)")
    parser.add_argument("--knobs", metavar="LIST",
                        help="only these knobs, comma-separated: " + ", ".join(_KNOB_HELP.get(k, k) for k in KNOBS))
    parser.add_argument("--trial-timeout", type=float, metavar="SECONDS",
                        help="kill a trial after this long (a hang); default 30 s + 6x the baseline's "
                             f"pace per step; the baseline itself, which pays the imports and data set-up, "
                             f"gets at least {FIRST_TRIAL_LIMIT:.0f} s")
    parser.add_argument("--first-step-timeout", type=float, default=FIRST_STEP_TIMEOUT, metavar="SECONDS",
                        help="until the baseline has run, a trial that reaches no training step in this "
                             "long is ended as a hang (a stalled download, a data path it waits on); "
                             "default %(default)g")
    parser.add_argument("--json", action="store_true", help="print the report as JSON on stdout")
    parser.add_argument("--scratch", action="store_true",
                        help="run trials in an empty scratch directory instead of this one (relative "
                             "paths then find nothing); by default trials run here, as `pitstop run` does, "
                             "and every file a trial changes here is put back after it (docs/tuning.md)")
    parser.add_argument("--in-place", action="store_true", help=argparse.SUPPRESS)  # the default now
    parser.add_argument("--confirm", metavar="CONFIG",
                        help="only confirm CONFIG (a pitstop.toml): alternate fresh runs of it and of the "
                             "script's own settings, and report the measured ratio; writes nothing")


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
    return shlex.join(target.words())


def typed_command(target: Target) -> Command:
    """The tuned command as the user typed it here, with the variables it needs (PYTHONPATH...)."""
    return Command(tuple(target.words()), str(Path.cwd()), typed_env())


# What stops a tune like Ctrl+C: an SSH drop, and what a launcher passes on. Left at their default,
# SIGQUIT, SIGUSR1 and SIGUSR2 (Slurm's requeue warning) ended the tuner alone: its trial ran on in
# its own session and the user's guarded files were not put back.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


class _Stop(Exception):
    """SIGTERM, SIGHUP (an SSH drop), SIGQUIT, SIGUSR1/2: stop like Ctrl+C, leaving the journal consistent."""


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise _Stop(signal.Signals(signum).name)


class _Progress:
    """Progress for a person and for the Trials view: a line per finished trial and, headless, a line every
    few seconds inside a long one (stderr); trial starts and in-trial steps as journal records (the view's)."""

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.search: Search | None = None
        self.baseline: TrialResult | None = None
        self.last_line = 0.0
        self.guard_said = ""
        self.warned: set[str] = set()
        self.running: int | None = None  # the runner's count of the trial whose start is journaled
        self.index = 0  # that trial's number in the tune
        self.last_record = 0.0
        self.last_steps = 0
        self.last_progress: Progress | None = None

    def totals(self) -> Totals:
        s = self.search
        if s is None:
            return Totals()
        return Totals(done=len(s.results), planned=s.planned, budget_left=s.budget.left(), eta=s.eta(),
                      budget_trials=s.budget.trials, budget_seconds=s.budget.seconds,
                      used_trials=s.budget.used_trials, used_seconds=round(s.budget.used_seconds, 1))

    def note(self, record: Record, sync: bool = False) -> None:
        try:
            self.journal.record(record, sync)
        except OSError:
            pass  # progress is a courtesy: the tune goes on without it (a finished trial's line is not)

    def on_tick(self, tick: Tick) -> None:
        now = time.monotonic()
        if tick.done:
            self.last_line = 0.0
            self.running = None
            return
        totals = self.totals()
        if tick.index != self.running:
            self.running, self.index = tick.index, totals.done + 1
            self.note(TrialStart(time.time(), self.index, tick.label, tick.stage, tick.steps_planned,
                                 round(tick.limit, 1), tick.first_step_limit, totals))
            self.last_record, self.last_steps, self.last_progress = now, tick.steps_done, None
        elif (now - self.last_record >= PROGRESS_RECORD_EVERY_S
              and (tick.steps_done != self.last_steps or tick.progress != self.last_progress)
              or now - self.last_record >= PROGRESS_RECORD_QUIET_S):
            self.note(TrialProgress(time.time(), self.index, tick.steps_done, tick.steps_planned,
                                    round(tick.elapsed, 1), tick.progress))
            self.last_record, self.last_steps, self.last_progress = now, tick.steps_done, tick.progress
        if tick.elapsed >= TICK_LINE_EVERY_S and now - self.last_line >= TICK_LINE_EVERY_S:
            self.last_line = now
            text = tune_status(totals.done, totals.planned, totals.budget_left, totals.eta)
            print(tick_line(tick, text), file=sys.stderr, flush=True)

    def on_result(self, result: TrialResult, index: int, planned: int | None, runner: TrialRunner) -> None:
        if result.stage == "baseline" and self.baseline is None and result.ok:
            self.baseline = result
        t = self.totals()
        text = tune_status(t.done, t.planned, t.budget_left, t.eta) if self.search is not None else ""
        print(progress_line(result, index, planned, self.baseline, text), file=sys.stderr, flush=True)
        restored = runner.restored.summary() if runner.restored is not None and not result.from_journal else ""
        if restored and restored != self.guard_said:
            self.guard_said = restored
            print(f"  (the trial wrote in your directory; pitstop {restored})", file=sys.stderr, flush=True)
        new = [p for p, trial in runner.unguarded.items() if p not in self.warned]
        if new:
            self.warned.update(new)
            print(f"pitstop tune: warning: {', '.join(new)} changed during trial {runner.count} where no guard "
                  "saw it (code outside Python in the trial, or another process writing here): not put back; "
                  "--scratch runs trials in an empty directory", file=sys.stderr, flush=True)


def run(args: argparse.Namespace, target: Target) -> int:
    """Tune `target`.

    Exit status: 0 when the tune finished (a config written when something beat the
    script's own settings; none when nothing did), 1 when nothing could be measured
    (the baseline failed) or --confirm did not confirm, 130 interrupted, 2 a usage error.
    """
    cwd = Path.cwd()
    target.check(cwd)
    if args.steps < 10:
        raise UsageError("--steps must be at least 10 (five windows of two steps)")
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    budget = parse_budget(args.budget)
    knobs = parse_knobs(args.knobs)
    out = Path(args.out)
    confirm = _confirm_candidate(args.confirm)
    if out.exists() and not args.force and confirm is None:
        raise ConfigError(f"{out}: exists; use --force to overwrite it")
    journal_path = Path(args.journal) if args.journal else default_journal(out, target, cwd)
    if confirm is not None and not args.journal:
        journal_path = companion(journal_path, ".confirm.journal.jsonl")
    header = {"target": target.describe(), "cwd": str(cwd), "steps": args.steps,
              "warmup": args.warmup, "knobs": sorted(knobs) if knobs else None,
              "batch_size": bool(args.tune_batch), "workdir": "scratch" if args.scratch else "here",
              "min_time": args.min_time, "confirm": confirm.key() if confirm is not None else None}
    # A confirmation is short and repeatable: it starts afresh unless asked to resume.
    journal = Journal(journal_path, header, resume=args.resume, force=args.force or confirm is not None)
    guard = None if args.scratch else FileGuard(cwd, companion(journal_path, ".guard"), skip=(journal_path.parent,))
    if guard is not None:
        recovered = guard.recover()
        if recovered is not None and (recovered.restored or recovered.removed):
            print(f"pitstop tune: an earlier tune was killed during a trial; pitstop {recovered.summary()}",
                  file=sys.stderr)
    started = time.monotonic()
    progress = _Progress(journal)
    spec = TrialSpec(target=target, cwd=cwd, records=companion(journal_path, ".records"),
                     warmup=args.warmup, scratch=bool(args.scratch), guard=guard)
    runner = TrialRunner(spec, timeout=args.trial_timeout, first_step_timeout=args.first_step_timeout,
                         on_tick=progress.on_tick)
    evaluator = JournaledEvaluator(journal, runner, on_replay=runner.adopt)

    def space_for(base: TrialResult) -> Space:
        if base.facts is None:
            raise TuneError("the baseline trial recorded no facts about the script")
        return build_space(base.facts, knobs, bool(args.tune_batch), load=base.other_cpu, evidence=base.evidence)

    where = "in an empty scratch directory" if args.scratch else f"in {cwd}, your files guarded"
    print(f"pitstop tune: {target.describe()} (budget {args.budget}, {args.steps} steps/trial"
          f"{', batch size on' if args.tune_batch else ''}); trials run {where}; journal {journal_path}",
          file=sys.stderr, flush=True)
    search = Search(evaluator, space_for, budget, args.steps,
                    on_result=lambda r, i, n: progress.on_result(r, i, n, runner), min_seconds=args.min_time)
    progress.search = search
    progress.note(Start(time.time(), args.budget, len(journal.entries), os.getpid(), progress.totals()))
    old = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS}
    try:
        if confirm is not None:
            outcome = search.confirm_only(confirm)
        else:
            outcome = search.run()
    except (KeyboardInterrupt, _Stop) as err:
        runner.kill()
        done = sum(1 for line in journal_path.read_text().splitlines() if '"kind":"trial"' in line)
        why = f"stopped by {err}" if isinstance(err, _Stop) else "interrupted"
        said = (f"pitstop tune: {why}; {done} finished trials are in {journal_path}; "
                "rerun with --resume to continue")
        print(said, file=sys.stderr)
        progress.note(TuneEnd(time.time(), "interrupted", 130, said, no_config=why, report=(said,),
                              totals=progress.totals()), sync=True)
        return 130
    except TuneError as err:
        progress.note(TuneEnd(time.time(), "failed", err.exit_code, str(err), no_config=str(err),
                              report=(f"pitstop tune: {err}",), totals=progress.totals()), sync=True)
        raise
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
        if guard is not None:
            guard.close()
    elapsed = time.monotonic() - started
    if runner.unguarded:
        outcome.notes.append(f"changed during trials where no guard saw it, not put back: "
                             f"{', '.join(sorted(runner.unguarded))}")
    title = (f"pitstop tune: {target.describe()} — {len(outcome.results)} trials "
             f"({journal.resumed} from the journal) in {elapsed:.0f} s")
    written: str | None = None
    if outcome.improves and confirm is None:
        assert outcome.winner is not None
        cfg = outcome.winner.to_config(provenance(outcome, target, args, elapsed),
                                       guidance(outcome.winner, outcome.space))
        with held_signals():  # a Ctrl-C between its temporary file and the rename left the temporary behind
            written = str(save_config(cfg, out, force=args.force))
    again = confirm_command(outcome, args, target, written) if outcome.improves and not outcome.confirmed else ""
    report = format_report(outcome, title, again) + wrote_line(written, outcome.confirmed, target)
    if args.json:
        print(json.dumps(to_json(outcome, written) | {"confirm_command": again or None}, indent=2))
    else:
        print(report)
    code = 0
    if outcome.winner is None:
        hint = path_hint(outcome.baseline, spec) if outcome.baseline is not None else ""
        for said in (outcome.message, hint):
            if said:
                print(f"pitstop tune: {said}", file=sys.stderr)
                report += f"\npitstop tune: {said}"  # the view shows these with the report
        code = 1
    elif confirm is not None and not (outcome.improves and outcome.winner == confirm):
        code = 1
    progress.note(_ended(outcome, code, written, confirm is not None, again, report, progress.totals()), sync=True)
    return code


def wrote_line(written: str | None, confirmed: bool, target: Target) -> str:
    """The report's last line when a config was written: where, and the command that trains with it."""
    if not written:
        return ""
    how = "" if confirmed else " (not confirmed)"
    return f"\n\nWrote {written}{how}. Train with it:  {typed_command(target).line('run', '--config', written)}"


def _ended(outcome: Outcome, code: int, written: str | None, confirming: bool, again: str, report: str,
           totals: Totals) -> TuneEnd:
    """The journal's outcome record: what the report says, as fields the Trials view reads."""
    if written:
        no_config = ""
    elif confirming:
        no_config = "--confirm writes no config"
    elif outcome.winner is None:
        no_config = outcome.message or "nothing could be measured"
    else:
        no_config = (outcome.message if outcome.message.startswith("slower than the script's own settings")
                     else "nothing beat the script's own settings by more than the noise")
    winner = outcome.winner
    return TuneEnd(time.time(), "finished" if code == 0 else "failed", code, outcome.message,
                   winner.label() if winner is not None else None, winner.as_dict() if winner is not None else None,
                   outcome.improves, outcome.speedup, outcome.interval, outcome.confirmed, written, no_config,
                   again or None, tuple(report.splitlines()), totals)


def _confirm_candidate(path: str | None) -> Candidate | None:
    if path is None:
        return None
    fitted, cuts = fit_to_cpus(load_config(path), usable_cpus())
    for why in cuts:
        print(f"pitstop tune: {path}: {why}", file=sys.stderr, flush=True)
    candidate = Candidate.from_config(fitted)
    if candidate == Candidate():
        raise ConfigError(f"{path}: sets nothing to confirm")
    return candidate


def confirm_command(outcome: Outcome, args: argparse.Namespace, target: Target, written: str | None) -> str:
    """The command that confirms an unconfirmed best: its config against the script's own settings."""
    if not written:
        return ""
    words = ["tune", "--confirm", written, "--budget", str(max(outcome.confirm_trials, 2))]
    if args.steps != DEFAULT_STEPS:
        words += ["--steps", str(args.steps)]
    if args.warmup != DEFAULT_WARMUP:
        words += ["--warmup", str(args.warmup)]
    return typed_command(target).line(*words)


def provenance(outcome: Outcome, target: Target, args: argparse.Namespace, elapsed: float) -> dict[str, Any]:
    base = outcome.baseline
    facts = base.facts if base is not None else None
    devices = facts.device_names if facts and facts.device_names else []
    return {
        "pitstop": __version__,
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
        "speedup_interval": [round(v, 4) for v in outcome.interval] if outcome.interval else None,
        "spread": round(outcome.spread, 4) if outcome.spread is not None else None,
        "confirmed": outcome.confirmed,
        "confirmation_rounds": outcome.rounds,
        "trials": len(outcome.results),
        "tune_seconds": round(elapsed, 1),
        "batch_size_tuned": bool(outcome.space and outcome.space.batch_tuned and batch_tried(outcome)),
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
