"""Provides one `pitstop run` (or `pitstop demo`): its session, its launch, its event source, its front, its end summary.

The CLI parses the command line into a `RunRequest`; a `Run` prepares the
session (the tuned config announced before the script starts, the socket
directory checked, the trace and record directories made), starts the target
with the agent injected, hands the stream to one front (the TUI, or the
headless status lines) and prints the end summary from the record. The way is
one-way, cli -> runflow -> launch -> a front, where it used to climb back into
the CLI five times.

`TuneLaunch` is the one `t` callback every viewer gets: the script tuned in the
Trials view, from `pitstop run` (the target it started) and from
`pitstop attach` (the target rebuilt from the process's own argv).
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pitstop import keeper
from pitstop.errors import PitstopError, TransportError, UsageError, reason_of
from pitstop.profiling._oom import oom_kills, oom_note
from pitstop.profiling.launch import (
    SessionSettings,
    Target,
    describe_config,
    exit_code_of,
    launch,
    new_session_id,
    prepare_record,
    typed_env,
)
from pitstop.profiling.jobenv import multi_node
from pitstop.profiling.record import is_record_name, record_stem
from pitstop.profiling.signals import STOPPING, Forwarder, forwarding, reaping, signal_names
from pitstop.recorded import load_runs

if TYPE_CHECKING:
    from pitstop.profiling._silence import SilenceWatch
    from pitstop.profiling.sources import EventSource
    from pitstop.tui.tunelaunch import TuneRequest

# A run's profiler windows unless --profile says otherwise: 5 steps every 500, the first at step 50.
DEFAULT_PROFILE: dict[str, int | None] = {"every": 500, "active": 5, "first": 50}
# A failed run under the TUI: this many lines of its output are shown after the screen closes.
OUTPUT_TAIL_LINES = 15


@dataclass(frozen=True)
class RunRequest:
    """What `pitstop run` or `pitstop demo` was asked, its options already checked for form by the CLI."""

    target: Target
    headless: bool = False
    config: str | None = None  # a tuned config file to apply
    record: str | None = None  # --record: a .jsonl file or a directory (default: a new session directory)
    profile: dict[str, int | None] | None = field(default_factory=lambda: dict(DEFAULT_PROFILE))
    trace_dir: str | None = None
    prometheus: tuple[str, int] | None = None  # (host, port): 127.0.0.1 unless asked wider
    prometheus_front: tuple[str, int] | None = None  # --prometheus-front: pitstop run's own endpoint
    listen: str | None = None  # "HOST:PORT" for TCP viewers
    token_file: str | None = None
    mode: str = "run"
    plot: bool = False  # --plot: text charts after the end summary
    color: bool = True  # False with --no-color; never colour when stdout is not a terminal
    stall_after: float | None = None  # --stall-after SECONDS: no progress for this long is a stall


class Child(Protocol):
    """The started training command, as a run uses it (a `subprocess.Popen`)."""

    pid: int
    returncode: int | None

    def poll(self) -> int | None: ...


class Follower(Protocol):
    """The headless front while the command runs: status lines until it exits."""

    def start(self) -> None: ...

    def wait(self) -> int: ...


def _live_status(session: str, label: str, proc: Any, watch: SilenceWatch | None = None) -> Follower:
    from pitstop.headless import LiveStatus

    return LiveStatus(session, label, proc, watch=watch)


def _socket_source(label: str, session: str, until: Callable[[], bool], watch: SilenceWatch | None = None
                   ) -> EventSource:
    from pitstop.profiling.sources import SocketSource

    return SocketSource(label, session=session, until=until, watch=watch)


def _viewer(source: EventSource, **options: Any) -> int:
    from pitstop.tui import run_viewer

    return run_viewer(source, **options)


def _summary_text(runs: list[Any], notes: list[str], pid: int, exit_code: int) -> str:
    from pitstop.headless import still_running, summary_text

    return summary_text(runs, notes, pid=pid, exit_code=exit_code, alive=still_running(runs))


def _job_plot(runs: list[Any], width: int, color: bool) -> str:
    from pitstop.charts import job_plot

    return job_plot(runs, width, color)


@dataclass(frozen=True)
class Fronts:
    """Where a run's stream goes: each a function, so tests give fakes (the TUI is given its source, as memray's is)."""

    # headless: (session, label, process, silence watch)
    status: Callable[[str, str, Any, SilenceWatch | None], Follower] = _live_status
    # the TUI's: (label, session, until, silence watch)
    source: Callable[[str, str, Callable[[], bool], SilenceWatch | None], EventSource] = _socket_source
    viewer: Callable[..., int] = _viewer  # the TUI: run_viewer(source, log_path=, detach_hint=, tune=)
    summary: Callable[[list[Any], list[str], int, int], str] = _summary_text  # (runs, notes, pid, exit code)
    plot: Callable[[list[Any], int, bool], str] = _job_plot  # --plot: (runs, width, colour) -> text charts


def record_end(runs: list[Any], pid: int, code: int) -> None:
    """The process pitstop started died of a signal (a SIGTERM from a scheduler, a SIGKILL) before its
    agent could write its `End`: the record gets the one pitstop saw, said on screen, so that a later
    `pitstop view` says how it ended, not "still running (or the stream was cut)"."""
    if not 128 < code < 128 + 65:
        return
    from pitstop.events import End
    from pitstop.profiling.record import append_end

    for run in runs:
        hello = run.hello
        # An End read as "terminated" was not written: the reader took it from the SIGTERM trace
        # (`_lastsignal`; a main process never writes one). The launcher, which saw the exit, writes its own.
        ended = run.end is not None and run.end.reason != "terminated"
        if ended or hello is None or hello.pid != pid or not hello.record:
            continue
        end = End(t=time.time(), steps=run.total_steps, dropped=0, reason="signal", exit_code=code)
        try:
            written = append_end(Path(hello.record), end)
        except OSError as err:
            print(f"pitstop: the end of pid {pid} not recorded: {reason_of(err)}", file=sys.stderr)
            continue
        if written:
            run.add(end)
            print(f"pitstop: pid {pid} was killed before it could record its end ({code}); pitstop recorded it "
                  f"in {hello.record}", file=sys.stderr)
        else:
            print(f"pitstop: the end of pid {pid} not recorded: {hello.record} ends in a cut write", file=sys.stderr)


def record_front(runs: list[Any], watch: SilenceWatch | None) -> None:
    """The stalls this front read from outside while a process's agent was silent (`_silence.py`), appended
    to that process's record now that it is gone, so that `pitstop view` and `pitstop stacks RECORD` show them."""
    if watch is None:
        return
    from pitstop.profiling.record import append_events
    from pitstop.profiling.waits import proc_state

    for run in runs:
        hello = run.hello
        if hello is None or not hello.record:
            continue
        made = watch.events_of(hello.pid)
        if not made:
            continue
        if proc_state(hello.pid)[0] not in (None, "Z"):
            print(f"pitstop: the stall read from outside of pid {hello.pid} not recorded: it still runs",
                  file=sys.stderr)
            continue
        try:
            written = append_events(Path(hello.record), list(made))
        except OSError as err:
            print(f"pitstop: the stall of pid {hello.pid} not recorded: {reason_of(err)}", file=sys.stderr)
            continue
        if not written:
            print(f"pitstop: the stall of pid {hello.pid} not recorded: {hello.record} ends in a cut write",
                  file=sys.stderr)
            continue
        for event in made:
            run.add(event)


