"""Provides event sources: what every viewer (TUI, headless, tuner) is given to read.

A source yields `StreamBatch`es (one training process's events at a time):
`SocketSource` from live agents, `RecordSource` from record files (a replay),
`ListSource` from memory (tests). Viewers never care which.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from pitstop.errors import SchemaError, TransportError, reason_of
from pitstop.events import Event, Hello, Note, Rank
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling.record import iter_record, linked_record_files, record_files
from pitstop.profiling.transport import COMMAND_TIMEOUT_S, Client, PendingReply, TcpEndpoint, list_agents
from pitstop.streams import Answer, Replies, StreamBatch, process_name

if TYPE_CHECKING:
    from pitstop.profiling._silence import SilenceWatch


DISCOVERY_S = 1.0  # how often a session's source looks for new ranks once it has found some
# A stream that keeps sending malformed events is said once at the first, then at most this often.
MALFORMED_REPORT_S = 10.0


class MalformedCounter:
    """Counts the malformed events dropped from one live stream and says so in a `Note` the fronts show.

    A live stream never ends on a bad line (a record does, with its file:line):
    the event is dropped, and the first one, then a running count at most
    every MALFORMED_REPORT_S and at the stream's end, become warnings.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.dropped = 0
        self._said = 0
        self._said_at = 0.0
        self._clock = clock

    def drop(self, err: SchemaError) -> Note | None:
        self.dropped += 1
        now = self._clock()
        if self._said and now - self._said_at < MALFORMED_REPORT_S:
            return None
        return self._note(f"last: {err}", now)

    def flush(self) -> Note | None:
        """The count not yet said, at the stream's end."""
        return self._note("", self._clock()) if self.dropped > self._said else None

    def _note(self, last: str, now: float) -> Note:
        self._said, self._said_at = self.dropped, now
        count = "1 malformed event" if self.dropped == 1 else f"{self.dropped} malformed events"
        detail = f" ({last})" if last else ""
        return Note(t=time.time(), level="warn", source="stream", message=f"dropped {count} so far{detail}")


class EventSource(Protocol):
    label: str
    live: bool

    def batches(self) -> Iterator[StreamBatch]: ...

    def command(self, name: str) -> Replies: ...

    def close(self) -> None: ...


class ListSource:
    """Events from memory: for tests and benchmarks."""

    def __init__(self, batches: Sequence[StreamBatch], label: str = "test", live: bool = False) -> None:
        self._batches = list(batches)
        self.label = label
        self.live = live
        self.commands: list[str] = []

    def batches(self) -> Iterator[StreamBatch]:
        yield from self._batches

    def command(self, name: str) -> Replies:
        if not self.live:
            raise TransportError("replay: cannot send commands to a recorded run")
        self.commands.append(name)
        return Replies(name, (Answer(self.label, f"ok: {name}"),))

    def close(self) -> None:
        pass


class RecordSource:
    """A replay of record files: one stream per file, read in batches.

    The viewer does not iterate `batches()`: it indexes `files` by byte offset
    (pitstop/tui/replay.py), as a record holds every step of the run.
    """

    live = False

    def __init__(self, target: Path | list[Path]) -> None:
        """`target`: a record file or directory, or several (each node's of one job)."""
        targets = target if isinstance(target, list) else [target]
        # Ray Train's workers on other nodes wrote under the run's storage path: the driver's record links it.
        self.files = [f for one in targets for f in record_files(one) + linked_record_files(one)]
        self.label = f"replay: {' '.join(str(t) for t in targets)}"
        # The viewer's index of `files` (pitstop.tui.replay.Timeline), when the caller built it
        # first to turn a corrupt line into a one-line error before the screen opens.
        self.timeline: object | None = None

    def batches(self) -> Iterator[StreamBatch]:
        for path in self.files:
            events: list[Event] = []
            for event in iter_record(path):
                events.append(event)
                if len(events) >= 2000:
                    yield StreamBatch(str(path), events)
                    events = []
            yield StreamBatch(str(path), events, closed=True)

    def command(self, name: str) -> Replies:
        raise TransportError("replay: cannot send commands to a recorded run")

    def close(self) -> None:
        pass


