"""Provides StatusHeader: the run's identity and headline rates, on every screen."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class HeaderInfo:
    """Everything the header shows, already formatted."""

    title: str  # script or source label
    mode: str  # "LIVE" | "REPLAY" | "ENDED" | "FAILED"
    items: tuple[tuple[str, str], ...]  # (label, value), shown in order, wrapped to width
    screen: str = ""


class StatusHeader(Widget):
    """Two lines: who and what state, then label/value pairs; a parent sets `info`."""

    info: reactive[HeaderInfo | None] = reactive(None, layout=True)

    def render(self) -> RenderResult:
        info = self.info
        if info is None:
            return Text.assemble(("pitstop", "bold"), "  connecting…")
        mode_style = {
            "LIVE": "bold black on green",
            "REPLAY": "bold black on yellow",
            "PAUSED": "bold black on yellow",
            "ENDED": "bold white on blue",
            "FAILED": "bold white on red",
            "TUNING": "bold black on green",
            "STOPPING": "bold black on yellow",
            "DONE": "bold white on blue",
            "STOPPED": "bold black on yellow",
        }.get(info.mode, "bold reverse")
        text = Text.assemble(
            (f" {info.mode} ", mode_style),
            " ",
            ("pitstop", "bold"),
            " · ",
            (info.title, "bold cyan"),
        )
        if info.screen:
            text.append(f"  [{info.screen}]", style="dim")
        text.append("\n")
        for i, (label, value) in enumerate(info.items):
            if i:
                text.append("  ")
            text.append(f"{label} ", style="dim")
            text.append(value, style="bold")
        return text