def record_outside_stop(runs: list[Any], received: list[int], received_t: list[float]) -> None:
    """pitstop got a stopping signal (Ctrl-C, a scheduler's SIGTERM) and passed it on: each process's record
    gets a `front` note saying so (`_ended.STOPPED_FROM_OUTSIDE`), so that the ranks a launcher then ended
    read as stopped with the job, here and in a later `pitstop view`, not as ranks that failed."""
    from pitstop.analysis._ended import STOPPED_FROM_OUTSIDE
    from pitstop.events import Note
    from pitstop.profiling.record import append_events

    stopping = [(s, t) for s, t in zip(received, received_t) if s in STOPPING]
    if not stopping or len(runs) < 2:  # (one process's own end says how it ended: no rank to tell apart)
        return
    said = f"{STOPPED_FROM_OUTSIDE}: {signal_names([s for s, _ in stopping])} came to pitstop and reached the training"
    # Dated when the first stopping signal came: a rank that had died before it (an OOM kill) stays gone.
    note = Note(t=stopping[0][1], level="info", source="front", message=said)
    for run in runs:
        hello = run.hello
        if hello is None or not hello.record:
            continue
        try:
            if append_events(Path(hello.record), [note]):
                run.add(note)
        except OSError:  # (BlockingIOError: its writer holds the lock, still running) the record stays as it was
            continue


