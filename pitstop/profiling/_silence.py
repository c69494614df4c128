"""Provides the front's silence watch: a process whose agent went silent while it lives is read from outside.

A training thread that holds the GIL in native code (a C extension's loop, a
`ctypes.PyDLL` call: measured here, `PyDLL(None).sleep(3600)` stopped the
agent's 1 Hz sampler, its stall watch and its socket at once) lets no other
thread of its process run, so the agent cannot say it is stuck. The front that
reads the agent's stream (`pitstop run`'s status lines or TUI) sees the
silence instead: no event at all (the sampler alone sends one a second) for
longer than the stall threshold (`--stall-after`, else max(60 s, 20x the p95
step), as in the agent; before the first step the agent's first-step wait,
max(5 minutes, `--stall-after`): a dataset's set-up in a C extension that
keeps the GIL), while the process lives on this host and its agent has no
stall of its own open. The front then dumps that
process with `py-spy dump --native` and adds a `Stall` event (`by` "front") to
its stream, as the agent would have: every front shows it, and it is appended
to the process's record when it is taken (the agent's writer and this append
take turns on the file's lock: `record.append_events`), so a front killed
while the job hangs (SIGKILL, a lost SSH session) leaves it recorded; one the
agent's writer kept from the file is tried again at each `check`, and what is
left is appended at the process's end (`runflow.record_front`). Fresh stacks
every UPDATE_S while it lasts; it ends at the stream's next step ("end"), or
when the stream closes while stuck ("exit").

`SilenceDetector` is the decision alone (no clock, no IO); `SilenceWatch`
adds /proc and py-spy.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from pitstop.events import Event, Hello, Stall, Step, ThreadStack
from pitstop.profiling._stallwatch import UPDATE_S, FirstStepWait, StallDetector
from pitstop.streams import StreamBatch

# Never less than 3 sampler periods of silence, whatever --stall-after says: a front on a loaded machine
# reads its sockets once a second, and an agent that sends a sample a second is not silent for one late read.
SILENT_MIN_S = 3.0


@dataclass
class _Stream:
    """What the front knows of one stream: its process, its steps, when it was last heard from."""

    heard_at: float
    detector: StallDetector
    pid: int | None = None
    host: str | None = None
    record: str | None = None  # the process's record file (its Hello's)
    hello: Hello | None = None
    last_step_t: float | None = None  # when its latest step ended (wall clock)
    last_step: int | None = None
    before: int | None = None  # the last step that ended before the front's stall was found (queued ones too)
    agent_open: bool = False  # the agent's own stall is open: it speaks for itself
    ended: bool = False
    since: float | None = None  # the front's stall: when the stream was last heard from, while it lasts
    began_wall: float | None = None  # the same, as wall-clock time (for the events' since_s / lasted_s)
    found_wall: float | None = None  # when the front found it (wall clock): a step ended after it is progress
    first: bool = False  # the front's stall began before the process's first step (a wait for it)
    next_update: float = 0.0
    reading: bool = False  # a dump is under way


@dataclass(frozen=True)
class Row:
    """One live process as the front's metrics show it (`_frontmetrics.py`)."""

    hello: Hello
    heard_at: float  # monotonic
    last_step_t: float | None
    stalled: bool


@dataclass(frozen=True)
class Due:
    """A stream the front must read now: "start" (silent past the threshold) or "update" (still silent)."""

    stream: str
    phase: str
    pid: int
    step: int
    silent_s: float
    threshold_s: float
    first: bool = False  # before the process's first step (`Stall.first`)


