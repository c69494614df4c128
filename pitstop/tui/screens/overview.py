"""Provides OverviewScreen: step time, GPU, CPU, memory and the current findings at a glance."""

from __future__ import annotations

import time

from textual.app import ComposeResult
from textual.containers import Horizontal, VerticalScroll

from pitstop.analysis import Finding, JobState, RunState, findings, job_findings
from pitstop.tui import view
from pitstop.tui.screens._base import PitstopScreen
from pitstop.tui.view import Frame
from pitstop.tui.widgets import Chart, Figures, FindingsPanel, FindingView

# The rules walk every retained step (up to 20,000); once a second is enough
# for advice and keeps the viewer under its CPU budget (benchmarks/viewer.py).
FINDINGS_EVERY_S = 1.0


class OverviewScreen(PitstopScreen):
    """Where each step's time goes, how busy the machine is, and what to do about it."""

    TITLE_TEXT = "1 overview"

    def __init__(self) -> None:
        super().__init__()
        self._findings_key: tuple[int, int, int] | None = None
        self._findings_at = 0.0

    def compose_body(self) -> ComposeResult:
        yield Chart(id="step-chart")
        with Horizontal(id="panels"):
            yield Figures("GPU", id="gpu")
            yield Figures("CPU", id="cpu")
            yield Figures("Memory", id="memory")
        with VerticalScroll(id="findings-scroll"):
            yield FindingsPanel(id="findings")

    def show_body(self, frame: Frame) -> None:
        run = frame.run
        if self.charts_due(frame):
            self.query_one("#step-chart", Chart).data = view.step_chart(run)
        self.query_one("#gpu", Figures).rows = view.gpu_rows(run)
        self.query_one("#cpu", Figures).rows = view.cpu_rows(run)
        self.query_one("#memory", Figures).rows = view.memory_rows(run)
        self._show_findings(frame.job, run)

    def _show_findings(self, job: JobState, run: RunState | None) -> None:
        panel = self.query_one(FindingsPanel)
        if run is None or run.last_step is None:
            panel.findings = None
            return
        key = (id(run), run.version, job.version)
        now = time.monotonic()
        if key == self._findings_key:
            return
        # A new run object (replay moved back, another rank) is shown at once; more events
        # of the same run wait for the next second.
        if self._findings_key is not None and self._findings_key[0] == key[0]:
            if now - self._findings_at < FINDINGS_EVERY_S:
                return
        self._findings_key, self._findings_at = key, now
        panel.findings = tuple(
            FindingView(
                severity=f.severity,
                title=f.title,
                evidence=tuple(f.evidence[:2]),
                gain=f.gain,
                fix=(f.fix.splitlines() or [""])[0],
            )
            for f in self._findings(job, run)
        )

    @staticmethod
    def _findings(job: JobState, run: RunState) -> list[Finding]:
        """The job's findings first (a straggler or a dead rank holds every rank back), then the run's."""
        job_level = job_findings(job) if len(job.runs) > 1 else []
        return [*job_level, *findings(run)]
