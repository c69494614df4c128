"""Provides KernelsScreen: a profiler window's phases, then its ops (grouped by phase) or CUDA kernels."""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.widgets import DataTable, Static

from pitstop.events import ProfileWindow
from pitstop.analysis import format as fmt
from pitstop.tui import opstable, view
from pitstop.tui.opstable import KERNEL_COLUMNS, NAME, SHARE, Column, TableRow
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame

# Cells each column spends besides its width: DataTable pads a cell by one on each side.
CELL_PADDING = 2
SCROLLBAR = 2
MIN_NAME = 14


class KernelsScreen(PitstopScreen):
    """Ops (`o`) or CUDA kernels (`c`) of one profiler window; `s` or a click sorts, `g` groups ops by phase."""

    class SeekProfile(Message):
        """Replay: move the cursor to the next (newer) or previous profiler window."""

        def __init__(self, newer: bool) -> None:
            super().__init__()
            self.newer = newer

    TITLE_TEXT = "2 ops"
    BINDINGS = [
        # Shown in the screen's own info line: the footer is full at 80 columns.
        Binding("o", "table('ops')", "Ops", show=False),
        Binding("c", "table('kernels')", "Kernels", show=False),
        Binding("s", "sort", "Sort", show=False),
        Binding("g", "group", "Group by phase", show=False),
        Binding("left_square_bracket", "window(1)", "Older window", key_display="[", show=False),
        Binding("right_square_bracket", "window(-1)", "Newer window", key_display="]", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.table_kind = "ops"
        self.sort_column = SHARE  # the share of the step, largest first
        self.grouped = True
        self.back = 0  # live: windows before the latest; a replay moves its cursor instead
        self._shown: tuple[int, str, int, bool, int] | None = None
        self._frame: Frame | None = None

    def compose_body(self) -> ComposeResult:
        yield Static(id="window-info")
        yield DataTable(id="profile-table", cursor_type="row", zebra_stripes=True)

    def on_resize(self, event: events.Resize) -> None:
        self._refill()  # the name column takes what the others leave

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
        info.update(self._window_text(window, frame, index, count))
        key = (id(window), self.table_kind, self.sort_column, self.grouped, self.size.width)
        if key != self._shown:
            self._fill(window, frame)
            self._shown = key

    def _no_window_text(self, frame: Frame) -> Text:
        how = "press p to capture one now" if frame.live else "this record has none before the cursor"
        return Text(f"No profiler window yet: {how}.", style="yellow")

    def _window_text(self, w: ProfileWindow, frame: Frame, index: int, count: int) -> Text:
        text = Text.assemble(
            (f"window {index}/{count}", "bold"),
            f"  steps {w.step_start}-{w.step_end - 1}  at {fmt.clock_time(w.t)}",
            f"  {w.trigger}  {w.duration_s:.2f} s  times from {w.device}",
        )
        phases = opstable.phase_summary(w, frame.run)
        if phases:
            text.append("\nstep: ", style="bold")
            for i, (label, ms, share) in enumerate(phases):
                if i:
                    text.append(" · ", style="dim")
                text.append(f"{label} ")
                text.append(fmt.pct(share) if share is not None else fmt.duration(ms / 1000.0),
                            style="bold")
        loader = frame.run.training_loader() if frame.run is not None else None
        if self.table_kind == "ops" and loader is not None and loader.num_workers == 0:
            if any(o.phase is not None for o in w.ops):
                text.append("\nnum_workers=0: the dataset's own ops run in this process: under data loading",
                            style="yellow")
            else:
                # A record made before ops carried their phase: which ran in __getitem__ is unknown.
                text.append("\nnum_workers=0: the dataset's ops are in this table, under their aten names",
                            style="yellow")
        if self.table_kind == "kernels" and w.kernels_unavailable:
            text.append(f"\nkernels: {fmt.na(w.kernels_unavailable)}", style="yellow")
        group = " · g ungroup" if self.grouped else " · g group by phase"
        text.append(f"\n[{self.table_kind}] o ops · c kernels · s sort"
                    + (group if self.table_kind == "ops" else "") + " · [ ] windows", style="dim")
        return text

    def _columns(self, window: ProfileWindow) -> tuple[Column, ...]:
        return opstable.op_columns(window) if self.table_kind == "ops" else KERNEL_COLUMNS

    def _fill(self, window: ProfileWindow, frame: Frame) -> None:
        table = self.query_one(DataTable)
        table.clear(columns=True)
        columns = self._columns(window)
        col = min(self.sort_column, len(columns) - 1)
        rows: list[TableRow] = (
            opstable.op_rows(window, frame.run, col, self.grouped) if self.table_kind == "ops"
            else opstable.kernel_rows(window, frame.run, col))
        # No horizontal scrollbar at 80 columns: the name takes what the others leave.
        # A number column is wide enough for its title and the sort marker (" ▼") either way.
        widths = [max(c.width, len(c.title) + 2) if c.width else 0 for c in columns]
        others = sum(w + CELL_PADDING for w in widths if w)
        name_w = max(MIN_NAME, (self.size.width or 80) - others - CELL_PADDING - SCROLLBAR)
        for i, c in enumerate(columns):
            marker = " ▼" if i == col and c.numeric else (" ▲" if i == col else "")
            table.add_column(c.title + marker, key=str(i), width=widths[i] or name_w)
        for row in rows:
            table.add_row(*self._cells(row, columns, name_w))

    @staticmethod
    def _cells(row: TableRow, columns: tuple[Column, ...], name_w: int) -> list[Text]:
        name = str(row.values[NAME])
        if row.group:
            share = row.values[SHARE]
            cells = [Text(fmt.shorten(name, name_w), style="bold cyan"),
                     Text(fmt.pct(float(share)) if isinstance(share, float) else "", style="bold cyan",
                          justify="right")]
            return cells + [Text("") for _ in columns[2:]]
        cells = [Text(fmt.shorten(name, name_w))]
        for i, value in enumerate(row.values[1:], start=1):
            if i == SHARE:
                text = fmt.pct(float(value), digits=1) if isinstance(value, float) else fmt.NA
            elif columns[i].title == "calls":
                text = f"{int(value):,}" if isinstance(value, float) else fmt.NA
            else:
                text = fmt.us(float(value)) if isinstance(value, float) else fmt.NA
            cells.append(Text(text, justify="right"))
        return cells

    def action_table(self, kind: str) -> None:
        self.table_kind = kind
        self.sort_column = SHARE
        self._refill()

    def action_group(self) -> None:
        self.grouped = not self.grouped
        self._refill()

    def action_sort(self) -> None:
        count = len(KERNEL_COLUMNS) if self.table_kind == "kernels" else len(opstable.OP_COLUMNS) + 1
        self.sort_column = (self.sort_column + 1) % count
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
