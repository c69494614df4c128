"""Provides FindingsPanel: the analysis findings, most severe first, with their evidence."""

from __future__ import annotations

from dataclasses import dataclass

from rich.console import Group
from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget

_SEVERITY_STYLE = {"high": "bold red", "medium": "bold yellow", "low": "bold cyan"}


@dataclass(frozen=True)
class FindingView:
    """A finding as text: the widget knows nothing of the rules behind it."""

    severity: str
    title: str
    evidence: tuple[str, ...]
    gain: str = ""
    fix: str = ""  # the first line of the fix; the full fix is in the summary


class FindingsPanel(Widget):
    """Findings under a border title; says so plainly when there are none."""

    findings: reactive[tuple[FindingView, ...] | None] = reactive(None, layout=True)

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.border_title = "Findings"

    def render(self) -> RenderResult:
        if self.findings is None:
            return Text("waiting for steps…", style="dim")
        if not self.findings:
            return Text("nothing to report so far", style="green")
        parts: list[Text] = []
        for f in self.findings:
            style = _SEVERITY_STYLE.get(f.severity, "bold")
            line = Text.assemble((f"[{f.severity}] ", style), (f.title, "bold"))
            parts.append(line)
            for item in f.evidence:
                parts.append(Text(f"  · {item}"))
            if f.gain:
                parts.append(Text(f"  gain: {f.gain}", style="green"))
            if f.fix:
                parts.append(Text(f"  fix:  {f.fix}", style="green"))
        return Group(*parts)
