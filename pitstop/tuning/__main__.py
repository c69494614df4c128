"""Provides `python -m pitstop.tuning [options] SCRIPT [ARGS...]` (also `-m MODULE` and `-- COMMAND...`)."""

from __future__ import annotations

import argparse
import sys

from pitstop.errors import PitstopError
from pitstop.profiling.launch import Target
from pitstop.tuning.command import add_arguments, run


def parse(argv: list[str]) -> tuple[argparse.Namespace, Target]:
    """Options first, then the target: a script, `-m MODULE`, or `-- COMMAND...`, and its arguments.

    The split is the CLI's own (`pitstop tune` parses the same way), so a target's
    options (`-m pkg.train --lr 1`) are never read as ours.
    """
    from pitstop.profiling.cmdline import split_target
    from pitstop.tuning.options import VALUE_OPTIONS

    parser = argparse.ArgumentParser(prog="python -m pitstop.tuning",
                                     description="Find the fastest stable configuration of a training script.")
    add_arguments(parser)
    own, target = split_target(argv, set(VALUE_OPTIONS))
    args = parser.parse_args(own)
    if target is None:
        parser.error("give a SCRIPT, -m MODULE or -- COMMAND")
    return args, target


def main(argv: list[str] | None = None) -> int:
    try:
        args, target = parse(sys.argv[1:] if argv is None else argv)
        return run(args, target)
    except PitstopError as err:
        print(f"pitstop tune: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