def forwarded_note(runs: list[Any], sent: list[int]) -> str | None:
    """What pitstop, the launcher, passed on, beside the processes that then ended without any end recorded:
    a script whose own SIGTERM handler did not finish (a rank blocked in a collective runs no Python handler)
    reads as "stream ended without an End event", and only pitstop knows a SIGTERM came first."""
    if not sent:
        return None
    cut = [run for run in runs if run.end is None and run.hello is not None]
    if not cut:
        return None
    pids = ", ".join(f"pid {run.hello.pid}" for run in cut)
    return (f"note: pitstop passed on {signal_names(sent)} to the training; {pids} then ended without recording "
            "an end (its own handler did not finish, or a SIGKILL followed)")


def tune_in_view(options: Sequence[str], target: Target) -> int:
    """`pitstop tune` in the Trials view: the tuner runs as a child (its own signal
    handlers and main thread); the viewer reads its journal and output."""
    from pitstop.tui.trials import run_trials_viewer
    from pitstop.tui.tunelaunch import start_tuner

    # A signal to this viewer goes to the tuner's group: the tuner stops its trial, puts the
    # user's files back and keeps its journal, as on `q`; the view shows it end.
    with forwarding() as signals:
        child = start_tuner(list(options), target)
        signals.attach(child.proc)
        return run_trials_viewer(child.proc, child.journal, child.log_path, child.out,
                                 stale=child.stale, resume_command=child.resume_command)


def target_of(request: TuneRequest) -> Target:
    """The script a viewer's `t` asks to tune, rebuilt from the process's own argv (Hello.argv)."""
    from pitstop.tui.tunelaunch import target_from_argv

    if request.ranks > 1:
        raise UsageError("a distributed job's launcher cannot be rebuilt from one rank: tune it with "
                         "pitstop tune -- torchrun --nproc_per_node N SCRIPT ...")
    target = target_from_argv(request.argv, request.cwd)
    target.check()
    return target


@dataclass
class TuneLaunch:
    """`t` in a viewer: the tuner's default options on `target` (or on the script the request
    names, when the viewer did not start it), in the Trials view; remembers the tune's exit code."""

    target: Target | None = None
    start: Callable[[Sequence[str], Target], int] = tune_in_view
    outcome: int | None = None

    def __call__(self, request: TuneRequest) -> int:
        target = self.target if self.target is not None else target_of(request)
        self.outcome = self.start([], target)
        return self.outcome


def _on_a_terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


def _say_prometheus(metrics: tuple[str, int] | None) -> None:
    """--prometheus [HOST:]PORT, said on stderr before the script starts: where, and who can reach it."""
    if metrics is None:
        return
    from pitstop.profiling.prometheus import LOOPBACK, endpoint_url

    host, port = metrics
    reach = (f"this machine only; --prometheus 0.0.0.0:{port} to listen wider" if host == LOOPBACK
             else "unauthenticated: anyone who can reach this address can read it")
    print(f"pitstop: Prometheus metrics on {endpoint_url(host, port)} (+LOCAL_RANK for each rank; {reach})",
          file=sys.stderr, flush=True)


def _live_viewers() -> bool:
    """Find this user's socket directory before the script starts; say on stderr when it is not the usual one.

    The agent would otherwise switch its socket off with a note inside the
    record only, and the user learns nothing until `attach` fails.
    """
    from pitstop.profiling.rundir import resolve_runtime_dir

    try:
        where = resolve_runtime_dir()
    except TransportError as err:
        print(f"pitstop: warning: live viewers off: {err}", file=sys.stderr, flush=True)
        return False
    if where.warning:
        print(f"pitstop: warning: {where.warning}", file=sys.stderr, flush=True)
    return True


