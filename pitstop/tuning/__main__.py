"""Provides `python -m pitstop.tuning [options] SCRIPT [ARGS...]` (also `-m MODULE` and `-- COMMAND...`)."""

from __future__ import annotations

import argparse
import sys

from pitstop.errors import PitstopError
from pitstop.profiling.launch import Target
from pitstop.tuning.command import add_arguments, run


def parse(argv: list[str]) -> tuple[argparse.Namespace, Target]:
    """Options first, then the target: a script, `-m MODULE`, or `-- COMMAND...`, and its arguments."""
    parser = argparse.ArgumentParser(prog="python -m pitstop.tuning",
                                     description="Find the fastest stable configuration of a training script.")
    add_arguments(parser)
    parser.add_argument("-m", dest="module", metavar="MODULE", help="run a module, like python -m")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="SCRIPT [ARGS...] or -- COMMAND...")
    args = parser.parse_args(argv)
    rest = list(args.target)
    if args.module:
        return args, Target(module=args.module, args=tuple(rest))
    if rest and rest[0] == "--":
        if len(rest) < 2:
            parser.error("-- needs a command")
        return args, Target(launcher=tuple(rest[1:]))
    if not rest:
        parser.error("give a SCRIPT, -m MODULE or -- COMMAND")
    return args, Target(script=rest[0], args=tuple(rest[1:]))


def main(argv: list[str] | None = None) -> int:
    args, target = parse(sys.argv[1:] if argv is None else argv)
    try:
        return run(args, target)
    except PitstopError as err:
        print(f"pitstop tune: {err}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
