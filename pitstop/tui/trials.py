"""Provides the Trials view of `pitstop tune`: a live table of finished trials, the tuner's output, its report.

The tuner runs in its own process (it installs signal handlers, and Textual
wants the main thread); this app only reads what it writes: its journal's
records (trials started, their steps, finished trials, the outcome with its
report), and its output log, shown as it is and never parsed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import VerticalScroll
from textual.css.query import NoMatches
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Footer, Log, Static

from pitstop.analysis import format as fmt
from pitstop.analysis import progress_text as doing_text
from pitstop.profiling.launch import exit_code_of
from pitstop.tui import logtail
from pitstop.tui.inbox import Inbox
from pitstop.tui.logtail import LogBuffer
from pitstop.tui.messages import LogLinesArrived
from pitstop.tui.screens import ConfirmScreen, HelpScreen
from pitstop.tui.trialdata import JournalFollower, TrialRow, TuneState, baseline_of, best_of, ratio, read_journal
from pitstop.tui.tunelaunch import stat_key
from pitstop.tui.widgets import HeaderInfo, StatusHeader

# The journal's new lines are read 4 times a second: its running trial's steps move at most once a second.
POLL_S = 0.25
# A tuner that ended without an outcome record (it refused to start, or crashed): its last words.
LAST_WORDS = 12
BEST_STYLE = "bold green"
FAILED_STYLE = "yellow"
BAR_WIDTH = 24

KEYS: tuple[tuple[str, str], ...] = (
    ("q", "quit: asks whether to stop the tune (Yes: the tuner saves its journal; resume with --resume)"),
    ("d", "detach: leave the tuner running in the background and print how to follow it"),
    ("l", "show the tuner's output / its report (once it has finished)"),
    ("?", "this help (escape closes it)"),
)
NOTES = (
    "Each row is a finished trial: a fresh process running the script for a few steps with one configuration.",
    "x base is samples/s relative to the script's own settings (the baseline trial).",
    "The two bars: the running trial's steps (of warm-up + measured), and the tune's trials and budget.",
    "The best successful trial so far is green; when the tune ends, the tuner's winner (it also weighs",
    "noise and simplicity) is green and the report says where pitstop.toml was written.",
)


class JournalRead(Message):
    """The tune as its journal stands after new lines; a newer state replaces an older."""

    def __init__(self, state: TuneState) -> None:
        super().__init__()
        self.state = state

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, JournalRead)


def bar(fraction: float, width: int = BAR_WIDTH) -> Text:
    """A text progress bar: `━━━━━━╸─────` (plain characters: it reads over SSH and in snapshots)."""
    fraction = min(1.0, max(0.0, fraction))
    full = int(fraction * width)
    text = Text("━" * full, style="green")
    if full < width:
        text.append("╸" if fraction * width - full >= 0.5 else "─", style="green" if fraction * width - full >= 0.5
                    else "dim")
        text.append("─" * (width - full - 1), style="dim")
    return text


def progress_text(s: TuneState, now: float, running: bool) -> Text:
    """The running trial (steps done of planned, elapsed) and the whole tune (trials, budget left, ETA)."""
    t = s.totals
    if t is None:
        return Text("waiting for the tuner's first trial to start", style="dim") if running else Text("")
    out = Text()
    trial = s.running
    if running and trial is not None:
        # The clock moves between the tuner's lines: elapsed counts on from the latest one.
        steps = s.steps
        elapsed = steps.elapsed + now - steps.at if steps is not None else now - trial.at
        elapsed = max(0.0, elapsed)
        done = steps.steps_done if steps is not None else 0
        planned = steps.steps_planned if steps is not None else trial.steps_planned
        out.append(f"trial {trial.index} ", style="bold")
        out.append(f"{trial.label} [{trial.stage}]  ")
        if done == 0 and trial.first_step_limit:
            out.append_text(bar(elapsed / trial.first_step_limit))
            out.append(f"  no training step yet  {fmt.elapsed(elapsed)} "
                       f"(first-step limit {fmt.elapsed(trial.first_step_limit)})")
        else:
            out.append_text(bar(done / planned if planned else 0.0))
            out.append(f"  {done}/{planned} steps  {fmt.elapsed(elapsed)} (limit {fmt.elapsed(trial.limit)})")
        if done == 0 and steps is not None and steps.progress is not None:
            # What the first step is doing (LBFGS's closures, batches): a slow first step is not a hang.
            out.append(f"\n  first step: {doing_text(steps.progress)}")
        out.append("\n")
    elif running:
        out.append("between trials\n", style="dim")
    out.append("tune ", style="bold")
    planned_trials = s.planned
    fraction = t.budget_fraction
    if fraction is None and planned_trials:
        fraction = s.done / planned_trials
    out.append_text(bar(fraction or 0.0))
    out.append(f"  {s.done}/{planned_trials} trials" if planned_trials else f"  {s.done} trials")
    if t.budget_left:
        out.append(f"  budget {t.budget_left} left")
    if running and t.eta is not None:
        out.append(f"  ETA ~{fmt.elapsed(max(0.0, t.eta - max(0.0, now - s.totals_at)))}")
    return out


class TrialsApp(App[str]):
    """Watches a tuner process: its journal's trials, its output, and its report when it exits."""

    CSS_PATH = Path(__file__).with_name("pitstop.tcss")
    TITLE = "pitstop tune"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "quit_tune", "Quit"),
        Binding("d", "detach", "Detach"),
        Binding("l", "toggle_log", "Log/report"),
        Binding("question_mark", "help", "Help", key_display="?"),
    ]

    def __init__(
        self,
        proc: subprocess.Popen[bytes],
        journal: Path,
        log_path: Path,
        out: Path,
        clock: Callable[[], float] = time.time,
        *,
        started: float | None = None,
        stale: tuple[int, int, int] | None = None,
        resume_command: str | None = None,
    ) -> None:
        super().__init__()
        self.proc = proc
        self.journal = journal
        self.state = TuneState()
        self.log_path = log_path
        self.out = out
        self.clock = clock
        self.started = clock() if started is None else started
        self.stale = stale  # the journal of an earlier tune, until the tuner rewrites it
        self.resume_command = resume_command
        self.report: tuple[str, ...] = ()  # once the tuner exited: its report, or its last words
        self.journal_polls = 0  # journal reads so far (tests wait on it rather than on time)
        self.tuner_polls = 0
        self.finished_at: float | None = None
        self.returncode: int | None = None
        self.stopping = False
        self.detached = False
        self.log_buffer = LogBuffer(log_path)
        self._log_inbox: Inbox[list[str]] = Inbox()
        self._stop = threading.Event()
        self._shown_rows: tuple[int, str | None, str | None] | None = None
        self._log_seen = 0
        self._showing_report = False

    # -- layout -------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield StatusHeader(id="status")
        yield DataTable(id="trials-table", cursor_type="row", zebra_stripes=True)
        yield Static(id="trials-progress")
        yield Static(id="trials-best")
        yield Log(id="trials-log", max_lines=logtail.MAX_LOG_LINES, auto_scroll=True)
        with VerticalScroll(id="trials-report"):
            yield Static(id="trials-report-text")
        yield Footer(compact=True, show_command_palette=False)

    def on_mount(self) -> None:
        self._main.query_one("#trials-log", Log).border_title = f"tuner output: {self.log_path}"
        self._main.query_one("#trials-report").display = False
        # Inline until pitstop.tcss (shared) gets a #trials-progress rule like #trials-best's.
        self._main.query_one("#trials-progress").styles.padding = (0, 1)
        self._main.query_one("#trials-report").border_title = "report"
        self.watch_journal()
        self.tail_log()
        self.set_interval(POLL_S, self.poll_tuner)
        self.set_interval(1.0, self.refresh_view)  # the elapsed clock moves without new trials
        self.refresh_view()

    def on_unmount(self) -> None:
        self._stop.set()

    # -- reading (worker threads) -------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="journal", name="journal")
    def watch_journal(self) -> None:
        follower = JournalFollower(self.journal)
        while not self._stop.is_set():
            # An earlier tune's journal is skipped until the tuner rewrites it.
            state = follower.poll() if stat_key(self.journal) != self.stale else None
            if state is not None:
                self.post_message(JournalRead(state))
            self.journal_polls += 1
            self._stop.wait(POLL_S)

    @work(thread=True, exclusive=True, exit_on_error=False, group="log", name="log tail")
    def tail_log(self) -> None:
        def deliver(lines: list[str]) -> None:
            if self._log_inbox.put(lines):
                self.post_message(LogLinesArrived())

        logtail.tail(self.log_path, deliver, self._stop, follow=True)

    def on_worker_state_changed(self, event: object) -> None:
        from textual.worker import Worker, WorkerState

        assert isinstance(event, Worker.StateChanged)
        if event.state == WorkerState.ERROR and event.worker.error is not None:
            self.notify(f"{event.worker.name}: {event.worker.error}", severity="error", timeout=15)

    # -- messages -----------------------------------------------------------
    @property
    def rows(self) -> tuple[TrialRow, ...]:
        return self.state.rows

    def on_journal_read(self, message: JournalRead) -> None:
        if self.finished_at is None:  # after the exit, the whole journal was read once: it is final
            self.state = message.state
        self.refresh_view()

    def on_log_lines_arrived(self, message: LogLinesArrived) -> None:
        for lines in self._log_inbox.drain():
            self.log_buffer.extend(lines)
        self.refresh_view()

    def poll_tuner(self) -> None:
        self.tuner_polls += 1
        if self.finished_at is not None:
            return
        code = self.proc.poll()
        if code is None:
            return
        self.finished_at = self.clock()
        self.returncode = exit_code_of(code)
        # Read the journal whole once: the reading thread polls, and the outcome must not miss its end.
        if stat_key(self.journal) != self.stale:
            self.state = read_journal(self.journal)
        end = self.state.end
        self.report = end.report if end is not None else self._last_words()
        if self.stopping:
            self.exit("stopped")
            return
        self._show_report(True)
        self.refresh_view()

    # -- drawing ------------------------------------------------------------
    @property
    def _main(self) -> Screen[object]:
        """The screen the view's widgets live on (App.query_one would search a modal on top)."""
        return self.screen_stack[0]

    def mode(self) -> str:
        if self.finished_at is None:
            return "STOPPING" if self.stopping else "TUNING"
        if self.returncode == 0:
            return "DONE"
        return "STOPPED" if self.returncode == 130 else "FAILED"

    def _last_words(self) -> tuple[str, ...]:
        """No outcome in the journal (the tuner refused to start, or crashed): the end of its output."""
        try:
            lines = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError as err:
            lines = [f"cannot read the tuner's output {self.log_path}: {err.strerror or err}"]
        return tuple(line for line in lines if line.strip())[-LAST_WORDS:]

    def refresh_view(self) -> None:
        if not self.screen_stack:  # a message that arrived while the app shuts down: nothing to draw
            return
        try:
            with self.batch_update():
                self._draw_header()
                self._draw_table()
                self._draw_log()
        except NoMatches:
            # Widgets not mounted yet (a message before the first compose finished)
            # or already gone (shutting down): the next message redraws everything.
            return

    def _script(self) -> str:
        target = self.state.header.get("target") if self.state.header else None
        return str(target or self.journal.name)

    def _draw_header(self) -> None:
        s = self.state
        done, planned = s.done, s.planned
        until = self.finished_at if self.finished_at is not None else self.clock()
        items: list[tuple[str, str]] = [
            ("trials", f"{done}/{planned} planned" if planned else str(done)),
            ("elapsed", fmt.elapsed(until - self.started)),
            ("budget", s.start.budget if s.start is not None else fmt.na("not read yet")),
        ]
        if self.finished_at is not None:
            items.append(("exit", str(self.returncode)))
            if s.end is not None and s.end.config:
                items.append(("config", s.end.config))
        self._main.query_one(StatusHeader).info = HeaderInfo(title=self._script(), mode=self.mode(), items=tuple(items),
                                                       screen="trials")

    def _highlight(self) -> str | None:
        """The label to show in green: the tuner's winner once it said, else the fastest so far."""
        if self.state.end is not None and self.state.end.winner:
            return self.state.end.winner
        best = best_of(self.rows)
        return best.label if best is not None else None

    def _draw_table(self) -> None:
        rows = self.rows
        highlight = self._highlight()
        self._main.query_one("#trials-progress", Static).update(
            progress_text(self.state, self.clock(), self.finished_at is None))
        self._main.query_one("#trials-best", Static).update(self._best_text())
        key = (len(rows), highlight, rows[-1].label if rows else None)
        if key == self._shown_rows:
            return
        self._shown_rows = key
        table = self._main.query_one("#trials-table", DataTable)
        base = baseline_of(rows)
        unit = base.unit if base is not None else "samples/s"
        table.clear(columns=True)
        for title in ("#", "configuration", unit, "x base", "peak mem", "status", "stage"):
            table.add_column(title)
        for r in rows:
            won = r.ok and r.label == highlight
            style = BEST_STYLE if won else ("" if r.ok else FAILED_STYLE)
            # An unstable trial still measured a figure, and the verdict may quote it: it is shown.
            thr = (fmt.rate_value(r.throughput) + (f" ±{r.spread:.0%}" if r.spread is not None else "")
                   if r.throughput is not None else "-")
            x = ratio(r, base)
            mem = fmt.size(r.peak_mem) + (" host" if r.peak_mem is not None and r.mem_kind == "host" else "")
            status = "ok" if r.ok else f"{r.status}: {fmt.shorten(r.reason, 60)}" if r.reason else r.status
            table.add_row(
                Text(str(r.index), style=style, justify="right"),
                Text(("★ " if won else "") + r.label, style=style),
                Text(thr, style=style, justify="right"),
                Text(f"x{x:.2f}" if x is not None else "-", style=style, justify="right"),
                Text(mem if r.peak_mem is not None else "-", style=style, justify="right"),
                Text(status, style=style),
                Text(f"{r.stage}, {r.steps_text}", style=style),
            )
        if rows:
            table.move_cursor(row=len(rows) - 1, animate=False)  # follow the newest trial

    def _best_text(self) -> Text:
        rows = self.rows
        if not rows:
            how = "the baseline trial runs the script with its own settings first"
            return Text(f"No trial finished yet: {how}.", style="dim")
        base = baseline_of(rows)
        best = best_of(rows)
        end = self.state.end
        if end is not None and end.winner and not end.improves and end.status == "finished":
            return Text(f"Nothing beat the script's own settings: {self.out.name} was not written; "
                        "keep training as you do.", style="bold")
        if end is not None and end.winner:
            text = Text.assemble(("winner: ", "bold"), (end.winner, BEST_STYLE))
            if end.speedup is not None:
                text.append(f"  x{end.speedup:.2f}" + ("" if end.confirmed else " (not confirmed)"))
            if end.config:
                text.append(f"  written to {end.config}", style="bold")
            elif end.no_config:
                text.append(f"  no config written: {end.no_config}")
            return text
        if self.finished_at is not None and self.returncode != 0:
            why = f" ({end.no_config})" if end is not None and end.no_config else ""
            return Text(f"The tune ended without a winner: {self.out.name} was not written{why}.",
                        style=FAILED_STYLE)
        if best is None:
            return Text("No trial has succeeded yet.", style=FAILED_STYLE)
        x = ratio(best, base)
        return Text.assemble(("best so far: ", "bold"), (best.label, BEST_STYLE),
                             f"  {fmt.rate_value(best.throughput or 0.0)} {best.unit}" + (f", x{x:.2f} over the baseline" if x else ""))

    def _draw_log(self) -> None:
        lines = self.log_buffer.since(self._log_seen)
        if lines:
            log = self._main.query_one("#trials-log", Log)
            log.write_lines(lines)
            self._log_seen = self.log_buffer.total

    def _show_report(self, on: bool) -> None:
        self._showing_report = on
        report = self._main.query_one("#trials-report")
        report.display = on
        self._main.query_one("#trials-log", Log).display = not on
        if on:
            text = "\n".join(self.report) or "the tuner printed no report"
            if self.returncode not in (0, None) and self.resume_command and self.returncode == 130:
                text += f"\n\ncontinue with: {self.resume_command}"
            self._main.query_one("#trials-report-text", Static).update(Text(text))

    # -- actions ------------------------------------------------------------
    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(KEYS, NOTES, title="pitstop tune: Trials view keys"))

    def action_toggle_log(self) -> None:
        if self.finished_at is None:
            self.notify("the report comes when the tuner finishes; its output is shown until then")
            return
        self._show_report(not self._showing_report)

    def action_detach(self) -> None:
        if self.finished_at is not None:
            self.exit("quit")
            return
        self.detached = True
        self.exit("detach")

    def action_quit_tune(self) -> None:
        if self.finished_at is not None:
            self.exit("quit")
            return
        if self.stopping:
            self.notify("stopping: the tuner is saving its journal (d leaves it to finish alone)")
            return

        def answered(yes: bool | None) -> None:
            if not yes:
                self.notify("the tune goes on")
                return
            try:
                # The tuner's whole group: it takes SIGINT as Ctrl+C, kills its trial and keeps its journal.
                os.killpg(self.proc.pid, signal.SIGINT)
            except ProcessLookupError:
                pass  # it just ended by itself: poll_tuner shows its report
            self.stopping = True
            self.refresh_view()

        self.push_screen(ConfirmScreen(
            "Stop the tune? The tuner stops its current trial and keeps the finished ones in its journal "
            "(continue later with --resume). No keeps watching.", yes="Stop", no="No"), answered)

    # -- after the screen closes ----------------------------------------------
    def goodbye(self) -> str:
        """What to print once the screen is restored: the report, or how to follow a detached tuner."""
        if self.detached:
            follow = f"tail -f {self.log_path}"
            resume = f"; if it stops, continue with: {self.resume_command}" if self.resume_command else ""
            return (f"pitstop tune continues in the background (pid {self.proc.pid}); follow it: {follow}"
                    f"{resume}")
        lines = list(self.report)
        if self.returncode == 130 and self.resume_command:
            lines.append(f"continue with: {self.resume_command}")
        return "\n".join(lines)


def run_trials_viewer(
    proc: subprocess.Popen[bytes],
    journal: Path,
    log_path: Path,
    out: Path,
    clock: Callable[[], float] = time.time,
    *,
    stale: tuple[int, int, int] | None = None,
    resume_command: str | None = None,
) -> int:
    """Show a running tuner until it ends (or the user detaches); the tuner's exit code, 0 when detached."""
    app = TrialsApp(proc, journal, log_path, out, clock, stale=stale, resume_command=resume_command)
    app.run()
    if app.finished_at is None:
        # Closed without d or q (ctrl+q, an error in the app): leave the tune running, as d does,
        # rather than stop hours of trials or block on a tuner the user can no longer see.
        app.detached = True
    if app.detached:
        print(app.goodbye())
        return 0
    message = app.goodbye()
    if message:
        print(message)
    return app.returncode or 0
