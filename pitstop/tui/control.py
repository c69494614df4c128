"""Provides RunControl: PitstopApp's actions on the training run it shows (profile, stacks, stop, tune, leave).

A mixin of the app (its keys p, k, t, d, q and the Data screen's s), kept apart
from reading and drawing: each action asks the source or the user, and says
what came of it in a notification.
"""

from __future__ import annotations

import socket
from functools import partial
from typing import TYPE_CHECKING

from pitstop.analysis import JobState, RunState, end_reason_text
from pitstop.analysis.command import tune_line
from pitstop.tui.screens import ConfirmScreen
from pitstop.tui.screens.stacks import StacksScreen
from pitstop.tui.tunelaunch import TuneRequest

if TYPE_CHECKING:
    import threading

    from textual.app import App
    from textual.worker import Worker

    from pitstop.streams import Replies

    _AppBase = App[str]
else:
    _AppBase = object

# Data screen `s`: seconds of py-spy sampling (~500 samples a process at its 100 Hz).
STACKS_S = 5.0


class RunControl(_AppBase):
    """The live run's actions; in a replay each says there is no process to act on."""

    # Set by PitstopApp.__init__.
    live: bool
    can_tune: bool
    tune_request: TuneRequest | None
    exit_reason: str
    detach_hint: str | None
    stop: threading.Event | None
    job: JobState

    if TYPE_CHECKING:
        def current_run(self) -> tuple[str, RunState | None]: ...

        def send_command(self, name: str) -> Worker[Replies]: ...

    def action_profile(self) -> None:
        if not self.live:
            self.notify("replay: cannot profile a recorded run", severity="warning")
            return
        self.send_command("profile")

    def action_sample_stacks(self) -> None:
        """Data screen `s`: the training loader's workers (or the main process) sampled with py-spy."""
        if not self.live:
            self.notify("replay: there is no process to sample", severity="warning")
            return
        _, run = self.current_run()
        hello = run.hello if run is not None else None
        if run is None or hello is None:
            self.notify("stacks: no training process seen yet", severity="warning")
            return
        if hello.host != socket.gethostname():
            self.notify(f"stacks: the run is on {hello.host}: run `pitstop profile --data {hello.pid}` there",
                        severity="warning", timeout=10)
            return
        loader = run.training_loader()
        sample = run.samples[-1] if run.samples else None
        workers = [p.pid for p in sample.procs if p.role == "worker"
                   and (loader is None or p.loader in (None, loader.id))] if sample is not None else []
        self.notify(f"stacks: sampling the loader of pid {hello.pid} for {STACKS_S:g} s (py-spy, never pausing it)",
                    timeout=STACKS_S + 2)
        self.run_worker(partial(self._sample_stacks, hello.pid, workers), name="stacks", group="stacks",
                        thread=True, exclusive=True, exit_on_error=False)

    def _sample_stacks(self, pid: int, workers: list[int]) -> None:
        from pitstop.profiling import stacks

        pids, role = stacks.loader_pids(pid, workers)
        lines = stacks.format_profile(stacks.sample(pids, STACKS_S, role=role))
        self.call_from_thread(self.push_screen, StacksScreen(f"Where the {role}'s time goes (py-spy)", lines))

    def action_stop_training(self) -> None:
        if not self.live:
            self.notify("replay: there is no training to stop", severity="warning")
            return

        def answered(yes: bool | None) -> None:
            if yes:
                self.send_command("stop")
            else:
                self.notify("not stopped: training continues")

        self.push_screen(ConfirmScreen("Stop training? The script gets a signal and ends."), answered)

    def action_tune(self) -> None:
        _, run = self.current_run()
        hello = run.hello if run is not None else None
        script = hello.script if hello is not None and hello.script else "SCRIPT"
        if not self.live:
            # Trials re-run the script: a record holds its events, not a script known to still match.
            self.notify(f"replay: a recording cannot be tuned; run: {tune_line(hello)}",
                        severity="warning", timeout=12)
            return
        if hello is None or not self.can_tune:
            self.notify(f"run: {tune_line(hello)}", title="tune this script", timeout=12)
            return
        request = TuneRequest(script, tuple(hello.argv), hello.cwd, len(self.job.runs))

        def answered(yes: bool | None) -> None:
            if yes:
                self.tune_request = request
                self.exit_reason = "tune"
                self.exit("tune")
            else:
                self.notify("not tuning")

        self.push_screen(ConfirmScreen(
            f"Tune {script}? Trials re-run it in fresh processes for a few steps each; while this run "
            "trains they compete with it for the machine.", yes="Tune", no="Cancel", danger=False), answered)

    def action_detach(self) -> None:
        self.exit_reason = "detach"
        self.exit("detach")

    def action_quit_viewer(self) -> None:
        self.exit_reason = "quit"
        self.exit("quit")

    def _stop_when_asked(self) -> None:
        if self.stop is not None and self.stop.is_set():
            self.exit_reason = "stopped"
            self.exit("stopped")

    def goodbye(self) -> str | None:
        """What to print after the viewer closed: how to come back, or how the run ended."""
        if not self.live or self.exit_reason == "stopped":
            return None  # stopped by a signal: pitstop says what it passed on and waits for the end
        _, run = self.current_run()
        if run is not None and run.end is not None:
            code = f" (exit code {run.end.exit_code})" if run.end.exit_code is not None else ""
            return f"training ended: {end_reason_text(run.end.reason)}{code}"
        return self.detach_hint
