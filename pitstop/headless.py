"""Provides the headless front: status lines while training runs, a summary at the end.

Used by `pitstop run --headless` (and whenever stdout is not a terminal) and by
`pitstop view RECORD --summary`. It reads the same stream, through the same
`analysis` functions, as the TUI. The script's own output is never touched:
pitstop writes only to stderr.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Collection
from typing import TextIO

from pitstop.analysis import (
    Advice,
    JobState,
    JobSummary,
    Nodes,
    RankRow,
    RunState,
    StreamBatch,
    advise,
    first_step_progress,
    first_step_status,
    format_summary,
    job_advice,
    job_cause,
    job_stall_finding,
    job_summary,
    headline,
    node_lines,
    nodes,
    note_text,
    partial_line,
    status_line,
    stall_block,
    stall_open,
    stall_title,
    stall_word,
    stream_label,
    summarize,
)
from pitstop.analysis import format as fmt
from pitstop.errors import reason_of
from pitstop.events import Note
from pitstop.profiling.launch import exit_code_of  # re-exported: moved below the fronts
from pitstop.profiling._silence import SilenceWatch
from pitstop.profiling.sources import SocketSource
from pitstop.recorded import JOB_FULL_RANKS, annotate, children_of, job_lines, load_runs, primary, sessions  # load_runs re-exported, as exit_code_of

STATUS_INTERVAL_S = float(os.environ.get("PITSTOP_STATUS_INTERVAL", "5"))
# A line is printed when it changed (a new step, a rank that ended); an unchanged
# one is repeated once a minute, saying for how long nothing moved, so a hang
# shows without 10 copies of "waiting for the first step".
QUIET_REPEAT_S = 60.0


def _label(run: RunState) -> str:
    hello = run.hello
    if hello is None:
        return "?"
    rank = f" rank {hello.rank}" if hello.rank is not None else ""
    return f"{hello.script or 'run'}{rank} (pid {hello.pid})"


def still_running(runs: list[RunState]) -> set[int]:
    """The pids of these records' processes that still run, here, without an End: a hogwild child left
    training after `kill -TERM` of its parent (as without pitstop) read as "gone (killed, e.g. SIGKILL or
    OOM killer)". A pid taken since by another process (created after the record's Hello) is not it.

    psutil is imported only for a record without its End: a run that ended cleanly (nearly every
    run) saved the front ~25 ms of CPU of psutil's import."""
    import socket

    if all(run.hello is None or run.end is not None for run in runs):
        return set()
    import psutil

    host = socket.gethostname()
    alive = set()
    for run in runs:
        hello = run.hello
        if hello is None or run.end is not None or hello.host != host:
            continue
        try:
            proc = psutil.Process(hello.pid)
            if proc.create_time() <= hello.started + 1.0 and proc.status() != psutil.STATUS_ZOMBIE:
                alive.add(hello.pid)
        except (psutil.Error, OSError):
            continue
    return alive


def summary_text(
    runs: list[RunState], notes: list[str] | None = None, pid: int | None = None, exit_code: int | None = None,
    alive: Collection[int] = (),
) -> str:
    """The end-of-run summary for one or several processes; several get a job block first.

    Records of different runs (different `hello.session`) are never taken for
    ranks of one job: each run gets its own summary, after a line saying so.
    `pid` and `exit_code`: the process the front started and how it ended,
    which wins over what that process's record says.
    Called once the run ended (or on records): a rank whose stream has no End
    event is reported as gone, unless its pid is in `alive` (`still_running`).
    """
    groups = sessions(runs)
    blocks = []
    if len(groups) > 1:
        names = ", ".join(session or "unknown" for session, _ in groups)
        blocks.append(f"pitstop: these records belong to {len(groups)} different runs ({names}); "
                      "each is summarized on its own")
    for session, members in groups:
        if len(groups) > 1:
            script = next((r.hello.script for r in members if r.hello is not None and r.hello.script), "run")
            blocks.append(f"== run {session or 'unknown'}: {script}, {len(members)} process(es) ==")
        view = nodes(members)
        partial = partial_line(view, sum(1 for r in members if r.rank is not None), _record_of(members))
        if partial is not None and len(members) == 1:
            blocks.append(partial)
        if len(members) > 1:
            job = JobState.of_runs(members, closed=True)
            for stream, member in job.runs.items():
                if member.pid is not None and member.pid in alive:
                    job.closed.discard(stream)  # still running: not gone
                if pid is not None and exit_code is not None and member.pid == pid:
                    job.exits[stream] = exit_code
            try:
                figures = job_summary(job)
            except Exception as err:  # noqa: BLE001 - said; each rank's own summary follows
                blocks.append(f"pitstop: job summary failed: {reason_of(err)}")
            else:
                stuck = job_stall_finding(job.ranks())
                advice = job_advice(job, summary=figures)
                if stuck is not None:
                    advice = Advice((stuck,)) + advice
                view = nodes(members, figures)
                extra = job_lines(members) + node_lines(view, _jrow)
                blocks.append(job_text(figures, advice, extra, view))
                if partial is not None:
                    blocks.append(partial)
        own = members
        if len(members) > JOB_FULL_RANKS:
            # A job of 64 ranks read as 64 summaries of 30 lines each did not read as one job; its
            # ranks' rows and stragglers are in the block above, one rank's own summary on demand.
            own = [primary(members)]
            blocks.append(_own_summaries_line(own[0], members))
        for run in own:
            summary = summarize(run)
            title = f"pitstop summary: {_label(run)}"
            code = exit_code if pid is not None and run.pid == pid else None
            advice = advise(run)
            text = format_summary(summary, advice.findings, title=title, exit_code=code, failures=advice.failures)
            stall = stall_block(run)
            if stall:
                text += "\n\n" + "\n".join(stall)
            blocks.append(annotate(text, run, members))
    if notes:
        blocks.append("\n".join(notes))
    return "\n\n".join(blocks)


