"""Provides LogScreen: the script's own output, tailed from the log file, searchable."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.widgets import Input, Log, Static

from pitstop.tui.logtail import MAX_LOG_LINES, LogBuffer
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame


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

    def compose_body(self) -> ComposeResult:
        yield Static(id="log-status")
        yield Log(id="log", max_lines=MAX_LOG_LINES, auto_scroll=True)
        yield Input(placeholder="search the log (enter to find, escape to close)", id="log-search")

    def on_mount(self) -> None:
        self.query_one("#log-search", Input).display = False
        self._status()

    def show_body(self, frame: Frame) -> None:
        lines = self.buffer.since(self._seen)
        if lines:
            log = self.query_one(Log)
            log.write_lines(lines)
            self._seen = self.buffer.total
            if log.auto_scroll:
                # Log follows only when already at the end; a layout change (the status line
                # wrapping) can leave it a few lines short, so follow explicitly after layout.
                log.call_after_refresh(log.scroll_end, animate=False)
        self._status()

    def _status(self, note: str | None = None) -> None:
        if note is not None:
            self._search_note = note
        extra = self._search_note
        b = self.buffer
        if b.path is None:
            text = Text(
                "No log here: this viewer was not given the script's output. `pitstop run` writes it "
                "to a log file and shows it here; with `attach` or `view` it went to the terminal or "
                "file the script was started with.",
                style="yellow",
            )
        elif b.error:
            text = Text(f"cannot read {b.path}: {b.error}", style="red")
        else:
            dropped = b.total - len(b.lines)
            text = Text(f"{b.path}  ({b.total} lines" + (f", first {dropped} dropped" if dropped > 0 else "")
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
        lines = log.lines
        needle = self.pattern.lower()
        hits = [i for i, line in enumerate(lines) if needle in line.lower()]
        if not hits:
            self._status(f"no match for {self.pattern!r}")
            return
        after = [i for i in hits if i > self._match_line]
        line = after[0] if after else hits[0]  # wrap around to the first match
        self._match_line = line
        log.auto_scroll = False  # stay on the match while new lines arrive
        log.scroll_to(y=max(0, line - 2), animate=False)
        self._status(f"match {hits.index(line) + 1}/{len(hits)} for {self.pattern!r} at line {line + 1}: "
                     f"{lines[line][:200]}")
