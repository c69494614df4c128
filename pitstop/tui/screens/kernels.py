"""Provides KernelsScreen: the latest profiler window as a sortable table of ops or CUDA kernels."""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from pitstop.events import ProfileWindow
from pitstop.tui import format as fmt
from pitstop.tui import view
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame


@dataclass(frozen=True)
class Column:
    """A table column: its title and whether it holds a number (sorted high first)."""

    title: str
    numeric: bool = True


OP_COLUMNS = (Column("name", False), Column("calls"), Column("self"), Column("total"),
              Column("mean"), Column("device self"))
KERNEL_COLUMNS = (Column("name", False), Column("calls"), Column("total"), Column("mean"))


def op_rows(window: ProfileWindow) -> list[tuple[str, float, float, float, float, float | None]]:
    """(name, calls, self us, total us, mean us per call, device self us) per op."""
    return [
        (o.name, o.calls, o.self_us, o.total_us, o.total_us / o.calls if o.calls else 0.0, o.device_self_us)
        for o in window.ops
    ]


def kernel_rows(window: ProfileWindow) -> list[tuple[str, float, float, float]]:
    return [(k.name, k.calls, k.total_us, k.mean_us) for k in window.kernels]


class KernelsScreen(PitstopScreen):
    """Ops (`o`) or CUDA kernels (`c`) of one profiler window; `s` or a click sorts."""

    class SeekProfile(Message):
        """Replay: move the cursor to the next (newer) or previous profiler window."""

        def __init__(self, newer: bool) -> None:
            super().__init__()
            self.newer = newer

    TITLE_TEXT = "2 kernels/ops"
    BINDINGS = [
        # Shown in the screen's own info line: the footer is full at 80 columns.
        Binding("o", "table('ops')", "Ops", show=False),
        Binding("c", "table('kernels')", "Kernels", show=False),
        Binding("s", "sort", "Sort", show=False),
        Binding("left_square_bracket", "window(1)", "Older window", key_display="[", show=False),
        Binding("right_square_bracket", "window(-1)", "Newer window", key_display="]", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.table_kind = "ops"
        self.sort_column = 2  # ops: self time; kernels: total (set in action_table)
        self.back = 0  # live: windows before the latest; a replay moves its cursor instead
        self._shown: tuple[int, str, int] | None = None
        self._frame: Frame | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="window-info")
        yield DataTable(id="profile-table", cursor_type="row", zebra_stripes=True)

    def show_body(self, frame: Frame) -> None:
        self._frame = frame
        window = view.profile_at(frame.run, 0 if frame.replay is not None else self.back)
        info = self.query_one("#window-info", Static)
        if window is None:
            info.update(self._no_window_text(frame))
            self.query_one(DataTable).clear(columns=True)
            self._shown = None
            return
        count = len(frame.run.profiles) if frame.run is not None else 0
        index = count - (0 if frame.replay is not None else min(self.back, count - 1))
        info.update(self._window_text(window, index, count))
        key = (id(window), self.table_kind, self.sort_column)
        if key != self._shown:
            self._fill(window)
            self._shown = key

    def _no_window_text(self, frame: Frame) -> Text:
        how = "press p to capture one now" if frame.live else "this record has none before the cursor"
        return Text(f"No profiler window yet: {how}.", style="yellow")

    def _window_text(self, w: ProfileWindow, index: int, count: int) -> Text:
        text = Text.assemble(
            (f"window {index}/{count}", "bold"),
            f"  steps {w.step_start}-{w.step_end - 1}  at {fmt.clock_time(w.t)}",
            f"  {w.trigger}  {w.duration_s:.2f} s  times from {w.device}",
        )
        if self.table_kind == "kernels" and w.kernels_unavailable:
            text.append(f"\nkernels: {fmt.na(w.kernels_unavailable)}", style="yellow")
        text.append(f"\n[{self.table_kind}] o ops · c kernels · s sort · [ ] windows", style="dim")
        return text

    def _fill(self, window: ProfileWindow) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        columns = OP_COLUMNS if self.table_kind == "ops" else KERNEL_COLUMNS
        rows: list[tuple] = op_rows(window) if self.table_kind == "ops" else kernel_rows(window)  # type: ignore[assignment]
        col = min(self.sort_column, len(columns) - 1)
        if columns[col].numeric:
            rows.sort(key=lambda r: -1.0 if r[col] is None else float(r[col]), reverse=True)
        else:
            rows.sort(key=lambda r: str(r[col]))
        for i, c in enumerate(columns):
            marker = " ▼" if i == col and c.numeric else (" ▲" if i == col else "")
            table.add_column(c.title + marker, key=str(i))
        for row in rows:
            cells: list[Text] = [Text(fmt.shorten(str(row[0]), 60))]
            cells.append(Text(str(int(row[1])), justify="right"))
            for value in row[2:]:
                cells.append(Text(fmt.us(value) if value is not None else fmt.NA, justify="right"))
            table.add_row(*cells)

    def action_table(self, kind: str) -> None:
        self.table_kind = kind
        self.sort_column = 2
        self._refill()

    def action_sort(self) -> None:
        columns = OP_COLUMNS if self.table_kind == "ops" else KERNEL_COLUMNS
        self.sort_column = (self.sort_column + 1) % len(columns)
        self._refill()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sort_column = event.column_index
        self._refill()

    def action_window(self, delta: int) -> None:
        frame = self._frame
        if frame is not None and frame.replay is not None:
            # In a replay a window is a moment: ask the app to move the whole viewer's cursor.
            self.post_message(self.SeekProfile(newer=delta < 0))
            return
        count = len(frame.run.profiles) if frame is not None and frame.run is not None else 0
        self.back = min(max(0, self.back + delta), max(0, count - 1))
        self._refill()

    def _refill(self) -> None:
        self._shown = None
        if self._frame is not None:
            self.show_body(self._frame)
