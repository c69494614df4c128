"""Provides pitstop's version, in a module that imports nothing.

`pitstop/__init__.py` and the agent both read it from here: the agent importing
`pitstop` for it made a cycle pitstop <-> agent. Kept equal
to `version` in pyproject.toml.
"""

from __future__ import annotations

__version__ = "0.1.0"
