"""Provides the split of a command line into pitstop's own options and the training target.

`pitstop run`, `pitstop tune` and `python -m pitstop.tuning` all take
`[OPTIONS] (SCRIPT ARGS... | -m MODULE ARGS... | -- COMMAND...)`: everything
after the target's start is the target's, so a script's own `--headless` or
`--lr` is never read as ours. It lives beside `Target`, below every command
that parses it (in `cli.py`, it made cli and tuning import each other).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from pitstop.errors import UsageError
from pitstop.profiling.launch import Target


def split_target(argv: Sequence[str], value_options: Collection[str]) -> tuple[list[str], Target | None]:
    """Split `[OPTIONS] (SCRIPT ARGS... | -m MODULE ARGS... | -- COMMAND...)`; `value_options` take a value."""
    i = 0
    own: list[str] = []
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            if i + 1 >= len(argv):
                raise UsageError("nothing after '--': give a command, e.g. -- torchrun --nproc_per_node 2 train.py")
            return own, Target(launcher=tuple(argv[i + 1 :]))
        if arg == "-m":
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            return own, Target(module=argv[i + 1], args=tuple(argv[i + 2 :]))
        if arg.startswith("-"):
            own.append(arg)
            if arg in value_options and "=" not in arg:
                if i + 1 >= len(argv):
                    raise UsageError(f"{arg} needs a value")
                own.append(argv[i + 1])
                i += 1
            i += 1
            continue
        return own, Target(script=arg, args=tuple(argv[i + 1 :]))
    return own, None


__all__ = ["split_target"]
