"""Provides Figures: a titled panel of label/value rows (values already formatted)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class Row:
    """One label/value line; `style` marks a value that needs attention."""

    label: str
    value: str
    style: str = ""


class Figures(Widget):
    """Rows of figures under a border title; a parent sets `rows`."""

    rows: reactive[tuple[Row, ...]] = reactive((), layout=True)

    def __init__(self, title: str, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = title

    def render(self) -> RenderResult:
        if not self.rows:
            return Text("waiting for data…", style="dim")
        table = Table.grid(padding=(0, 1), expand=True)
        table.add_column(style="bold", no_wrap=True)
        table.add_column(ratio=1, overflow="fold")
        for row in self.rows:
            table.add_row(row.label, Text(row.value, style=row.style))
        return table
