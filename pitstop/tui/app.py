"""Provides PitstopApp: the Textual viewer of one job's event stream, live or replayed.

Data enters one way (STYLE.md): the reader worker thread iterates the source,
puts each StreamBatch in an Inbox and rings a doorbell message; the handler on
the UI thread drains the inbox into a JobState and asks for a refresh. Refreshes
are throttled to REFRESH_S, and only the visible screen is handed a Frame.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.app import App, ScreenStackError
from textual.binding import Binding
from textual.timer import Timer
from textual.worker import Worker, WorkerState

from pitstop.analysis import (
    Advice,
    Finding,
    JobState,
    JobSummary,
    RuleFailure,
    RunState,
    StepSplit,
    StreamBatch,
    advise,
    job_advice,
    job_summary,
    step_split,
    stream_label,
)
from pitstop.events import Note
from pitstop.errors import PitstopError, reason_of
from pitstop.recorded._sigterm import read_sigterm_ends
from pitstop.streams import Replies
from pitstop.tui import logtail
from pitstop.tui.control import RunControl
from pitstop.tui.glance import quiet_text
from pitstop.tui.inbox import Inbox
from pitstop.tui.logtail import LogBuffer
from pitstop.tui.messages import BatchesArrived, LogLinesArrived, ReplayLoaded
from pitstop.tui.playback import Playback
from pitstop.tui.replay import Timeline, timeline_of
from pitstop.tui.tunelaunch import TuneRequest
from pitstop.tui.screens import (
    DataScreen,
    FindingsScreen,
    HelpScreen,
    KernelsScreen,
    LogScreen,
    MemoryScreen,
    OverviewScreen,
    PitstopScreen,
    RanksScreen,
)
from pitstop.tui.screens.stacks import StacksScreen
from pitstop.tui.view import Frame, Replay

if TYPE_CHECKING:
    from pitstop.profiling.sources import EventSource

# 4 refreshes a second: a figure is at most 0.25 s stale (the viewer's lag target is
# 0.5 s at p95) and the viewer stays far from its 20%-of-a-core budget.
REFRESH_S = 0.25
# The elapsed clock and the throttled findings move even when no event arrives.
TICK_S = 1.0
# A SIGTERM to pitstop closes the viewer within this long (a flag read on a timer: a signal handler must not touch widgets).
STOP_POLL_S = 0.25

MODES_ORDER = ("overview", "kernels", "data", "memory", "log", "ranks")
# job_summary and the advice rules walk every retained step of every rank (up to 20,000):
# once a second is enough for advice and keeps the viewer under its CPU budget.
SUMMARY_EVERY_S = 1.0
FINDINGS_EVERY_S = 1.0


def prefixed(prefix: str, message: str) -> str:
    """"profile: window skipped": the prefix once, even when the message already starts with it.

    Agent notes may name their source ("profile: window skipped" from source
    "profile"): prefixing again read "profile: profile: ...".
    """
    message = message.strip()
    if message.lower().startswith(f"{prefix.lower()}:"):
        message = message[len(prefix) + 1:].lstrip()
    return f"{prefix}: {message}"


class PitstopApp(RunControl, Playback, App[str]):
    """The viewer: given an EventSource (socket, record, or a test's list).

    Its actions on the training run are RunControl's (pitstop.tui.control), a
    replay's keys Playback's (pitstop.tui.playback); reading, refreshing and the
    screens are here.
    """

    # Absolute: Textual resolves a relative CSS_PATH against a subclass's own module.
    CSS_PATH = Path(__file__).with_name("pitstop.tcss")
    TITLE = "pitstop"
    ENABLE_COMMAND_PALETTE = False  # every action has a key; ^p would only take footer room
    BINDINGS = [
        Binding("1", "show('overview')", "Main", tooltip="Overview"),
        Binding("2", "show('kernels')", "Ops", tooltip="Kernels and ops"),
        Binding("3", "show('data')", "Data"),
        Binding("4", "show('memory')", "Mem", tooltip="Memory"),
        Binding("5", "show('log')", "Log"),
        Binding("6", "show('ranks')", "Ranks"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),  # htop's keys
        Binding("f", "findings", "Findings", show=False),
        Binding("w", "waits", "Waits"),  # in the footer only while a rank has stall stacks (check_action)
        Binding("p", "profile", "Profile"),
        Binding("t", "tune", "Tune"),
        Binding("r", "next_rank", "Rank", show=False),
        # Off the footer since "6 Ranks" came: q leaves training running too (Help lists d).
        Binding("d", "detach", "Detach", show=False),
        Binding("k", "stop_training", "Stop"),
        Binding("q", "quit_viewer", "Quit"),
        # In a monitor Ctrl+C quits the viewer, as in htop and nvitop (training keeps running,
        # as with q); priority, so a focused input or table does not take it.
        Binding("ctrl+c", "quit_viewer", "Quit", show=False, priority=True),
        Binding("f10", "quit_viewer", "Quit", show=False),
        Binding("S", "screenshot_svg", "Screenshot", show=False),
        # Only in a replay (check_action); priority, or a focused scroll view would take
        # home/end/arrows. Seek keys are in Help: the footer is full at 80 columns.
        Binding("space", "toggle_play", "Play", priority=True),
        Binding("left", "seek(-1)", "Back", show=False, priority=True),
        Binding("right", "seek(1)", "Fwd", show=False, priority=True),
        Binding("home", "seek_to('start')", "Start", show=False, priority=True),
        Binding("end", "seek_to('end')", "End", show=False, priority=True),
        Binding("plus", "speed(1)", "Faster", key_display="+", show=False),
        Binding("minus", "speed(-1)", "Slower", key_display="-", show=False),
    ]
    _REPLAY_ACTIONS = frozenset({"toggle_play", "seek", "seek_to", "speed"})
    # Nothing to detach from, stop or profile in a replay (and the footer has no room for them).
    _LIVE_ACTIONS = frozenset({"detach", "stop_training", "profile"})

    def __init__(
        self,
        source: EventSource,
        log_path: Path | None = None,
        detach_hint: str | None = None,
        clock: Callable[[], float] = time.time,
        can_tune: bool = False,
        stop: threading.Event | None = None,
    ) -> None:
        super().__init__()
        self.stop = stop  # set from a signal handler: a thread-safe flag the app looks at, never a widget call
        self.can_tune = can_tune  # the caller can start a tune when the viewer exits with "tune"
        self.tune_request: TuneRequest | None = None
        self.source = source
        self.live = bool(source.live)
        self.log_path = log_path
        self.detach_hint = detach_hint
        self.clock = clock
        self.job = JobState()
        self.timeline: Timeline | None = None
        self.paused = True
        self.speed = 1.0
        self.rank_index = 0
        self.failed: str | None = None
        self.ended = False
        self.exit_reason = "quit"
        self.log_buffer = LogBuffer(log_path)
        self._inbox: Inbox[StreamBatch] = Inbox()
        self._log_inbox: Inbox[list[str]] = Inbox()
        self._stop_log = threading.Event()
        self._last_refresh = 0.0
        self._refresh_timer: Timer | None = None
        self._play_timer: Timer | None = None
        self._play_last = 0.0
        self._summary: JobSummary | None = None
        self._summary_key: tuple[int, int] | None = None
        self._summary_at = 0.0
        self._findings: tuple[Finding, ...] | None = None
        self._split: StepSplit | None = None
        self._switching = False  # refresh_views for a screen switch: reuse the figures of this run
        self._findings_key: tuple[int, int, int, int] | None = None
        self._findings_at = 0.0
        self._said: set[str] = set()  # failures already notified: each once, not every second
        self.screenshot_dir: Path | None = None  # None: the current directory
        self._waits_shown = False  # a rank has stall stacks: `w` works and is in the footer

    # -- start --------------------------------------------------------------
    def on_mount(self) -> None:
        self.add_mode("overview", OverviewScreen)
        self.add_mode("kernels", KernelsScreen)
        self.add_mode("data", DataScreen)
        self.add_mode("memory", MemoryScreen)
        self.add_mode("log", lambda: LogScreen(self.log_buffer))
        self.add_mode("ranks", RanksScreen)
        self.switch_mode("overview")
        self.sub_title = self.source.label
        self.read_source()
        if self.log_path is not None:
            self.tail_log(self.log_path)
        self.set_interval(TICK_S, self.refresh_views)
        if self.stop is not None:
            self.set_interval(STOP_POLL_S, self._stop_when_asked)

    def _find_session_log(self) -> None:
        """After `attach` or `view` (no log given): the output.log `pitstop run` wrote beside the record."""
        if self.log_path is not None:
            return
        for _, run in self.job.ranks():
            record = run.hello.record if run.hello is not None else None
            found = logtail.session_log(record) if record else None
            if found is not None:
                self.log_path = self.log_buffer.path = found
                self.tail_log(found)
                return

    def on_unmount(self) -> None:
        # The reader thread is blocked in source.batches(): closing the source ends it, or
        # the interpreter would wait for it at exit and the viewer would hang on `q`.
        self._stop_log.set()
        try:
            self.source.close()
        except Exception as err:  # a failing close must not turn a quit into a traceback
            self.log.warning(f"closing the source failed: {reason_of(err)}")

    # -- reading (worker threads) -------------------------------------------
    @work(thread=True, exclusive=True, exit_on_error=False, group="reader", name="reader")
    def read_source(self) -> None:
        """Iterate the (blocking) source; hand batches to the UI thread via the inbox."""
        if not self.live:
            # A replay is indexed in one pass, then shown up to a cursor (see pitstop.tui.replay).
            self.post_message(ReplayLoaded(timeline_of(self.source)))
            return
        for batch in self.source.batches():
            if self._inbox.put(batch):
                self.post_message(BatchesArrived())

    @work(thread=True, exclusive=True, exit_on_error=False, group="log", name="log tail")
    def tail_log(self, path: Path) -> None:
        def deliver(lines: list[str]) -> None:
            if self._log_inbox.put(lines):
                self.post_message(LogLinesArrived())

        logtail.tail(path, deliver, self._stop_log, follow=self.live)

    def send_command(self, name: str) -> Worker[Replies]:
        """Send "profile" or "stop" to every process in a thread; their answers become a notification."""
        # run_worker rather than @work: the worker is named after the command for its notice.
        return self.run_worker(
            partial(self.source.command, name),
            name=name,
            group="command",
            thread=True,
            exit_on_error=False,
        )

    # -- messages from the threads ------------------------------------------
    def on_batches_arrived(self, message: BatchesArrived) -> None:
        batches = self._inbox.drain()
        for batch in batches:
            self.job.add(batch)
            if batch.error is not None:  # a stream that broke is said, not only closed
                self.say_failure(f"stream:{batch.stream}",
                                 f"stream from {stream_label(self.job, batch.stream)} ended: {batch.error}")
            for event in batch.events:  # the agent's warnings are said, not only recorded
                if isinstance(event, Note) and event.level in ("warn", "error"):
                    self.notify(prefixed(event.source, event.message), title="pitstop",
                                severity="error" if event.level == "error" else "warning", timeout=12)
        if any(batch.closed for batch in batches):
            self._read_sigterm_traces()
        if batches:
            self._find_session_log()
            self.request_refresh()

    def _read_sigterm_traces(self) -> None:
        """A closed stream without its end, whose process left a SIGTERM trace: ended by SIGTERM, said live."""
        for note in read_sigterm_ends(self.job):
            self.notify(note, title="pitstop", severity="warning", timeout=12)

    def on_replay_loaded(self, message: ReplayLoaded) -> None:
        self.timeline = message.timeline
        # A replay opens on the whole run, paused: `home` then `space` plays it back.
        self.job = self.timeline.seek(self.timeline.end)
        self.ended = True
        self._find_session_log()
        if not len(self.timeline):
            self.notify("replay: the record holds no events", severity="warning")
        self.refresh_bindings()
        self.refresh_views()

    def on_log_lines_arrived(self, message: LogLinesArrived) -> None:
        for lines in self._log_inbox.drain():
            self.log_buffer.extend(lines)
        self.request_refresh()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        worker = event.worker
        if event.state == WorkerState.ERROR and worker.error is not None:
            reason = reason_of(worker.error)
            if worker.group == "reader":
                self.failed = reason
                self.notify(f"event stream failed: {reason}", title="pitstop", severity="error", timeout=30)
                self.refresh_views()
            elif worker.group == "log":
                self.log_buffer.error = reason
                self.refresh_views()
            elif worker.group == "command":
                self.notify(prefixed(worker.name, reason), severity="error", timeout=8)
            elif worker.group == "stacks":  # py-spy missing or not permitted: its one line, with the fix
                self.notify(prefixed("stacks", reason), severity="error", timeout=15)
        elif event.state == WorkerState.SUCCESS:
            if worker.group == "reader" and self.live:
                self.ended = True
                # Every stream is over: a rank without an End event died (shown as gone).
                self.job.close_all()
                self._read_sigterm_traces()
                self.notify("the event stream ended: training finished or the agent stopped", timeout=8)
                self.refresh_views()
            elif worker.group == "command":
                # Each process's own answer, or that it gave none ("sent" said nothing).
                replies: Replies = worker.result
                self.notify(prefixed(worker.name, replies.text()), timeout=8,
                            severity="information" if replies.complete else "warning")

    # -- refreshing ---------------------------------------------------------
    def request_refresh(self) -> None:
        """Refresh now if the last refresh is older than REFRESH_S, else once at that deadline."""
        wait = self._last_refresh + REFRESH_S - time.monotonic()
        if wait <= 0:
            self.refresh_views()
        elif self._refresh_timer is None:
            self._refresh_timer = self.set_timer(wait, self._timed_refresh)

    def _timed_refresh(self) -> None:
        self._refresh_timer = None
        self.refresh_views()

    def current_run(self) -> tuple[str, RunState | None]:
        ranks = self.job.ranks()
        if not ranks:
            return "", None
        if self.rank_index == 0:
            primary = self.job.primary()
            label = next((lbl for lbl, run in ranks if run is primary), ranks[0][0])
            return label, primary
        return ranks[self.rank_index % len(ranks)]

    def job_figures(self) -> JobSummary | None:
        """The job's summary, recomputed at most once a second (at once for a new JobState)."""
        job = self.job
        if not job.runs:
            return None
        key = (id(job), job.version)
        now = time.monotonic()
        stale = self._summary_key is None or self._summary_key[0] != key[0] or (
            key != self._summary_key and now - self._summary_at >= SUMMARY_EVERY_S and not self._switching)
        if stale:
            try:
                summary = job_summary(job)
            except Exception as err:  # noqa: BLE001 - said once; the rank's own screens go on
                self.say_failure("job-summary", f"job summary failed: {reason_of(err)}")
                summary = None
            self._summary, self._summary_key, self._summary_at = summary, key, now
        return self._summary

    def run_figures(self, run: RunState | None) -> tuple[tuple[Finding, ...] | None, StepSplit | None]:
        """The shown run's findings (the job's first: a straggler holds every rank back) and step split.

        Computed here once for every screen (the overview's finding and the Data
        screen's verdict are the same object), at most once a second, at once for
        another run, a new JobState or a replay's seek. None before the first step.
        Both walk every retained step (the rules ~11 ms, the split ~7 ms at 5,000
        steps): per refresh they were most of a screen switch.
        """
        if run is None or run.last_step is None:
            return None, None
        job = self.job
        key = (id(job), id(run), run.version, job.version)
        now = time.monotonic()
        if self._findings_key is not None:
            if key == self._findings_key:
                return self._findings, self._split
            # A replay's seek is a jump the user asked for: its figures come at once.
            same = self._findings_key[:2] == key[:2] and self.timeline is None
            if same and (now - self._findings_at < FINDINGS_EVERY_S or self._switching):
                return self._findings, self._split
        # The job's summary of this very state when job_figures made it: over 64 ranks it costs ~0.2 s.
        summary = self._summary if self._summary_key == (id(job), job.version) else None
        advice = (job_advice(job, summary=summary) if len(job.runs) > 1 else Advice()) + advise(run)
        self._findings = advice.findings
        self.say_failures(advice.failures)
        self._split = step_split(run)
        self._findings_key, self._findings_at = key, now
        return self._findings, self._split

    def say_failure(self, key: str, text: str) -> None:
        """A visible notification for something that failed, once per `key` (a rule, a stream)."""
        if key not in self._said:
            self._said.add(key)
            self.notify(text, title="pitstop", severity="error", timeout=30)

    def say_failures(self, failures: tuple[RuleFailure, ...]) -> None:
        """"advice rule host-sync failed: ..." for each rule that raised, once (the rules run every second)."""
        for failure in failures:
            self.say_failure(f"rule:{failure.rule}", failure.text)

    def frame(self) -> Frame:
        label, run = self.current_run()
        summary = self.job_figures()
        found, split = self.run_figures(run)
        replay = None
        if self.timeline is not None:
            tl = self.timeline
            replay = Replay(tl.cursor, tl.start, tl.end, self.paused, self.speed)
        return Frame(
            job=self.job,
            run=run,
            rank_label=label,
            now=replay.cursor if replay is not None else self.clock(),
            label=self.source.label,
            live=self.live,
            failed=self.failed,
            ended=self.ended,
            replay=replay,
            summary=summary,
            findings=found,
            split=split,
        )

    def refresh_views(self) -> None:
        """Hand the visible screen a new Frame (one repaint for all its widgets)."""
        self._last_refresh = time.monotonic()
        try:
            screen = self.screen
        except ScreenStackError:  # a batch that arrived while the app shuts down
            return
        if not isinstance(screen, PitstopScreen):
            return
        with self.batch_update():
            screen.show(self.frame())
        waits = any(run.stall_stacks is not None for run in self.job.runs.values())
        if waits != self._waits_shown:  # `w Waits` comes into the footer with the first stall's stacks
            self._waits_shown = waits
            self.refresh_bindings()

    # -- actions: screens ---------------------------------------------------
    async def action_show(self, mode: str) -> None:
        if self.current_mode != mode:
            await self.switch_mode(mode)
        # A screen switch shows the figures already computed (at most a second old): the ~30 ms
        # of rules, split and job summary wait for the next tick, not the key.
        self._switching = True
        try:
            self.refresh_views()
        finally:
            self._switching = False

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_findings(self) -> None:
        if isinstance(self.screen, FindingsScreen):
            return
        frame = self.frame()
        self.push_screen(FindingsScreen(frame.findings, quiet_text(frame)))

    def action_waits(self) -> None:
        """The latest stall stacks of every rank and the job's cause (`pitstop stacks`' text)."""
        if isinstance(self.screen, StacksScreen):
            return
        from pitstop.analysis import stacks_text

        lines = stacks_text(self.job, live=self.live).splitlines()
        self.push_screen(StacksScreen("Where each rank waits (the stacks of its latest stall)", lines))

    def action_screenshot_svg(self) -> None:
        """Save the screen as SVG in the current directory (or `screenshot_dir`) and say where."""
        directory = self.screenshot_dir or Path.cwd()
        name = time.strftime("pitstop-%Y%m%d-%H%M%S", time.localtime())
        path = directory / f"{name}.svg"
        n = 1
        while path.exists():  # never overwrite one taken in the same second
            n += 1
            path = directory / f"{name}-{n}.svg"
        try:
            saved = self.save_screenshot(filename=path.name, path=str(directory))
        except OSError as err:
            self.notify(f"screenshot not saved: {err.strerror or err} ({directory})", severity="error", timeout=10)
            return
        self.notify(f"screenshot saved: {saved}", title="screenshot", timeout=10)

    def action_next_rank(self) -> None:
        count = len(self.job.runs)
        if count <= 1:
            self.notify("one process in this job: no other rank to show")
            return
        self.rank_index = (self.rank_index + 1) % count
        _, run = self.current_run()
        if self.timeline is not None and run is not None:
            # A large job's ranks hold a share of the windows: the rank shown reads its own back.
            stream = next(name for name, r in self.job.runs.items() if r is run)
            try:
                self.job = self.timeline.focus(stream)
            except PitstopError as err:  # the record could not be read again: the rank keeps its share
                self.notify(f"replay: {err}", title="pitstop", severity="error", timeout=12)
        self.refresh_views()

    # -- which actions the footer shows ------------------------------------
    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in self._REPLAY_ACTIONS:
            return not self.live  # hidden from the footer in a live run
        if action in self._LIVE_ACTIONS:
            return self.live
        if action == "waits":
            return self._waits_shown
        return True