def _record_of(members: list[RunState]) -> str | None:
    """Where these processes recorded: their directory (`rank{r}.jsonl.gz` files), else rank 0's file."""
    from pathlib import Path

    paths = [Path(r.hello.record) for r in members if r.hello is not None and r.hello.record]
    if not paths:
        return None
    parents = {p.parent for p in paths}
    if len(parents) == 1 and all(p.name.startswith("rank") for p in paths):
        return str(paths[0].parent)
    return str(paths[0])


def _own_summaries_line(shown: RunState, members: list[RunState]) -> str:
    """"pitstop: 64 ranks: the summary of train.py rank 0 (pid 10) follows; another rank's: pitstop view ... --summary"."""
    other = next((r.hello.record for r in members if r is not shown and r.hello is not None and r.hello.record), None)
    how = f"pitstop view {other} --summary" if other else "pitstop view RECORD --summary on its record"
    return f"pitstop: {len(members)} ranks: the summary of {_label(shown)} follows; another rank's own: {how}"


def job_text(job: JobSummary, advice: Advice, extra: list[str] | None = None, view: Nodes | None = None) -> str:
    """The job block: ranks, job throughput, stragglers, gone ranks, `extra` rows, one table row per rank.
    `view`: the job's nodes; a job over several gets a node column."""
    title = f"pitstop job summary: {job.script or 'job'}"
    if view is not None and view.job:
        title += f" (job {view.job})"
    elif job.session:
        title += f" (session {job.session})"
    lines = [title, ""]
    ranks = f"{job.ranks} seen"
    if job.world_size is not None:
        ranks += f" of world size {job.world_size}"
    counts = {status: sum(1 for r in job.rows if r.status == status)
              for status in ("running", "finished", "gone", "stopped")}
    ranks += " (" + ", ".join(f"{n} {status}" for status, n in counts.items() if n) + ")"
    lines.append(_jrow("ranks", ranks))
    through = (f"{fmt.rate(job.samples_per_s, 'samples')} (sum over ranks)" if job.samples_per_s is not None
               else "samples/s n/a (a rank did not report its batch size, or no measured step)")
    if job.steps_per_s is not None:
        through += f", {fmt.rate(job.steps_per_s, 'steps')} (slowest rank)"
    lines.append(_jrow("throughput", through))
    if job.stragglers:
        for i, s in enumerate(job.stragglers):
            lines.append(_jrow("straggler" if i == 0 else "", s.text))
    else:
        lines.append(_jrow("straggler", "none (no rank persistently slower than the others)"))
    for i, row in enumerate(job.gone):
        last = f", last step {row.last_step}" if row.last_step is not None else ", no step"
        lines.append(_jrow("gone" if i == 0 else "", f"{row.label} (pid {row.pid}): {row.status_reason}{last}"))
    if job.stopped is not None:  # "stopped from outside: SIGINT came to pitstop and reached the training"
        lines.append(_jrow("stopped", job.stopped.removeprefix("stopped ")))
        for row in job.stopped_ranks:
            last = f", last step {row.last_step}" if row.last_step is not None else ", no step"
            lines.append(_jrow("", f"{row.label} (pid {row.pid}): {row.status_reason}{last}"))
    lines.extend(extra or ())
    lines.append("")
    lines.extend(_rank_table(job.rows, view.node_of if view is not None and view.spans else None))
    # The straggler line rests on recent steps (it says which); the table on all of them: said, so that
    # "the job's 76.8 ms step" beside a p50 of 98.3 ms reads as two spans, not a contradiction.
    lines.append("  (p50s over each rank's measured steps, all but its warm-up)")
    if advice.findings:
        lines.append("")
        lines.append(f"job findings ({len(advice.findings)}):")
        for i, f in enumerate(advice.findings, 1):
            lines.append(f"  {i}. [{f.severity}] {f.title} ({f.rule})")
            lines.extend(f"     {line}" for line in f.evidence[1:2])
            if f.gain:
                lines.append(f"     gain: {f.gain}")
            # The fix as the rank findings give theirs: a straggler's names what built its loader (HF, Lightning).
            fix = f.fix.splitlines()
            if fix:
                lines.append(f"     fix:  {fix[0]}")
                lines.extend(f"           {line}" for line in fix[1:])
    if advice.failures:
        lines.append("")
        lines.extend(f"  {failure.text}" for failure in advice.failures)
    return "\n".join(lines)


