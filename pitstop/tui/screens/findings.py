"""Provides FindingsScreen: every finding of the shown run with its evidence, cause, whole fix and gain."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.syntax import Syntax
from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

from pitstop.analysis import Finding
from pitstop.tui.widgets._findings import SEVERITY_STYLE


def finding_renderable(f: Finding) -> RenderableType:
    """One finding in full; wrapped lines keep their indent (a grid, not a text prefix)."""
    heading = Text.assemble((f"[{f.severity}] ", SEVERITY_STYLE.get(f.severity, "bold")), (f.title, "bold"),
                            (f"  ({f.rule})", "dim"))
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(no_wrap=True, style="dim", width=5, justify="right")
    table.add_column(ratio=1, overflow="fold")
    for item in f.evidence:
        table.add_row("·", item)
    if f.cause:
        table.add_row("why", f.cause)
    if f.gain:
        table.add_row("gain", Text(f.gain, style="green"))
    if f.fix:
        # The fix is code to paste: shown as code, every line of it.
        table.add_row("fix", Syntax(f.fix, "python", theme="ansi_dark", word_wrap=True, background_color="default"))
    if f.tune:
        table.add_row("tune", Text(f"{f.tune}   # measures it", style="dim"))
    return Group(heading, table, Text(""))


class FindingsScreen(ModalScreen[None]):
    """Every finding, most important first; escape, q or f closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("f", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, found: Sequence[Finding] | None, quiet: str) -> None:
        super().__init__()
        self.found = tuple(found or ())
        self.quiet = quiet

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="findings-body"):
            if not self.found:
                yield Static(Text(self.quiet, style="green"))
            for f in self.found:
                yield Static(finding_renderable(f))

    def on_mount(self) -> None:
        body = self.query_one("#findings-body")
        count = len(self.found)
        body.border_title = f"Findings ({count}) · escape closes" if count else "Findings · escape closes"

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
