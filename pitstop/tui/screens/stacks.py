"""Provides StacksScreen: where the DataLoader's Python time went, from a few seconds of py-spy samples."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static


class StacksScreen(ModalScreen[None]):
    """The lines of `pitstop profile --data`'s text, scrollable; escape or q closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, title: str, lines: list[str]) -> None:
        super().__init__()
        self._title = title
        self._lines = lines

    def compose(self) -> ComposeResult:
        text = Text(self._title + "\n", style="bold")
        for line in self._lines:
            text.append(line + "\n", style="bold" if line and not line.startswith(" ") else "")
        text.append("escape closes this", style="dim")
        with VerticalScroll(id="stacks-body"):
            yield Static(text, id="stacks-text")
