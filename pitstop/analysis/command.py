"""Provides the one shell line of a command for the user to run: the run's own command as typed, quoted.

A fix line printed `pitstop tune --knobs amp adder.py` for a script started as
`PYTHONPATH=. pitstop run projects/adder/adder.py --trainer.max_iters=50`: run
as printed it said "no such script", and a script with required arguments
failed on them. Every line a front prints for the user to run (findings' tune
lines, the viewer's `t` hint, the tuner's "train with it") is built here from
what the user typed (`Hello.command`, `command_cwd`, `command_env`), quoted
with shlex.join. Records without it fall back to the script's name, as before.
The line goes to the directory the command was typed in first (`cd DIR &&`),
wherever it is shown: printed by `pitstop run` in a project and run from a
shell elsewhere, every line said "no such script".
Standard library only, as the rest of `pitstop.analysis`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pitstop.events import Hello

# Where a record does not say what was typed (older records, processes pitstop did not start).
UNKNOWN_SCRIPT = "SCRIPT"


@dataclass(frozen=True)
class Command:
    """A training command as the user typed it: the target's words, where, and the variables it needs."""

    words: tuple[str, ...]  # ("train.py", "--lr", "1"), ("-m", "pkg.mod"), ("--", "torchrun", ...)
    cwd: str | None = None  # the directory it was typed in; None: unknown
    env: Mapping[str, str] = field(default_factory=dict)  # PYTHONPATH and framework variables as set

    @classmethod
    def of(cls, hello: Hello | None) -> Command:
        """The command a run's Hello carries; for an older record, its script's name alone."""
        if hello is not None and hello.command:
            return cls(tuple(hello.command), hello.command_cwd, dict(hello.command_env or {}))
        script = hello.script if hello is not None and hello.script else UNKNOWN_SCRIPT
        return cls((script,))

    def line(self, *pitstop_words: str) -> str:
        """`[cd DIR &&] [VAR=value ...] pitstop WORDS TARGET...`, ready for a shell in any directory.

        `cd DIR &&` comes first wherever the directory is known: the script's
        path, its arguments' paths and a relative PYTHONPATH are relative to it,
        and a line is copied to other shells than the one it was printed in.
        """
        parts: list[str] = []
        if self.cwd is not None:
            parts.append(f"cd {shlex.quote(self.cwd)} &&")
        parts.extend(f"{name}={shlex.quote(value)}" for name, value in sorted(self.env.items()))
        parts.append(shlex.join(["pitstop", *pitstop_words, *self.words]))
        return " ".join(parts)


def tune_line(hello: Hello | None, knobs: Sequence[str] = ()) -> str:
    """`pitstop tune [--knobs K] TARGET` for this run's command, as it must be typed."""
    words = ["tune", "--knobs", ",".join(knobs)] if knobs else ["tune"]
    if "batch_size" in knobs:
        words.append("--batch-size")  # without it the tuner skips the batch size (it changes the training)
    return Command.of(hello).line(*words)


__all__ = ["Command", "UNKNOWN_SCRIPT", "tune_line"]
