"""Provides pitstop's screens, one module each."""

from __future__ import annotations

from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.screens.confirm import ConfirmScreen
from pitstop.tui.screens.data import DataScreen
from pitstop.tui.screens.findings import FindingsScreen
from pitstop.tui.screens.help import HelpScreen
from pitstop.tui.screens.kernels import KernelsScreen
from pitstop.tui.screens.log import LogScreen
from pitstop.tui.screens.memory import MemoryScreen
from pitstop.tui.screens.overview import OverviewScreen
from pitstop.tui.screens.ranks import RanksScreen

__all__ = [
    "ConfirmScreen",
    "DataScreen",
    "FindingsScreen",
    "HelpScreen",
    "KernelsScreen",
    "LogScreen",
    "MemoryScreen",
    "OverviewScreen",
    "PitstopScreen",
    "RanksScreen",
]
