"""Provides pitstop's error classes: one base, a few typed subclasses.

The CLI maps any PitstopError to a one-line message on stderr and a non-zero
exit code (`exit_code`). Standard library only.
"""

from __future__ import annotations


class PitstopError(Exception):
    """Base of every error pitstop reports to a person."""

    exit_code = 2


class UsageError(PitstopError):
    """The command line asks for something that cannot be done."""


class SchemaError(PitstopError):
    """An event line or stream does not follow the event schema (or is newer)."""


class RecordError(PitstopError):
    """A record file cannot be read or written."""


class ConfigError(PitstopError):
    """A tuned-config file is broken: names the file, line and key."""


class TransportError(PitstopError):
    """No agent answers at a socket: missing, stale, or not ours."""


class LaunchError(PitstopError):
    """The training command cannot be started."""


class TuneError(PitstopError):
    """The tuner cannot start or continue (not: a failed trial, which is a result)."""


def reason_of(error: BaseException) -> str:
    """One line for a person: pitstop's own errors as they are, others with their type ("KeyError: 'x'")."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else ""
    if isinstance(error, PitstopError):
        return text or type(error).__name__
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
