"""Provides pitstop's widgets (one per private module, as Textual does)."""

from __future__ import annotations

from pitstop.tui.widgets._bars import BarChart, BarSeries, Layer
from pitstop.tui.widgets._figures import Figures, Row
from pitstop.tui.widgets._findings import FindingsPanel, FindingView, TopFinding
from pitstop.tui.widgets._gauges import Gauge, GaugeLine, Gauges
from pitstop.tui.widgets._header import HeaderInfo, StatusHeader
from pitstop.tui.widgets._keybar import KeyBar
from pitstop.tui.widgets._split import Phase, SplitInfo, TimeSplit

__all__ = [
    "BarChart",
    "BarSeries",
    "Figures",
    "FindingView",
    "FindingsPanel",
    "Gauge",
    "GaugeLine",
    "Gauges",
    "HeaderInfo",
    "KeyBar",
    "Layer",
    "Phase",
    "Row",
    "SplitInfo",
    "StatusHeader",
    "TimeSplit",
    "TopFinding",
]
