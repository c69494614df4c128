"""Provides the findings widgets: the top finding at a glance, and the panel of every finding."""

from __future__ import annotations

import textwrap
from dataclasses import dataclass

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget

SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "bold cyan"}
# The top finding's fix and gain get two lines each at most (at 80x24 the overview has no room
# for more); the Findings panel and the `f` list show them whole.
TOP_LINES = 2


@dataclass(frozen=True)
class FindingView:
    """A finding as text: the widget knows nothing of the rules behind it."""

    severity: str
    title: str
    evidence: tuple[str, ...]
    gain: str = ""
    fix: str = ""  # the first line of the fix; the full fix is in the summary


def _details(rows: list[tuple[str, str, str]]) -> Table:
    """Label/value rows whose wrapped lines keep their indent (a two-column grid, not a prefix)."""
    table = Table.grid(padding=(0, 1), expand=True)
    table.add_column(no_wrap=True, style="dim", width=5, justify="right")
    table.add_column(ratio=1, overflow="fold")
    for label, value, style in rows:
        table.add_row(label, Text(value, style=style))
    return table


def _heading(f: FindingView) -> Text:
    return Text.assemble((f"[{f.severity}] ", SEVERITY_STYLE.get(f.severity, "bold")), (f.title, "bold"))


class FindingsPanel(Widget):
    """Every finding with its evidence, gain and fix; `quiet` says why there is none."""

    findings: reactive[tuple[FindingView, ...] | None] = reactive(None, layout=True)
    quiet: reactive[str] = reactive("nothing to report so far", layout=True)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Findings"

    def render(self) -> RenderResult:
        if self.findings is None:
            return Text("waiting for steps…", style="dim")
        if not self.findings:
            return Text(self.quiet, style="green")
        parts: list[RenderableType] = []
        for f in self.findings:
            parts.append(_heading(f))
            rows = [("·", item, "") for item in f.evidence]
            if f.gain:
                rows.append(("gain", f.gain, "green"))
            if f.fix:
                rows.append(("fix", f.fix, "green"))
            parts.append(_details(rows))
        return Group(*parts)


def clip(text: str, width: int, lines: int) -> str:
    """`text` wrapped at words to `width`, at most `lines` lines; the last one ends with … when cut."""
    wrapped = textwrap.wrap(text, max(4, width), break_on_hyphens=False) or [""]
    if len(wrapped) <= lines:
        return "\n".join(wrapped)
    kept = wrapped[:lines]
    kept[-1] = kept[-1][: max(1, width - 1)].rstrip() + "…"
    return "\n".join(kept)


class TopFinding(Widget):
    """The most important finding: its title, fix and expected gain; how many more there are."""

    finding: reactive[FindingView | None] = reactive(None, layout=True)
    more: reactive[int] = reactive(0, layout=True)
    quiet: reactive[str] = reactive("waiting for steps…", layout=True)

    def render(self) -> RenderResult:
        f = self.finding
        if f is None:
            return Text(self.quiet, style="green" if "nothing" in self.quiet else "dim")
        heading = _heading(f)
        heading.append(f"  (1 of {self.more + 1} · f lists all)" if self.more else "  (f: details)", style="dim")
        heading.truncate(self.content_region.width or 80, overflow="ellipsis")
        width = max(10, (self.content_region.width or 80) - 6)
        rows = []
        if f.fix:
            rows.append(("fix", clip(f.fix, width, TOP_LINES), "green"))
        if f.gain:
            rows.append(("gain", clip(f.gain, width, TOP_LINES), ""))
        return Group(heading, _details(rows))