class SilenceDetector:
    """Which streams went silent past the threshold, fed every batch heard and asked at each tick."""

    def __init__(self, after_s: float | None = None) -> None:
        self.after_s = after_s
        self.streams: dict[str, _Stream] = {}

    def heard(self, stream: str, events: list[Event], now: float, wall: float) -> Stall | None:
        """A batch from `stream` at `now` (monotonic; `wall`: time.time()); the "end" of the front's stall
        when a step came, else None."""
        if events and all(isinstance(e, Stall) and e.by == "front" for e in events):
            return None  # the front's own batch, yielded by the same source: not a word from the agent
        s = self.streams.get(stream)
        if s is None:
            s = self.streams[stream] = _Stream(heard_at=now, detector=StallDetector(self.after_s))
        if events:
            s.heard_at = now
        stepped = False
        for e in events:
            if isinstance(e, Step):
                s.last_step, s.last_step_t = e.step, e.t
                s.detector.step(e.step, e.wall, e.mark is None)
                if s.found_wall is None or e.t <= s.found_wall:
                    s.before = e.step
                # The steps the agent's writer had queued before the hold come after it, at the process's
                # exit: measured on a 2-rank job, 12 steps of rank 1 sent after its Ctrl-C read as "resumed".
                stepped = stepped or (s.found_wall is not None and e.t > s.found_wall)
            elif isinstance(e, Hello):
                s.pid, s.host, s.record, s.hello = e.pid, e.host, e.record, e
            elif isinstance(e, Stall) and e.by != "front":
                s.agent_open = e.phase in ("start", "update")
            elif getattr(e, "kind", None) == "end":
                s.ended = True
        if stepped and s.since is not None:
            return self._close(s, "end", wall)
        return None

    def closed(self, stream: str, wall: float) -> Stall | None:
        """The stream ended: the "exit" of the front's stall where one was open."""
        s = self.streams.get(stream)
        if s is None:
            return None
        s.ended = True
        return self._close(s, "exit", wall) if s.since is not None else None

    def _close(self, s: _Stream, phase: str, wall: float) -> Stall:
        began = s.began_wall if s.began_wall is not None else wall
        lasted = max(0.0, wall - began)
        s.since = s.began_wall = s.found_wall = None
        step = s.before if s.before is not None else s.last_step
        first, s.first = s.first, False
        return Stall(t=wall, phase=phase, step=step or 0, since_s=lasted, threshold_s=self._threshold(s, first),
                     lasted_s=lasted, by="front", first=first)

    def _threshold(self, s: _Stream, first: bool) -> float:
        """The agent's: its stall threshold after the first step; before it, the first-step wait's."""
        return FirstStepWait(0.0, self.after_s).threshold() if first else s.detector.threshold()

    def due(self, now: float, wall: float, host: str) -> list[Due]:
        """The streams to read now: silent for longer than their threshold (before their first step, the
        first-step wait's: 5 minutes or --stall-after), their process on this host (`host`), not ended, no
        stall of the agent's own open, no read under way."""
        out = []
        for name, s in self.streams.items():
            if s.ended or s.pid is None or s.agent_open or s.reading or s.host != host:
                continue
            silent = now - s.heard_at
            first = s.first if s.since is not None else s.last_step is None
            threshold = max(SILENT_MIN_S, self._threshold(s, first))
            if s.since is None:
                if silent <= threshold:
                    continue
                s.since, s.began_wall, s.found_wall = s.heard_at, wall - silent, wall
                s.first = first
                s.next_update = now + UPDATE_S
                phase = "start"
            elif now >= s.next_update:
                s.next_update = now + UPDATE_S
                phase = "update"
            else:
                continue
            out.append(Due(name, phase, s.pid, s.last_step or 0, silent, threshold, first))
        return out

    def cancel(self, stream: str) -> None:
        """The process was found gone or dead when read: no stall of the front's (its stream will close)."""
        s = self.streams.get(stream)
        if s is not None:
            s.since = s.began_wall = s.found_wall = None


def read_silent(due: Due, dump: Callable[[int, str], list[ThreadStack]] | None = None) -> Stall | None:
    """The front's Stall for a silent process: its training thread read by py-spy (with native frames),
    or None where the process is gone or dead (its stream is about to close)."""
    from pitstop.profiling.waits import proc_state

    state, wchan, _ = proc_state(due.pid)
    if state is None or state == "Z":
        return None
    notes: list[str] = []
    if state in ("T", "t"):
        stacks = [ThreadStack(pid=due.pid, role="main", how="none", state=state,
                              note="the process is stopped (SIGSTOP, or a debugger holds it)")]
    else:
        stacks = (dump or _dump_native)(due.pid, "main")
        missing = [s.note for s in stacks if s.how == "none" and s.note]
        notes = [f"the agent went silent; its stacks were not read from outside: {missing[0]}"] if missing else []
    return Stall(t=time.time(), phase=due.phase, step=due.step, since_s=due.silent_s, threshold_s=due.threshold_s,
                 stacks=stacks, notes=notes, by="front", first=due.first)


def _dump_native(pid: int, role: str) -> list[ThreadStack]:
    from pitstop.profiling.waits import dump

    return dump(pid, role, native=True)


