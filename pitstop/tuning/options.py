"""Provides the `pitstop tune` options that take a value: how the CLI tells the tuner's options from the script's.

Apart from the tuner itself (`command.py`), so that splitting a `pitstop` command
line does not import the search, the runner and the journal: every `pitstop run`,
`view` or `ls` paid 0.073 s of CPU for them (with compiled bytecode), a quarter of
the front's start-up.
"""

from __future__ import annotations

# Options that take a value, for the CLI's split of `[OPTIONS] SCRIPT ARGS...`.
VALUE_OPTIONS = frozenset({"--budget", "--steps", "--warmup", "--min-time", "--out", "--journal",
                           "--knobs", "--trial-timeout", "--first-step-timeout", "--confirm"})