def _jrow(label: str, text: str) -> str:
    return f"  {label:<11} {text}"


def _rank_table(rows: tuple[RankRow, ...], node_of: dict[int, str] | None = None) -> list[str]:
    """One row per rank; `node_of` (rank -> node, a job over several nodes) makes the host column the node's."""
    header = ("rank", "pid", "node" if node_of else "host", "status", "steps", "step p50", "data p50", "data", "compute p50",
              "coll/step", "peak mem", "gpu")
    table = [header]
    for r in rows:
        mem = fmt.size(r.peak_mem_allocated) if r.peak_mem_allocated is not None else (
            f"rss {fmt.size(r.peak_rss)}" if r.peak_rss is not None else fmt.NA)
        table.append((
            r.label,
            str(r.pid) if r.pid is not None else "?",
            (node_of.get(r.rank) if node_of and r.rank is not None else None) or r.host or "?",
            r.status,
            str(r.steps),
            fmt.duration(r.step_p50_s),
            fmt.duration(r.data_wait_p50_s),
            fmt.pct(r.data_wait_frac),
            fmt.duration(r.compute_p50_s),
            fmt.duration(r.collective_ms / 1e3 if r.collective_ms is not None else None),
            mem,
            fmt.percent(r.gpu_util_mean),
        ))
    widths = [max(len(row[i]) for row in table) for i in range(len(header))]
    return ["  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in table]


class StatusPrinter:
    """Prints a job's status line at a steady cadence, only when it changed, and the agent's warnings at once."""

    def __init__(self, out: TextIO = sys.stderr, clock: Callable[[], float] = time.monotonic) -> None:
        self._out = out
        self._clock = clock
        self._lock = threading.Lock()  # notes come from the reader thread, lines from the waiting one
        self._key: tuple[tuple[object, ...], ...] | None = None
        self._changed_at = 0.0
        self._printed_at = 0.0
        self._said: set[str] = set()
        self._cause: str | None = None  # the job's stall cause, said when it changes

    def _print(self, text: str) -> None:
        with self._lock:
            print(text, file=self._out, flush=True)

    def failure(self, key: str, text: str) -> None:
        """Say something that failed, on one stderr line, once per `key` (a stream, a part of pitstop)."""
        with self._lock:
            if key in self._said:
                return
            self._said.add(key)
        self._print(f"pitstop: {text}")

    def notes(self, batch: StreamBatch, job: JobState) -> None:
        """Say the agent's warnings and errors now (a metrics port that cannot be bound, a part switched off),
        and a stream that broke (its error was dropped)."""
        if batch.error is not None:
            self.failure(f"stream:{batch.stream}", f"stream from {stream_label(job, batch.stream)} ended: {batch.error}")
        for event in batch.events:
            if isinstance(event, Note) and event.level in ("warn", "error"):
                run = job.runs.get(batch.stream)
                who = f" [{_label(run)}]" if run is not None and run.hello is not None and len(job.runs) > 1 else ""
                self._print(f"pitstop: {note_text(event)}{who}")

    def tick(self, job: JobState) -> None:
        """Print the line if it changed since the last one, or once a minute if it did not."""
        ranks = job.ranks()
        if not ranks:
            return
        key = tuple((label, run.last_step, run.end is not None, _doing(run),
                     run.stall.phase if run.stall is not None else None) for label, run in ranks)
        now = self._clock()
        if len(ranks) == 1:
            line = _status(ranks[0][1])
        else:
            runs = [run for _, run in ranks]
            line = " || ".join(f"{_short(label, run)} {_job_status(run, runs)}" for label, run in ranks)
        if key != self._key:
            self._key, self._changed_at, self._printed_at = key, now, now
            self._print(f"pitstop | {line}")
        elif now - self._printed_at >= QUIET_REPEAT_S:
            self._printed_at = now
            self._print(f"pitstop | {line} | unchanged for {now - self._changed_at:.0f} s")
        cause = job_cause(ranks) if any(stall_open(run) for _, run in ranks) else None
        if cause is not None and cause != self._cause:
            self._print(f"pitstop | {stall_word([run for _, run in ranks])}: {cause}")
        self._cause = cause


def _short(label: str, run: RunState) -> str:
    """"r1" for rank 1; "pid 4242" for a process of no rank (a hogwild child: not rank 1 of a job)."""
    return f"r{run.rank}" if run.rank is not None else label


def _job_status(run: RunState, runs: list[RunState]) -> str:
    """`_status`, but a process that has not stepped while its children train says so (not "still setting up"),
    also once it ended (ignite's Parallel: the parent's last line read "still setting up" after its ranks ended)."""
    if run.last_step is None:
        children = children_of(run, runs)
        if children:
            return f"trains in {len(children)} child processes ({', '.join(str(c.pid) for c in children)})"
    return _status(run)


def _status(run: RunState) -> str:
    """The status line; before the first step, what the process is doing (closures, batches) once its agent said;
    a stuck process's line begins with "STUCK for 1m20s after step 19"."""
    line = first_step_status(run) or status_line(run)
    if not stall_open(run):
        return line
    if run.stall is not None and run.stall.first:  # "WAITING: no first step after 5m00s; the training thread ..."
        return f"{stall_word([run])}: {stall_title(run)} | {line}"
    return f"STUCK{(headline(run) or 'stuck')[len('stuck'):]} | {line}"


def _doing(run: RunState) -> tuple[int, int, int, int, bool, bool, bool, str | None] | None:
    """What moves a first step's line (a new closure, a batch, a gradient, an optimizer step begun, a compile
    begun or ended, a backward or a forward entered); its seconds do not."""
    found = first_step_progress(run)
    if found is None:
        return None
    p = found[0]
    return (p.batches, p.backwards, p.closures, p.grads, p.optimizer_s is not None, p.compiling_s is not None,
            p.backward_s is not None, p.forward)


class LiveStatus:
    """Follows a session's sockets on a thread and prints a status line every few seconds (on change)."""

    def __init__(self, session: str, label: str, proc: subprocess.Popen[bytes], out: TextIO = sys.stderr,
                 watch: SilenceWatch | None = None) -> None:
        self.job = JobState()
        self._lock = threading.Lock()
        self._printer = StatusPrinter(out)
        self._proc = proc
        # One thread blocks in waitpid for the command: Popen.wait(timeout) polls
        # (~20 wake-ups a second), and every wake-up takes a core from training.
        self._exited = threading.Event()
        # Status lines come every few seconds: the source need not look for news 4 times a second.
        self._source = SocketSource(label, session=session, until=self._exited.is_set, poll_s=1.0, watch=watch)
        self._thread = threading.Thread(target=self._follow, name="pitstop-headless", daemon=True)
        self._waiter = threading.Thread(target=self._wait_child, name="pitstop-wait", daemon=True)
        self.error: str | None = None

    def start(self) -> None:
        self._waiter.start()
        self._thread.start()

    def _wait_child(self) -> None:
        self._proc.wait()
        self._exited.set()

    def _follow(self) -> None:
        try:
            for batch in self._source.batches():
                with self._lock:
                    self.job.add(batch)
                    self._printer.notes(batch, self.job)
        except Exception as err:  # noqa: BLE001 - the viewer dies, training goes on
            self.error = reason_of(err)
            self._printer.failure("reader", f"status lines stopped: {self.error}")

    def tick(self) -> None:
        """One status line, if it changed (see StatusPrinter); none once the reader failed.

        The job then stands still while training goes on: a line "unchanged for
        60 s" would be a lie, and the failure was said once already.
        """
        if self.error is not None:
            return
        with self._lock:
            self._printer.tick(self.job)

    def wait(self) -> int:
        """Wait for the training command, printing status lines; returns its exit code."""
        next_t = time.monotonic() + STATUS_INTERVAL_S
        while True:
            try:
                if self._exited.wait(timeout=max(0.05, next_t - time.monotonic())):
                    break
            except KeyboardInterrupt:
                # From a terminal the child got the same SIGINT; a SIGINT sent to
                # pitstop alone is passed on if the child is still running 1 s later.
                try:
                    if not self._exited.wait(timeout=1.0):
                        self._proc.send_signal(signal.SIGINT)
                except KeyboardInterrupt:
                    pass
                continue
            next_t += STATUS_INTERVAL_S
            self.tick()
        self._source.close()
        code = self._proc.returncode
        assert code is not None  # set by _wait_child before _exited
        return code


__all__ = ["LiveStatus", "StatusPrinter", "StreamBatch", "exit_code_of", "load_runs", "sessions", "summary_text"]
