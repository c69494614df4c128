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
    # Every step's anatomy (analysis.phase_split), as shares of compute: "fwd 40% · bwd 45% · opt 5%",
    # and the same in fewer cells ("fwd 40 bwd 45 opt 5%") for 80 columns; "" without one.
    anatomy: str = ""
    anatomy_compact: str = ""


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
        tail = _tail(info, width - len(first))
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


def _tail(info: SplitInfo, room: int) -> Text:
    """Data wait and compute; with the step's anatomy in the widest form that fits `room` cells."""
    assert info.wait_frac is not None
    wait = f" ({fmt.pct(info.wait_frac)})"
    if info.anatomy:
        # At 80 columns the full form does not fit: the shares shorten first, then "data wait".
        for label, anatomy in (("data wait", info.anatomy), ("data wait", info.anatomy_compact),
                               ("data", info.anatomy_compact)):
            tail = Text.assemble((f"{label} {info.wait}", info.wait_style), wait, (" · ", "dim"),
                                 (f"compute {info.compute}", "green"), f" ({anatomy})")
            if anatomy and len(tail) <= room:
                return tail
    return Text.assemble((f"data wait {info.wait}", info.wait_style), wait,
                         (" · ", "dim"), (f"compute {info.compute}", "green"), f" ({fmt.pct(1 - info.wait_frac)})")


def _phases(info: SplitInfo, with_ms: bool) -> Text:
    text = Text(f"{info.phases_title}: ", style="bold")
    for i, phase in enumerate(info.phases):
        if i:
            text.append(" · ", style="dim")
        text.append(f"{phase.label} {fmt.pct(phase.frac)}")
        if with_ms:
            text.append(f" {phase.ms}", style="dim")
    return text