class SocketSource:
    """Live events from the agents of one session (all ranks) or of given sockets.

    With `session`, new ranks are discovered as they start (torchrun starts
    them after the launcher). Ends when every stream ended and, if
    `until` is given, `until()` is true (the launched command exited).
    `command` asks every process and returns each one's own answer (its
    reply arrives through the reader thread of its stream).
    """

    live = True

    def __init__(
        self,
        label: str,
        sockets: Sequence[Path | TcpEndpoint] = (),
        session: str | None = None,
        until: Callable[[], bool] | None = None,
        poll_s: float = 0.25,
        watch: SilenceWatch | None = None,
    ) -> None:
        """`watch`: the front's silence watch (`_silence.py`): a process whose agent went silent is read from
        outside and its Stall yielded on its stream."""
        self.label = label
        self.watch = watch
        self._sockets = list(sockets)
        self._session = session
        self._until = until
        self._poll = poll_s
        self._clients: dict[Path | TcpEndpoint, Client] = {}
        self._who: dict[Path | TcpEndpoint, tuple[int | None, int | None]] = {}  # (rank, pid) from hello / rank
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def _discover(self) -> list[Path | TcpEndpoint]:
        if self._session is None:
            return self._sockets
        return [a.socket for a in list_agents() if a.session == self._session]

    def batches(self) -> Iterator[StreamBatch]:
        out: list[StreamBatch] = []
        lock = threading.Lock()
        wake = threading.Event()
        active: set[Path | TcpEndpoint] = set()
        done: set[Path | TcpEndpoint] = set()
        errors: list[Exception] = []

        def reader(path: Path | TcpEndpoint, client: Client) -> None:
            stream = f"socket:{path}"
            malformed = MalformedCounter()
            failure: Exception | None = None
            try:
                for raw in client.lines(poll=self._poll):
                    if self._stop.is_set():
                        return
                    events: list[Event] = []
                    for line in raw:
                        try:  # the agent sends its record's lines: a `steps` line holds many steps
                            decoded = decode_events(line)
                        except SchemaError as err:
                            if "newer pitstop" in str(err):
                                raise
                            dropped = malformed.drop(err)
                            decoded = [dropped] if dropped is not None else []
                        for event in decoded:
                            events.append(event)
                            if type(event) is Hello or type(event) is Rank:  # who answers this stream's commands
                                self._learn(path, event)
                    if events:
                        with lock:
                            out.append(StreamBatch(stream, events))
                        wake.set()
            except Exception as err:
                failure = err
                with lock:
                    errors.append(err)
            finally:
                last = malformed.flush()
                # A stream that closes without an End event is a process that died; one that
                # broke says why, for the fronts to show (other errors were dropped).
                why = reason_of(failure) if failure is not None else None
                with lock:
                    done.add(path)
                    out.append(StreamBatch(stream, [last] if last is not None else [], closed=True, error=why))
                wake.set()

        first_attempt = True
        next_discovery = 0.0
        while not self._stop.is_set():
            # The loop wakes for every batch; the runtime directory is read at most
            # once a second (new ranks still show up within a second).
            now = time.monotonic()
            paths: list[Path | TcpEndpoint] = []
            if now >= next_discovery:
                paths = self._discover()
                next_discovery = now + (DISCOVERY_S if paths else self._poll)  # none yet: ranks are starting
            for path in paths:
                if path in active:
                    continue
                try:
                    client = Client(path)
                except TransportError:
                    if not first_attempt or self._session is not None:
                        continue
                    raise
                active.add(path)
                with self._lock:
                    self._clients[path] = client
                threading.Thread(target=reader, args=(path, client), name="pitstop-source", daemon=True).start()
            first_attempt = False
            wake.wait(self._poll)
            wake.clear()
            with lock:
                ready, out[:] = list(out), []
                failed = list(errors)
                errors.clear()
                finished = active and done >= active
            for err in failed:
                if isinstance(err, SchemaError):
                    raise err
            if self.watch is not None:
                ready = self._watched(ready, out, lock, wake)
            yield from ready
            ended = self._until() if self._until is not None else True
            if finished and ended:
                return
            if not active and self._until is not None and ended:
                return
            if not active and self._until is None and self._session is None:
                raise TransportError("no agent socket to read")

    def _watched(self, ready: list[StreamBatch], out: list[StreamBatch], lock: threading.Lock,
                 wake: threading.Event) -> list[StreamBatch]:
        """The batches with the silence watch's own after them; silent streams read on its threads, whose
        Stall comes back through `out` as any reader's batch."""
        watch = self.watch
        assert watch is not None
        batches: list[StreamBatch] = []
        for batch in ready:
            batches.append(batch)
            made = watch.heard(batch)
            if made is not None:
                batches.append(made)

        def emit(batch: StreamBatch) -> None:
            with lock:
                out.append(batch)
            wake.set()

        watch.check(emit)
        return batches

    def command(self, name: str, timeout: float = COMMAND_TIMEOUT_S) -> Replies:
        """Send `name` to every process read and wait (in the caller's thread) for each one's own answer."""
        with self._lock:
            clients = list(self._clients.items())
            who = dict(self._who)
        if not clients:
            raise TransportError("not connected to any agent")

        def name_of(where: Path | TcpEndpoint) -> tuple[tuple[bool, int, int], str]:
            rank, pid = who.get(where, (None, None))
            order = (rank is None, rank if rank is not None else 0, pid if pid is not None else 0)
            return order, process_name(rank, pid) if (rank, pid) != (None, None) else str(where)

        sent: list[tuple[tuple[bool, int, int], str, PendingReply]] = []
        answers: list[tuple[tuple[bool, int, int], Answer]] = []
        for where, client in clients:
            order, process = name_of(where)
            try:
                sent.append((order, process, client.send_command(name)))
            except TransportError as err:
                answers.append((order, Answer(process, str(err), answered=False)))
        deadline = time.monotonic() + timeout
        for order, process, pending in sent:
            pending.wait(deadline - time.monotonic())
            answers.append((order, pending.answer(process, timeout)))
        return Replies(name, tuple(answer for _, answer in sorted(answers, key=lambda x: x[0])))

    def _learn(self, where: Path | TcpEndpoint, event: Hello | Rank) -> None:
        with self._lock:
            _, pid = self._who.get(where, (None, None))
            self._who[where] = (event.rank, event.pid if isinstance(event, Hello) else pid)

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for client in self._clients.values():
                client.close()

