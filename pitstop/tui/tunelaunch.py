"""Provides the tuner child process behind the Trials view: its command line, its journal path, and its start.

No Textual here: the CLI imports this before deciding whether a screen opens.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pitstop.errors import ConfigError, LaunchError, TuneError, UsageError
from pitstop.profiling.launch import Target
from pitstop.tuning.journal import companion, default_journal

# Interpreter options that take a value (python -X dev, -W error): skipped with it
# when a script is rebuilt from a process's argv.
_PY_VALUE_OPTIONS = frozenset({"-X", "-W", "-Q"})


@dataclass(frozen=True)
class TuneRequest:
    """What the run viewer knows of the script the user asked to tune (`t`), for the CLI to rebuild it."""

    script: str  # as shown ("train.py", "-m pkg.mod")
    argv: tuple[str, ...]  # the interpreter's argv (Hello.argv), argv[0] the interpreter
    cwd: str  # where it was started: a relative script path is relative to this
    ranks: int  # processes in the job (a launcher's job cannot be rebuilt from one rank's argv)


@dataclass(frozen=True)
class TunerChild:
    """A started tuner: its process (own session), where its journal and output go, and how to resume it."""

    proc: subprocess.Popen[bytes]
    journal: Path
    log_path: Path
    out: Path
    stale: tuple[int, int, int] | None  # the journal's (inode, size, mtime) before the start, if it existed
    resume_command: str


def option_value(options: Sequence[str], name: str) -> str | None:
    """The value of `--name V` or `--name=V` in an option list (the last one wins, as argparse does)."""
    found = None
    for i, opt in enumerate(options):
        if opt == name and i + 1 < len(options):
            found = options[i + 1]
        elif opt.startswith(name + "="):
            found = opt.split("=", 1)[1]
    return found


def journal_path(options: Sequence[str], target: Target, cwd: Path) -> Path:
    """Where the tuner keeps its journal: `--journal`, else `.pitstop-tune/<stem>-<key>.journal.jsonl` next to --out.

    The same rule as pitstop.tuning.command.run (one function, journal.default_journal);
    the CLI then passes it with `--journal` so the viewer and the tuner cannot disagree.
    """
    given = option_value(options, "--journal")
    if given:
        return (cwd / given).resolve()
    out = Path(option_value(options, "--out") or "pitstop.toml")
    path = default_journal(out, target, cwd).resolve()
    if option_value(options, "--confirm") is not None:
        path = companion(path, ".confirm.journal.jsonl")
    return path


def target_words(target: Target) -> list[str]:
    """The target as the CLI takes it: `SCRIPT ARGS`, `-m MODULE ARGS` or `-- COMMAND...`."""
    return target.words()


def target_from_argv(argv: Sequence[str], cwd: str) -> Target:
    """The script a process runs, from its interpreter argv (Hello.argv): `python [-opts] train.py ARGS`.

    A relative script path is made absolute with the process's cwd, so a tune
    started from another directory (`pitstop attach`) finds it.
    """
    words = list(argv[1:])  # argv[0] is the interpreter
    i = 0
    while i < len(words) and words[i].startswith("-") and words[i] != "-m":
        if words[i] == "-c":
            raise LaunchError("this process runs `python -c CODE`: there is no script to tune")
        i += 2 if words[i] in _PY_VALUE_OPTIONS else 1
    rest = words[i:]
    if not rest:
        raise LaunchError("cannot tell which script this process runs (its argv has none)")
    if rest[0] == "-m":
        if len(rest) < 2:
            raise LaunchError("this process runs `python -m` without a module")
        return Target(module=rest[1], args=tuple(rest[2:]))
    script = Path(rest[0])
    if not script.is_absolute():
        script = Path(cwd) / script
    return Target(script=str(script), args=tuple(rest[1:]))


def preflight(options: Sequence[str], journal: Path, cwd: Path) -> None:
    """The tuner's own refusals that need no trial, raised here as one line before a screen opens."""
    from pitstop.tuning.command import parse_budget
    from pitstop.tuning.space import parse_knobs

    parse_budget(option_value(options, "--budget") or "10m")
    parse_knobs(option_value(options, "--knobs"))
    force = "--force" in options
    if option_value(options, "--confirm") is not None:
        return  # a confirmation writes no config and starts its journal afresh
    out = Path(option_value(options, "--out") or "pitstop.toml")
    if (cwd / out).exists() and not force:
        raise ConfigError(f"{out}: exists; use --force to overwrite it")
    if journal.exists() and not force and "--resume" not in options:
        # The journal is named after the script and its command: one that exists is this
        # script's (the tuner itself also says when its options differ).
        raise TuneError(f"a journal of an earlier tune of this script exists: {journal}; --resume "
                        "continues it, --force starts afresh")


def stat_key(path: Path) -> tuple[int, int, int] | None:
    """(inode, size, mtime): changes whenever the tuner rewrites or appends to a file."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns)


def start_tuner(options: Sequence[str], target: Target, cwd: Path | None = None) -> TunerChild:
    """Start `pitstop tune OPTIONS TARGET` as a child in its own session, output to a log file.

    The child is the CLI itself with stdout and stdin off the terminal, so it
    takes the plain (progress lines) path: the tuner installs signal handlers
    and wants its own main thread, and Textual wants ours. Its own session keeps
    it running when the viewer detaches or the terminal closes.
    """
    cwd = cwd or Path.cwd()
    options = list(options)
    if "--json" in options:
        raise UsageError("--json prints the report on stdout: it does not go with the Trials view")
    if option_value(options, "--steps") is not None:
        try:
            if int(option_value(options, "--steps") or "0") < 10:
                raise UsageError("--steps must be at least 10 (five windows of two steps)")
        except ValueError as err:
            raise UsageError(f"--steps {option_value(options, '--steps')!r}: give a number") from err
    journal = journal_path(options, target, cwd)
    preflight(options, journal, cwd)
    if option_value(options, "--journal") is None:
        options += ["--journal", str(journal)]
    out = (cwd / (option_value(options, "--out") or "pitstop.toml")).resolve()
    log_path = companion(journal, ".tune.log")
    log_path.parent.mkdir(parents=True, exist_ok=True)
    stale = stat_key(journal)
    words = target_words(target)
    command = [sys.executable, "-m", "pitstop.cli", "tune", *options, *words]
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"  # progress lines reach the log as each trial ends
    # A fresh log per start: the report at its end is parsed, and an older one would be read as ours.
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                start_new_session=True, env=env)
    resume = [o for o in options if o != "--force"]
    resume_command = shlex.join(["pitstop", "tune", *([] if "--resume" in resume else ["--resume"]), *resume,
                                 *words])
    return TunerChild(proc, journal, log_path, out, stale, resume_command)
