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
