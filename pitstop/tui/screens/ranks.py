"""Provides RanksScreen: one row per rank of a job, sortable, with the stragglers named and their evidence."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Static

from pitstop.analysis import JobSummary, RankRow
from pitstop.analysis import format as fmt
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame

STRAGGLER_STYLE = "bold red"
GONE_STYLE = "yellow"


@dataclass(frozen=True)
class RankColumn:
    """A column: its title, how to show a row's value, and the key it sorts by (None sorts last)."""

    title: str
    text: Callable[[RankRow], str]
    key: Callable[[RankRow], float | str | None]
    numeric: bool = True


def status_text(row: RankRow) -> str:
    """"running", "finished", or "gone 137" (its exit code): how it ended is said under the table."""
    if row.status != "gone":
        return row.status
    return f"gone {row.exit_code}" if row.exit_code is not None else "gone"


def _peak(row: RankRow) -> str:
    # Torch's CUDA peak when the rank is on a GPU; off CUDA its host RSS peak says what memory it used.
    if row.peak_mem_allocated is not None:
        return fmt.size(row.peak_mem_allocated)
    return fmt.size(row.peak_rss) + " rss" if row.peak_rss is not None else fmt.NA


def rank_text(row: RankRow) -> str:
    """The rank number; "–" for a process without one (its pid has a column of its own)."""
    return str(row.rank) if row.rank is not None else "–"


# Short titles: every column fits 80 columns without a horizontal scrollbar.
COLUMNS = (
    RankColumn("rank", rank_text, lambda r: r.rank if r.rank is not None else r.label),
    RankColumn("node", lambda r: r.host or fmt.NA, lambda r: r.host, numeric=False),
    RankColumn("pid", lambda r: str(r.pid) if r.pid is not None else fmt.NA, lambda r: r.pid),
    RankColumn("status", status_text, lambda r: status_text(r), numeric=False),
    RankColumn("step", lambda r: str(r.last_step) if r.last_step is not None else "–", lambda r: r.last_step),
    RankColumn("step p50", lambda r: fmt.duration(r.step_p50_s), lambda r: r.step_p50_s),
    RankColumn("wait", lambda r: fmt.pct(r.data_wait_frac), lambda r: r.data_wait_frac),
    RankColumn("compute", lambda r: fmt.duration(r.compute_p50_s), lambda r: r.compute_p50_s),
    RankColumn("peak mem", _peak,
               lambda r: r.peak_mem_allocated if r.peak_mem_allocated is not None else r.peak_rss),
    RankColumn("GPU", lambda r: fmt.percent(r.gpu_util_mean), lambda r: r.gpu_util_mean),
)
HOST = 1  # the host column is left out while every rank runs on one host


def sorted_rows(rows: tuple[RankRow, ...], column: int) -> list[RankRow]:
    """Rows by one column: numbers high first (the slowest rank on top), text A-Z; unknowns last."""
    col = COLUMNS[column]
    known = [r for r in rows if col.key(r) is not None]
    unknown = [r for r in rows if col.key(r) is None]
    if column == 0:  # rank order is read low to high
        known.sort(key=lambda r: (isinstance(col.key(r), str), col.key(r)))  # type: ignore[arg-type, return-value]
    elif col.numeric:
        known.sort(key=lambda r: float(col.key(r)), reverse=True)  # type: ignore[arg-type]
    else:
        known.sort(key=lambda r: str(col.key(r)))
    return known + unknown


