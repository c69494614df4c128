"""Provides HelpScreen: every key, what each screen shows, and how replay works."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Static

KEYS: tuple[tuple[str, str], ...] = (
    ("1 2 3 4 5 6", "Overview, Kernels/Ops, Data, Memory, Log, Ranks"),
    ("?", "this help (escape closes it)"),
    ("p", "profile now: capture a profiler window (live runs)"),
    ("o / c", "Kernels screen: ops / CUDA kernels table"),
    ("s, click a header", "Kernels and Ranks screens: sort by the next column"),
    ("[ ]", "older / newer profiler window (a replay moves its cursor there)"),
    ("/  n", "Log screen: search, next match"),
    ("r", "show the next rank of a multi-process job"),
    ("t", "tune this script (asks first; opens the Trials view)"),
    ("d", "detach: close the viewer, training keeps running"),
    ("k", "stop training (asks first)"),
    ("q", "quit the viewer (training keeps running)"),
    ("space", "replay: pause / play"),
    ("left right", "replay: back / forward 10% of the run"),
    ("home end", "replay: start / end of the run"),
    ("+ -", "replay: play faster / slower"),
)

SCREENS = (
    "Overview: step time split into data wait and compute, GPU, CPU, memory, findings.",
    "Kernels/Ops: the latest profiler window's top ops and CUDA kernels.",
    "Data: data wait p50/p95, loader delivery rate vs the step's, workers' CPU and RSS.",
    "Memory: torch allocated/reserved and host RSS over steps, peak, GPU headroom, retries.",
    "Log: the script's own output (the last 5000 lines).",
    "Ranks: one row per rank of a distributed job; the straggler in red, named with its evidence.",
    "A figure that cannot be measured shows n/a with the reason, never a zero.",
)


class HelpScreen(ModalScreen[None]):
    """Keys and screens; any of escape, q or ? closes it."""

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close", key_display="?"),
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
