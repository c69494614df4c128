"""Provides LogScreen: the script's own output, tailed from the log file, wrapped to the screen, searchable."""

from __future__ import annotations

from collections import deque

from rich.cells import cell_len, chop_cells
from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Log, Static

from pitstop.analysis import format as fmt
from pitstop.tui.logtail import MAX_LOG_LINES, LogBuffer, clean
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame

# A wrapped line's continuation is indented by this much, so it reads as one line.
CONTINUATION = "  "
# The Log keeps what was written; lines the buffer dropped are dropped from it in a rebuild
# once this many accumulate (a rebuild of 5,000 lines takes a few ms).
REBUILD_AFTER = 500


def wrap(line: str, width: int) -> list[str]:
    """One output line as rows of at most `width` cells (long lines were cut, and the
    horizontal scrollbar drew stray ▄▄ glyphs); continuations are indented."""
    line = clean(line)
    if width <= len(CONTINUATION) + 1 or cell_len(line) <= width:
        return [line]
    first, *rest = chop_cells(line, width)
    rows = [first]
    if rest:
        rows += [CONTINUATION + part for part in chop_cells("".join(rest), width - len(CONTINUATION))]
    return rows


class FollowingLog(Log):
    """A Log that stays at its end when it is resized while following (auto_scroll).

    Log follows only as lines are written: the header growing by a line after
    the last write left the last lines below the screen (seen in the 80x24
    snapshot: the log ended two lines short).
    """

    def on_resize(self, event: events.Resize) -> None:
        if self.auto_scroll:
            self.call_after_refresh(self.scroll_end, animate=False)


class LogScreen(PitstopScreen):
    """The last MAX_LOG_LINES lines of output; `/` searches, `n` jumps to the next match."""

    TITLE_TEXT = "5 log"
    BINDINGS = [
        # Shown in the status line: the footer is full at 80 columns.
        Binding("slash", "search", "Search", key_display="/", show=False),
        Binding("n", "next_match", "Next match", show=False),
        Binding("escape", "close_search", "Close search", show=False),
    ]

    def __init__(self, buffer: LogBuffer) -> None:
        super().__init__()
        self.buffer = buffer
        self._seen = 0
        self.pattern = ""
        self._match_line = -1
        self._search_note = ""  # kept across refreshes, which redraw the status line
        self._lines: deque[str] = deque(maxlen=MAX_LOG_LINES)  # the output lines in the Log, unwrapped
        self._rows: deque[int] = deque(maxlen=MAX_LOG_LINES)  # rows each of them takes there
        self._width = 0
        self._dropped = 0  # lines that left the deques but are still at the Log's top
        self._dropped_rows = 0  # the rows they take there

    def compose_body(self) -> ComposeResult:
        yield Static(id="log-status")
        yield FollowingLog(id="log", auto_scroll=True)
        yield Input(placeholder="search the log (enter to find, escape to close)", id="log-search")

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False
        self._status()

    def _wrap_width(self) -> int:
        log = self.query_one(Log)
        return max(10, log.scrollable_content_region.width - 1)

    def on_resize(self, event: events.Resize) -> None:
        self.call_after_refresh(self._ingest)

    def _rebuild(self) -> None:
        """Write every kept line again, wrapped to the Log's width."""
        log = self.query_one(Log)
        self._width = self._wrap_width()
        log.clear()
        rows: list[str] = []
        self._rows.clear()
        for line in self._lines:
            wrapped = wrap(line, self._width)
            self._rows.append(len(wrapped))
            rows.extend(wrapped)
        self._dropped = self._dropped_rows = 0
        if rows:
            log.write_lines(rows)

    def show_body(self, frame: Frame) -> None:
        self._ingest()
        self._status()

    def _ingest(self) -> None:
        """Take the buffer's new lines, wrapped to the Log's width (all of them again if it changed)."""
        log = self.query_one(Log)
        if log.scrollable_content_region.width <= 0:
            return  # not laid out yet: wrapping to no width would make one row per few characters
        changed = False
        if self._wrap_width() != self._width:
            self._rebuild()
            changed = True
        lines = self.buffer.since(self._seen)
        if lines:
            self._seen = self.buffer.total
            rows: list[str] = []
            for line in lines:
                wrapped = wrap(line, self._width)
                if len(self._lines) == self._lines.maxlen:
                    self._dropped += 1
                    self._dropped_rows += self._rows[0]
                self._lines.append(line)
                self._rows.append(len(wrapped))
                rows.extend(wrapped)
            if self._dropped >= REBUILD_AFTER:
                self._rebuild()
            else:
                log.write_lines(rows)
            changed = True
        if changed and log.auto_scroll:
            # Log follows only when already at the end; a layout change (the status line
            # wrapping) can leave it a few lines short, so follow explicitly after layout.
            log.call_after_refresh(log.scroll_end, animate=False)

    def _status(self, note: str | None = None) -> None:
        if note is not None:
            self._search_note = note
        extra = self._search_note
        b = self.buffer
        if b.path is None:
            text = Text(
                "No log here: the viewer was given no output file and found no output.log beside the "
                "run's record (`pitstop run` writes one there). The output went to the terminal or file "
                "the script was started with.",
                style="yellow",
            )
        elif b.error:
            text = Text(f"cannot read {b.path}: {b.error}", style="red")
        else:
            dropped = b.total - len(b.lines)
            text = Text(f"{b.path}  ({fmt.count(b.total, 'line')}" + (f", first {dropped:,} dropped" if dropped > 0
                                                                      else "")
                        + ")  / search · n next match", style="dim")
        if extra:
            text.append("\n" + extra, style="bold")
        self.query_one("#log-status", Static).update(text)

    def action_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.display = True
        search.focus()

    def action_close_search(self) -> None:
        search = self.query_one("#log-search", Input)
        search.display = False
        self.query_one(Log).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.pattern = event.value
        self._match_line = -1
        self.action_close_search()
        self.action_next_match()

    def action_next_match(self) -> None:
        if not self.pattern:
            self._status("no search yet: press / to search")
            return
        log = self.query_one(Log)
        lines = list(self._lines)
        needle = self.pattern.lower()
        hits = [i for i, line in enumerate(lines) if needle in line.lower()]
        if not hits:
            self._status(f"no match for {self.pattern!r}")
            return
        after = [i for i in hits if i > self._match_line]
        line = after[0] if after else hits[0]  # wrap around to the first match
        self._match_line = line
        log.auto_scroll = False  # stay on the match while new lines arrive
        row = self._dropped_rows + sum(list(self._rows)[:line])  # the match's first row in the Log
        log.scroll_to(y=max(0, row - 2), animate=False)
        first = self.buffer.total - len(lines)  # the number of the first kept line, from 0
        self._status(f"match {hits.index(line) + 1}/{len(hits)} for {self.pattern!r} at line {first + line + 1}: "
                     f"{clean(lines[line])[:200]}")
