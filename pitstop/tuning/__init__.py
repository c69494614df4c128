"""Provides `pitstop tune`: search space, trial runner, staged strategy, report, journal and export.

Never imports `pitstop.tui` (enforced by tests/unit/test_layering.py): the
tuner runs headless on servers, and the TUI's Trials screen reads its results.
"""

from __future__ import annotations
