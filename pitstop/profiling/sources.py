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
from typing import Protocol

from pitstop.analysis import StreamBatch
from pitstop.errors import SchemaError, TransportError
from pitstop.events import Event, decode
from pitstop.profiling.record import iter_record, record_files
from pitstop.profiling.transport import Client, TcpEndpoint, list_agents


DISCOVERY_S = 1.0  # how often a session's source looks for new ranks once it has found some


class EventSource(Protocol):
    label: str
    live: bool

    def batches(self) -> Iterator[StreamBatch]: ...

    def command(self, name: str) -> str: ...

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

    def command(self, name: str) -> str:
        if not self.live:
            raise TransportError("replay: cannot send commands to a recorded run")
        self.commands.append(name)
        return f"ok: {name}"

    def close(self) -> None:
        pass


class RecordSource:
    """A replay of record files: one stream per file, read in batches.

    The viewer does not iterate `batches()`: it indexes `files` by byte offset
    (pitstop/tui/replay.py), as a record holds every step of the run.
    """

    live = False

    def __init__(self, target: Path) -> None:
        self.files = record_files(target)
        self.label = f"replay: {target}"

    def batches(self) -> Iterator[StreamBatch]:
        for path in self.files:
            events: list[Event] = []
            for event in iter_record(path):
                events.append(event)
                if len(events) >= 2000:
                    yield StreamBatch(str(path), events)
                    events = []
            yield StreamBatch(str(path), events, closed=True)

    def command(self, name: str) -> str:
        raise TransportError("replay: cannot send commands to a recorded run")

    def close(self) -> None:
        pass


class SocketSource:
    """Live events from the agents of one session (all ranks) or of given sockets.

    With `session`, new ranks are discovered as they start (torchrun starts
    them after the launcher). Ends when every stream ended and, if
    `until` is given, `until()` is true (the launched command exited).
    """

    live = True

    def __init__(
        self,
        label: str,
        sockets: Sequence[Path | TcpEndpoint] = (),
        session: str | None = None,
        until: Callable[[], bool] | None = None,
        poll_s: float = 0.25,
    ) -> None:
        self.label = label
        self._sockets = list(sockets)
        self._session = session
        self._until = until
        self._poll = poll_s
        self._clients: dict[Path | TcpEndpoint, Client] = {}
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
            try:
                for raw in client.lines(poll=self._poll):
                    if self._stop.is_set():
                        return
                    events = []
                    for line in raw:
                        try:
                            event = decode(line)
                        except SchemaError as err:
                            if "newer pitstop" in str(err):
                                raise
                            continue
                        if event is not None:
                            events.append(event)
                    if events:
                        with lock:
                            out.append(StreamBatch(stream, events))
                        wake.set()
            except Exception as err:
                with lock:
                    errors.append(err)
            finally:
                with lock:
                    done.add(path)
                    # A stream that closes without an End event is a process that died.
                    out.append(StreamBatch(stream, [], closed=True))
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
            yield from ready
            ended = self._until() if self._until is not None else True
            if finished and ended:
                return
            if not active and self._until is not None and ended:
                return
            if not active and self._until is None and self._session is None:
                raise TransportError("no agent socket to read")

    def command(self, name: str) -> str:
        with self._lock:
            clients = list(self._clients.values())
        if not clients:
            raise TransportError("not connected to any agent")
        for client in clients:
            client.send_command(name)
        return f"{name}: sent to {len(clients)} process(es)"

    def close(self) -> None:
        self._stop.set()
        with self._lock:
            for client in self._clients.values():
                client.close()