@dataclass
class SilenceWatch:
    """The detector inside a live source: fed its batches, it reads silent processes on threads and hands
    their Stall events back as batches of their streams; appends each to its process's record when made,
    and keeps those it could not append yet, per process, for the end of the run."""

    after_s: float | None = None
    host: str = field(default_factory=socket.gethostname)
    dump: Callable[[int, str], list[ThreadStack]] | None = None
    clock: Callable[[], float] = time.monotonic
    detector: SilenceDetector = field(init=False)
    made: dict[int, list[Stall]] = field(default_factory=dict)  # pid -> the front's events not yet recorded
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _writing: threading.Lock = field(default_factory=threading.Lock)  # one append at a time (reader, threads)

    def __post_init__(self) -> None:
        self.detector = SilenceDetector(self.after_s)

    def heard(self, batch: StreamBatch) -> StreamBatch | None:
        """Each batch the source yields; the front's own batch to yield after it (an "end" or "exit"), if any."""
        with self._lock:
            made = self.detector.heard(batch.stream, batch.events, self.clock(), time.time())
            if batch.closed:
                made = self.detector.closed(batch.stream, time.time()) or made
            out = self._keep(batch.stream, made)
        if out is not None:
            self._record(batch.stream)
        return out

    def check(self, emit: Callable[[StreamBatch], None]) -> None:
        """At each turn of the source's loop: every stream due is read on its own thread, which `emit`s."""
        with self._lock:
            due = self.detector.due(self.clock(), time.time(), self.host)
            for d in due:
                self.detector.streams[d.stream].reading = True
            # Events the record refused (its writer held the lock at that moment): tried again each turn.
            pending = [name for name, s in self.detector.streams.items() if s.pid is not None and self.made.get(s.pid)]
        for d in due:
            threading.Thread(target=self._read, args=(d, emit), name="pitstop-silence", daemon=True).start()
        for name in pending:
            self._record(name)

    def _read(self, due: Due, emit: Callable[[StreamBatch], None]) -> None:
        try:
            stall = read_silent(due, self.dump)
        except Exception as err:  # noqa: BLE001 - said in the event: the front never dies of it
            stall = Stall(t=time.time(), phase=due.phase, step=due.step, since_s=due.silent_s,
                          threshold_s=due.threshold_s, notes=[f"stacks not read: {type(err).__name__}: {err}"],
                          stacks=[ThreadStack(pid=due.pid, role="main", how="none", note=str(err))], by="front",
                          first=due.first)
        with self._lock:
            s = self.detector.streams[due.stream]
            s.reading = False
            if stall is None:
                self.detector.cancel(due.stream)
                return
            if s.since is None:  # it spoke (a step) or closed while py-spy read it: the stall is over
                return
            batch = self._keep(due.stream, stall)
        if batch is not None:
            self._record(due.stream)
            emit(batch)

    def _keep(self, stream: str, stall: Stall | None) -> StreamBatch | None:
        if stall is None:
            return None
        pid = self.detector.streams[stream].pid
        if pid is not None:
            self.made.setdefault(pid, []).append(stall)
        return StreamBatch(stream, [stall])

    def _record(self, stream: str) -> None:
        """Append the stream's events not yet recorded to its process's record now; those the file refused
        (the agent's writer holds its lock, a cut write) wait for the next event or the run's end."""
        from pitstop.profiling.record import append_events

        with self._writing:
            with self._lock:
                s = self.detector.streams.get(stream)
                if s is None or s.pid is None or not s.record:
                    return
                pid, record, pending = s.pid, s.record, list(self.made.get(s.pid, []))
            if not pending:
                return
            try:
                written = append_events(Path(record), pending)
            except OSError:  # BlockingIOError (the writer's lock), or a record gone: the run's end says it
                return
            if written:
                with self._lock:
                    left = self.made.get(pid, [])
                    self.made[pid] = left[len(pending):]

    def rows(self) -> list[Row]:
        """Every stream heard whose process has not ended, for the front's metrics."""
        with self._lock:
            return [Row(s.hello, s.heard_at, s.last_step_t, s.agent_open or s.since is not None)
                    for s in self.detector.streams.values() if s.hello is not None and not s.ended]

    def events_of(self, pid: int) -> list[Stall]:
        """The front's events about process `pid` not yet in its record, in the order made; a stall still open
        is closed ("exit"): the process is gone, and the source may have stopped before its stream's close reached it."""
        with self._lock:
            for name, s in self.detector.streams.items():
                if s.pid == pid and s.since is not None and pid in self.made:  # its "start" was made
                    self._keep(name, self.detector.closed(name, time.time()))
            return list(self.made.get(pid, []))
