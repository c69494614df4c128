"""Provides StatusHeader: the run's identity and headline rates, on every screen."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.geometry import Size
from textual.reactive import reactive
from textual.widget import Widget


@dataclass(frozen=True)
class HeaderInfo:
    """Everything the header shows, already formatted."""

    title: str  # script or source label
    mode: str  # "LIVE" | "REPLAY" | "ENDED" | "FAILED"
    items: tuple[tuple[str, str], ...]  # (label, value), shown in order, wrapped to width
    screen: str = ""


MODE_STYLE = {
    "LIVE": "bold black on green",
    "REPLAY": "bold black on yellow",
    "PAUSED": "bold black on yellow",
    "ENDED": "bold white on blue",
    "FAILED": "bold white on red",
    "STUCK": "bold white on red",
    "TUNING": "bold black on green",
    "STOPPING": "bold black on yellow",
    "DONE": "bold white on blue",
    "STOPPED": "bold black on yellow",
}
# Label/value lines under the title: items that do not fit in these are left out, last first.
ITEM_LINES = 2


def header_lines(info: HeaderInfo | None, width: int) -> list[Text]:
    """The title line (cut to `width`), then the items wrapped at item boundaries into ITEM_LINES lines.

    An item is never split across lines, and the items are in order of
    importance: what does not fit is dropped from the end (at 80
    columns a record path once filled every line, and pid, step and the replay
    cursor never showed).
    """
    if info is None:
        return [Text.assemble(("pitstop", "bold"), "  connecting…")]
    title = Text.assemble(
        (f" {info.mode} ", MODE_STYLE.get(info.mode, "bold reverse")),
        " ",
        ("pitstop", "bold"),
        " · ",
    )
    screen = f"  [{info.screen}]" if info.screen else ""
    room = max(1, width - len(title) - len(screen))
    name = info.title if len(info.title) <= room else info.title[: max(1, room - 1)] + "…"
    title.append(name, style="bold cyan")
    if screen:
        title.append(screen, style="dim")
    lines = [title]
    current = Text()
    for label, value in info.items:
        item = Text.assemble((f"{label} ", "dim"), (value, "bold"))
        if len(item) > width:
            item.truncate(width, overflow="ellipsis")
        if len(current) and len(current) + 2 + len(item) > width:
            lines.append(current)
            current = Text()
            if len(lines) > ITEM_LINES:
                return lines[: ITEM_LINES + 1]
        if len(current):
            current.append("  ")
        current.append_text(item)
    if len(current):
        lines.append(current)
    return lines[: ITEM_LINES + 1]


class StatusHeader(Widget):
    """The title line, then label/value pairs in order of importance; a parent sets `info`."""

    info: reactive[HeaderInfo | None] = reactive(None, layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(header_lines(self.info, width))

    def render(self) -> RenderResult:
        return Text("\n").join(header_lines(self.info, self.content_region.width))
