"""Provides pitstop's widgets (one per private module, as Textual does)."""

from __future__ import annotations

from pitstop.tui.widgets._chart import Chart, ChartData, Series
from pitstop.tui.widgets._figures import Figures, Row
from pitstop.tui.widgets._findings import FindingsPanel, FindingView
from pitstop.tui.widgets._header import HeaderInfo, StatusHeader

__all__ = [
    "Chart",
    "ChartData",
    "Figures",
    "FindingView",
    "FindingsPanel",
    "HeaderInfo",
    "Row",
    "Series",
    "StatusHeader",
]
