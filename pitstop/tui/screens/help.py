"""Provides HelpScreen: every key, what each screen shows, and how replay works."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

# One line each at 80 columns: the whole list fits an 80x24 terminal without scrolling.
KEYS: tuple[tuple[str, str], ...] = (
    ("1 2 3 4 5 6", "Overview, Ops, Data, Memory, Log, Ranks"),
    ("? F1", "this help (escape closes it)"),
    ("f / w", "findings in full / where each rank waits (stall stacks)"),
    ("p", "profile now: capture a profiler window (live)"),
    ("o / c", "Ops screen: ops / CUDA kernels"),
    ("g", "Ops screen: group ops by phase, or not"),
    ("s, click header", "Ops, Ranks: sort; Data: the loader's Python stacks (py-spy)"),
    ("[ ]", "older / newer profiler window"),
    ("/  n", "Log screen: search, next match"),
    ("r", "next rank of a multi-process job"),
    ("S", "save a screenshot (SVG, current directory)"),
    ("t", "tune this script (asks first)"),
    ("d", "detach: close the viewer, training keeps running"),
    ("k", "stop training (asks first)"),
    ("q ctrl+c F10", "quit the viewer (training keeps running)"),
    ("space", "replay: pause / play"),
    ("left right", "replay: back / forward 10% of the run"),
    ("home end", "replay: start / end of the run"),
    ("+ -", "replay: play faster / slower"),
)

SCREENS = (
    "Overview: where the step time goes (data wait / compute, the profiled phases), the top finding with "
    "its fix and expected gain, GPU, CPU and memory with their history, the step-time chart.",
    "Charts scale to the bars' 95th percentile: a bar above it is clipped and marked ▲; warm-up, eval and "
    "profiled steps are drawn in their own colour and do not set the scale.",
    "Ops: the latest profiler window's phases, its ops with their share of the step, or its CUDA kernels.",
    "Data: data wait p50/p95, loader delivery rate vs the step's, the verdict (the data-wait finding).",
    "Memory: torch allocated/reserved or host RSS per step, peaks, GPU headroom, allocator retries.",
    "Log: the script's own output (the last 5000 lines), wrapped to the screen.",
    "Ranks: one row per rank of a distributed job; the straggler in red, named with its evidence.",
    "A figure that cannot be measured shows n/a with the reason, never a zero.",
)


class HelpScreen(ModalScreen[None]):
    """Keys and screens; any of escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", key_display="?"),
        Binding("f1", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
    ]

    def __init__(self, keys: tuple[tuple[str, str], ...] = KEYS, notes: tuple[str, ...] = SCREENS,
                 title: str = "pitstop keys") -> None:
        super().__init__()
        self.keys, self.notes, self.title_text = keys, notes, title  # the Trials view has its own keys

    def compose(self) -> ComposeResult:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold cyan", no_wrap=True)
        table.add_column()
        for key, what in self.keys:
            table.add_row(key, what)
        with VerticalScroll(id="help-body"):
            yield Static(Text(self.title_text, style="bold"))
            yield Static(table)
            yield Static(Text("\n".join(self.notes), style="dim"))

    def on_mount(self) -> None:
        self.query_one("#help-body").border_title = "Help (escape to close)"

    def action_dismiss(self) -> None:  # type: ignore[override]
        self.dismiss(None)