class Run:
    """One training command under pitstop, from its settings to its end summary.

    Construct, then `prepare()` (files and messages, nothing started) and
    `execute()` (the launch, the front, the summary); `execute()` prepares
    first if that was not done. Returns the exit code the command ends with:
    the script's own, or the tune's when the user chose to tune from the viewer.
    """

    def __init__(
        self,
        request: RunRequest,
        *,
        fronts: Fronts | None = None,
        launcher: Callable[..., Child] = launch,
        on_a_terminal: Callable[[], bool] = _on_a_terminal,
        tune: TuneLaunch | None = None,
    ) -> None:
        self.request = request
        self.settings: SessionSettings | None = None
        self.fronts = fronts or Fronts()
        self._launch = launcher
        self._on_a_terminal = on_a_terminal
        self.tune = tune or TuneLaunch(request.target)  # the target is known: no rebuilding from argv
        self._signals = Forwarder()  # installed by execute()
        self._oom_before: int | None = None  # the memory cgroup's OOM kills when the training started
        self._stopped = threading.Event()  # a stopping signal came: the viewer closes
        # Reads a process from outside when its agent goes silent (a thread holds the GIL): made in execute().
        self.silence: SilenceWatch | None = None
        self._front_metrics: Any = None  # --prometheus-front's server (a daemon thread of this process)

    def prepare(self) -> SessionSettings:
        """The session's settings; the tuned config is announced here, before anything starts."""
        request = self.request
        config = None
        if request.config:
            from pitstop.config import fit_to_cpus, load_config, usable_cpus

            fitted, cuts = fit_to_cpus(load_config(request.config), usable_cpus())
            for why in cuts:
                print(f"pitstop: {request.config}: {why}", file=sys.stderr, flush=True)
            config = fitted.to_dict()
            # Said before the script starts: a script that logs its own dtype would
            # otherwise contradict a bf16 applied behind its back.
            print(f"pitstop: applying {request.config}: {describe_config(config)}", file=sys.stderr, flush=True)
        session = new_session_id(request.target.stem)
        live = _live_viewers()
        token_file = None
        if request.listen:
            from pitstop.profiling.transport import parse_hostport, runtime_dir, write_token

            parse_hostport(request.listen)
            token_path = (Path(request.token_file).expanduser().resolve() if request.token_file
                          else runtime_dir() / "tcp-token")
            write_token(token_path)
            token_file = str(token_path)
            print(f"pitstop: serving viewers on {request.listen} (+LOCAL_RANK); token in {token_file}",
                  file=sys.stderr)
        _say_prometheus(request.prometheus)
        trace_dir = None
        if request.trace_dir:
            trace = Path(request.trace_dir).expanduser().resolve()
            try:
                trace.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise UsageError(f"cannot create --trace-dir {trace}: {err.strerror}") from err
            trace_dir = str(trace)
        self.settings = SessionSettings(
            session=session,
            record=prepare_record(request.record, session, shared=multi_node(os.environ, request.target.command())),
            script=request.target.label,
            mode=request.mode,
            config=config,
            profile=request.profile,
            trace_dir=trace_dir,
            prometheus=None if request.prometheus is None else request.prometheus[1],
            prometheus_host=None if request.prometheus is None else request.prometheus[0],
            listen=request.listen,
            token_file=token_file,
            socket=live,
            command=request.target.words(),
            command_cwd=os.getcwd(),
            command_env=typed_env(),
            config_path=request.config,
            stall_after=request.stall_after,
        )
        return self.settings

    def uses_tui(self) -> bool:
        """The TUI when asked for and on a terminal; never without a socket (status lines then come from the record)."""
        if self.settings is not None and not self.settings.socket:
            return False
        return not self.request.headless and self._on_a_terminal()

    def execute(self) -> int:
        # From here on a SIGTERM, SIGINT, SIGQUIT, SIGUSR1 or SIGUSR2 reaches the training (one
        # that comes before it starts, once it does); pitstop waits for it and takes its exit code.
        with forwarding(lambda signum: self._stopped.set()) as self._signals:
            settings = self.settings or self.prepare()
            from pitstop.profiling._silence import SilenceWatch

            self.silence = SilenceWatch(settings.stall_after)
            if self.request.prometheus_front is not None:
                from pitstop.profiling._frontmetrics import say_front_metrics

                self._front_metrics = say_front_metrics(self.silence, self.request.prometheus_front,
                                                        lambda text: print(text, file=sys.stderr, flush=True))
            return self._live(settings) if self.uses_tui() else self._headless(settings)

    def output_log(self) -> Path:
        """Where the command's output goes under the TUI: beside its record."""
        assert self.settings is not None
        record = Path(self.settings.record)
        if is_record_name(record):
            return record.parent / f"{record_stem(record)}.output.log"
        return record / "output.log"

    def _summary(self, pid: int, code: int) -> tuple[str, list[Any]] | None:
        """The end summary from the record and the runs read for it, or None after saying why there is none."""
        assert self.settings is not None
        try:
            runs, notes = load_runs(Path(self.settings.record))
            # A directory the nodes of a job share also holds the other nodes' records, some still
            # being written: this front sums up its own node's processes (its session).
            runs = [r for r in runs if r.hello is None or r.hello.session == self.settings.session] or runs
            record_front(runs, self.silence)
            record_end(runs, pid, code)
            record_outside_stop(runs, self._signals.received, self._signals.received_t)
            said = forwarded_note(runs, self._signals.sent)
            oom = oom_note(self._oom_before, oom_kills())
            notes.extend(n for n in (said, oom) if n)
            return self.fronts.summary(runs, notes, pid, code), runs
        except PitstopError as err:
            print(f"pitstop: no summary: {err}", file=sys.stderr)
            return None

    def _plot(self, runs: list[Any]) -> None:
        """--plot: the text charts of the runs, after the summary, on stdout.

        On stdout, as `view --summary --plot` prints them, where `> run.log` keeps
        them: the script's own output has ended by then, so nothing interleaves.
        Plain ASCII when stdout is not a terminal (a CI log shows escape codes as
        garbage) or with --no-color. Charts that fail to draw are said, and the
        exit code stays the script's.
        """
        if not self.request.plot:
            return
        color = self.request.color and sys.stdout.isatty()
        try:
            text = self.fronts.plot(runs, shutil.get_terminal_size().columns, color)
        except Exception as err:  # noqa: BLE001 - said; the run's outcome is the script's
            print(f"pitstop: no charts: {reason_of(err)}", file=sys.stderr, flush=True)
            return
        sys.stderr.flush()  # the summary first, where both streams share a terminal
        print(text, flush=True)

    def _headless(self, settings: SessionSettings) -> int:
        target = self.request.target
        print(f"pitstop: running {target.describe()} (record: {settings.record})", file=sys.stderr, flush=True)
        # Signals from here on reach the training (pitstop waits for it and takes its exit
        # code), also those that come while it starts.
        own: list[int] = []
        with reaping(lambda: own):
            self._oom_before = oom_kills()
            proc = self._launch(target, settings)
            own.append(proc.pid)
            self._signals.attach(proc)
            index_keeper = keeper.Later(settings.record, proc.pid)  # once it has run one interval
            status = self.fronts.status(settings.session, target.label, proc, self.silence)
            status.start()
            code = exit_code_of(status.wait())
        index_keeper.stop()  # the summary indexes what it left
        ending = self._summary(proc.pid, code)
        if ending is None:
            return code
        summary, runs = ending
        print("\n" + summary, file=sys.stderr)
        self._plot(runs)
        print(f"pitstop: record: {settings.record}", file=sys.stderr)
        if code != 0:
            print(f"pitstop: {target.label} exited with code {code}", file=sys.stderr)
        return code

    def _live(self, settings: SessionSettings) -> int:
        target = self.request.target
        log_path = self.output_log()
        # Its own session, output to a file: closing the terminal or quitting the
        # viewer leaves training running. A SIGTERM, SIGINT or SIGQUIT sent to pitstop
        # goes to the training's process group and closes the viewer (the terminal is
        # restored); pitstop then waits for the training and ends with its exit code.
        own: list[int] = []
        with reaping(lambda: own):
            with open(log_path, "ab") as log:
                self._oom_before = oom_kills()
                proc = self._launch(target, settings, new_session=True, stdin=None, stdout=log, stderr=log)
            own.append(proc.pid)
            self._signals.attach(proc)
            index_keeper = keeper.Later(settings.record, proc.pid)  # outlives a viewer that quit (`now`)
            source = self.fronts.source(f"{target.label} (pid {proc.pid})", settings.session,
                                        lambda: proc.poll() is not None, self.silence)
            hint = f"training continues (pid {proc.pid}); reattach with: pitstop attach {proc.pid}; output: {log_path}"
            self.fronts.viewer(source, log_path=log_path, detach_hint=hint, tune=self.tune, stop=self._stopped)
            source.close()
            if self.tune.outcome is not None:
                index_keeper.now()  # this front ends here: the keeper takes the record from it
                return self.tune.outcome  # the user chose to tune: the tune's outcome is this command's
            if self._stopped.is_set():
                print(f"pitstop: {signal_names(self._signals.received)} passed on to {target.label} (pid {proc.pid}); "
                      "waiting for it to end", file=sys.stderr, flush=True)
                proc.wait()
            if proc.poll() is None:
                index_keeper.now()
                return 0  # training continues: its keeper stays with it
        index_keeper.stop()  # the summary indexes what it left
        assert proc.returncode is not None
        code = exit_code_of(proc.returncode)
        ending = self._summary(proc.pid, code)
        if ending is not None:
            print(ending[0], file=sys.stderr)
            self._plot(ending[1])
        if code != 0:
            tail = log_path.read_text(errors="replace").splitlines()[-OUTPUT_TAIL_LINES:]
            print("\n".join(tail), file=sys.stderr)
            print(f"pitstop: {target.label} exited with code {code} (full output: {log_path})", file=sys.stderr)
        return code


__all__ = ["DEFAULT_PROFILE", "Fronts", "Run", "RunRequest", "TuneLaunch", "target_of", "tune_in_view"]