class RanksScreen(PitstopScreen):
    """Every rank of the job side by side; the straggler's row in red and named under the table."""

    TITLE_TEXT = "6 ranks"
    BINDINGS = [
        # Shown in the screen's own info line: the footer is full at 80 columns.
        Binding("s", "sort", "Sort", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.sort_column = 0
        self._shown: tuple[int, int] | None = None
        self._summary: JobSummary | None = None
        self._columns: list[int] = []  # indices into COLUMNS of the columns shown

    def compose_body(self) -> ComposeResult:
        yield Static(id="ranks-info")
        yield DataTable(id="ranks-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="stragglers")

    def show_body(self, frame: Frame) -> None:
        summary = frame.summary
        info = self.query_one("#ranks-info", Static)
        if summary is None or not summary.rows:
            info.update(Text("waiting for the first rank's events…", style="dim"))
            self.query_one("#stragglers", Static).update("")
            return
        key = (id(summary), self.sort_column)
        if key == self._shown:
            return
        self._shown, self._summary = key, summary
        info.update(self._info_text(summary))
        self._fill(summary)
        self.query_one("#stragglers", Static).update(self._straggler_text(summary))

    def _info_text(self, summary: JobSummary) -> Text:
        if summary.ranks == 1:
            return Text("One process in this job: this screen compares the ranks of a distributed job "
                        "(torchrun, accelerate), e.g. pitstop run -- torchrun --nproc_per_node 2 train.py",
                        style="yellow")
        world = f" of world size {summary.world_size}" if summary.world_size else ""
        rate = fmt.rate(summary.samples_per_s, "samples", "batch size unknown")
        steps = fmt.rate(summary.steps_per_s, "steps") if summary.steps_per_s is not None else ""
        hosts = {r.host for r in summary.rows if r.host}
        where = f" on {next(iter(hosts))}" if len(hosts) == 1 else ""
        return Text.assemble(
            (f"{summary.ranks} ranks{world}{where}", "bold"),
            f"  job {rate}" + (f", {steps} (slowest rank)" if steps else ""),
            ("\np50s and the data-wait share over measured steps (warm-up dropped) · s or a click on a "
             "header sorts", "dim"),
        )

    def _fill(self, summary: JobSummary) -> None:
        table = self.query_one("#ranks-table", DataTable)
        cursor = table.cursor_row
        table.clear(columns=True)
        slow = {s.label for s in summary.stragglers}
        shown = [i for i in range(len(COLUMNS))
                 if i != HOST or len({r.host for r in summary.rows}) > 1]
        self._columns = shown
        for i in shown:
            col = COLUMNS[i]
            marker = (" ▼" if col.numeric and i else " ▲") if i == self.sort_column else ""
            table.add_column(col.title + marker, key=str(i))
        for row in sorted_rows(summary.rows, self.sort_column):
            style = STRAGGLER_STYLE if row.label in slow else (GONE_STYLE if row.status == "gone" else "")
            cells = []
            for i in shown:
                col = COLUMNS[i]
                text = col.text(row)
                if i == 0 and row.label in slow:
                    text += " ◀ straggler"
                cells.append(Text(text, style=style, justify="right" if col.numeric and i else "left"))
            table.add_row(*cells, key=row.label)
        if 0 <= cursor < table.row_count:
            table.move_cursor(row=cursor, animate=False)

    def _straggler_text(self, summary: JobSummary) -> Text:
        if summary.ranks < 2:
            return Text("")
        text = Text()
        if not summary.stragglers:
            text.append("No straggler: every rank keeps pace with the others.", style="green")
        for s in summary.stragglers:
            if text:
                text.append("\n")
            text.append("Straggler ", style=STRAGGLER_STYLE)
            text.append(s.text)
            text.append(f"; the job waits {fmt.pct(s.share)} of its {fmt.duration(s.job_step_s)} step "
                        "(p50 over the same steps) on it",
                        style="bold")
        for row in summary.gone:
            text.append("\n")
            text.append(f"{row.label} is gone: ", style=GONE_STYLE)
            last = f", last step {row.last_step}" if row.last_step is not None else ""
            text.append(f"{row.status_reason or 'stream ended'}{last}")
        return text

    def action_sort(self) -> None:
        shown = self._columns or list(range(len(COLUMNS)))
        later = [i for i in shown if i > self.sort_column]
        self.sort_column = later[0] if later else shown[0]
        self._refill()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        self.sort_column = int(str(event.column_key.value))  # the key is the column's index in COLUMNS
        self._refill()

    def _refill(self) -> None:
        if self._summary is not None:
            self._shown = (id(self._summary), self.sort_column)
            self._fill(self._summary)
