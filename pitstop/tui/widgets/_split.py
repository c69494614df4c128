"""Provides TimeSplit: where the step time goes, in two lines (data wait / compute, then the phases)."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import RenderResult
from textual.reactive import reactive
from textual.widget import Widget

from pitstop.analysis import format as fmt

MIN_BAR = 10
MAX_BAR = 30


@dataclass(frozen=True)
class Phase:
    """One part of a profiled step, already formatted."""

    label: str
    frac: float
    ms: str


@dataclass(frozen=True)
class SplitInfo:
    """The step's split, formatted; `note` stands in for the first line before a measured step."""

    step: str = ""  # "100.0 ms"
    over: str = ""  # "p50 of 117 steps"
    wait_frac: float | None = None
    wait: str = ""  # "10.0 ms"
    compute: str = ""
    wait_style: str = "red"  # bold red when the data-wait finding fired
    phases: tuple[Phase, ...] = ()
    phases_title: str = ""  # "profiled steps 51-55"
    phases_note: str = ""  # instead of the phases: "no profiler window yet (p profiles now)"
    note: str | None = None


class TimeSplit(Widget):
    """Two lines: the step's data wait against compute with a bar, then the latest window's phases."""

    info: reactive[SplitInfo | None] = reactive(None)

    def render(self) -> RenderResult:
        info = self.info
        if info is None:
            return Text("waiting for steps…", style="dim")
        return Text("\n").join(split_lines(info, self.content_region.width))


def split_lines(info: SplitInfo, width: int) -> list[Text]:
    """The two lines at `width` cells."""
    if info.note is not None or info.wait_frac is None:
        first = Text.assemble(("step ", "bold"), (info.note or "no measured step yet", "dim"))
    else:
        first = Text.assemble(("step p50 ", "bold"), (info.step, "bold"), " ")
        tail = Text.assemble((f"data wait {info.wait}", info.wait_style), f" ({fmt.pct(info.wait_frac)})",
                             (" · ", "dim"), (f"compute {info.compute}", "green"), f" ({fmt.pct(1 - info.wait_frac)})")
        over = Text(f"  {info.over}", style="dim")
        room = width - len(first) - len(tail) - 1
        if room >= MIN_BAR:
            bar = min(MAX_BAR, room - (len(over) if room - len(over) >= MIN_BAR else 0))
            red = round(bar * info.wait_frac)
            first.append("█" * red, style="red")
            first.append("█" * (bar - red), style="green")
            first.append(" ")
        first.append_text(tail)
        if len(first) + len(over) <= width:
            first.append_text(over)
    if info.phases:
        # With the milliseconds when they fit, else the shares alone.
        second = _phases(info, with_ms=True)
        if len(second) > width:
            second = _phases(info, with_ms=False)
    else:
        second = Text.assemble(("phases: ", "bold"), (info.phases_note, "dim"))
    for line in (first, second):
        line.truncate(width, overflow="ellipsis")
    return [first, second]


def _phases(info: SplitInfo, with_ms: bool) -> Text:
    text = Text(f"{info.phases_title}: ", style="bold")
    for i, phase in enumerate(info.phases):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{phase.label} {fmt.pct(phase.frac)}")
        if with_ms:
            text.append(f" {phase.ms}", style="dim")
    return text
