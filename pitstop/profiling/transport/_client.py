"""Provides the viewer's side of an agent's socket: a connection that reads the event stream and asks commands.

A command is a request with an id; the agent's reply comes back in its event
stream, and whoever reads the stream (`Client.lines`) hands it to the waiting
`PendingReply` instead of passing it on as an event. So a viewer hears each
process's own answer ("profiler windows are off in this run"), or that it did
not answer, where it used to say "sent".
"""

from __future__ import annotations

import itertools
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from pitstop.errors import TransportError
from pitstop.profiling.transport._endpoints import TcpEndpoint
from pitstop.profiling.transport._wire import command_line, is_reply, parse_reply, token_line
from pitstop.streams import Answer, Replies

COMMAND_TIMEOUT_S = 5.0  # how long a viewer waits for a process's answer before saying it gave none


class PendingReply:
    """A command sent to one agent: its reply once it comes, or why none will."""

    def __init__(self, cmd: str, request_id: int) -> None:
        self.cmd = cmd
        self.id = request_id
        self.message: str | None = None
        self.gone: str | None = None  # why no reply will come: the stream ended first
        self._done = threading.Event()

    def resolve(self, message: str) -> None:
        self.message = message
        self._done.set()

    def abandon(self, why: str) -> None:
        if not self._done.is_set():
            self.gone = why
            self._done.set()

    def wait(self, timeout: float) -> bool:
        return self._done.wait(max(0.0, timeout))

    def answer(self, process: str, timeout: float) -> Answer:
        """What to tell a person: the reply, or that there was none (without waiting)."""
        if self.message is not None:
            return Answer(process, self.message)
        return Answer(process, self.gone or f"no answer in {timeout:g} s", answered=False)


class Client:
    """A viewer's connection to one agent socket (Unix path or TCP endpoint)."""

    def __init__(self, path: Path | TcpEndpoint, timeout: float = 5.0) -> None:
        self.path = path
        self._buf = b""
        self._lock = threading.Lock()  # the senders (a viewer's command threads)
        self._ids = itertools.count(1)
        self._pending: dict[int, PendingReply] = {}
        self._ended: str | None = None  # why the stream ended, once it has
        if isinstance(path, TcpEndpoint):
            self._connect_tcp(path, timeout)
            return
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(timeout)
        try:
            self._sock.connect(str(path))
        except FileNotFoundError as err:
            raise TransportError(f"no agent socket at {path}") from err
        except ConnectionRefusedError as err:
            raise TransportError(f"stale socket {path}: nothing listens there (the run has ended)") from err
        except PermissionError as err:
            raise TransportError(f"socket {path} belongs to another user") from err
        except OSError as err:
            raise TransportError(f"cannot connect to {path}: {err.strerror or err}") from err

    def _connect_tcp(self, end: TcpEndpoint, timeout: float) -> None:
        try:
            self._sock = socket.create_connection((end.host, end.port), timeout=timeout)
        except OSError as err:
            raise TransportError(f"cannot connect to {end}: {err.strerror or err}") from err
        try:
            self._sock.sendall(token_line(end.token))
        except OSError as err:
            self._sock.close()
            raise TransportError(f"{end} closed the connection: {err.strerror or err}") from err
        # The first line answers the token: ok, or refused and closed.
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buf:
            if time.monotonic() > deadline:
                raise TransportError(f"{end} did not answer the token within {timeout:.0f} s")
            try:
                data = self._sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                raise TransportError(f"{end} closed the connection (refused: wrong or missing token?)")
            self._buf += data
        first, _, self._buf = self._buf.partition(b"\n")
        reply = parse_reply(first)
        message = reply.message if reply is not None else "garbled answer"
        if message != "ok":
            self._sock.close()
            raise TransportError(f"{end} {message}")

    def send_command(self, cmd: str) -> PendingReply:
        """Send a command; its reply arrives through whoever reads `lines()`."""
        with self._lock:
            pending = PendingReply(cmd, next(self._ids))
            if self._ended is not None:
                pending.abandon(self._ended)
                return pending
            self._pending[pending.id] = pending
            try:
                self._sock.sendall(command_line(cmd, pending.id))
            except OSError as err:
                del self._pending[pending.id]
                raise TransportError(f"the agent at {self.path} went away") from err
        return pending

    def lines(self, poll: float = 0.25) -> Iterator[list[bytes]]:
        """Batches of raw event lines as they arrive; an empty batch every `poll` s while idle; ends at EOF.

        Replies to commands are not events: they are handed to their PendingReply here.
        """
        self._sock.settimeout(poll)
        try:
            while True:
                # First what is already here: the history that came with the token's answer must not
                # wait for the next event to be read.
                if b"\n" in self._buf:
                    *whole, self._buf = self._buf.split(b"\n")
                    yield [line for line in whole if line and not (is_reply(line) and self._route(line))]
                try:
                    data = self._sock.recv(1 << 20)
                except TimeoutError:
                    yield []
                    continue
                except OSError:
                    data = b""
                if not data:
                    return
                self._buf += data
        finally:
            self._end("its stream ended before it answered")

    def _route(self, line: bytes) -> bool:
        """Hand a reply line to the command waiting for it; True when the line was a reply."""
        reply = parse_reply(line)
        if reply is None:
            return False
        with self._lock:
            pending = self._pending.pop(reply.id, None) if reply.id is not None else None
            if pending is None and reply.id is None:  # an older agent echoes no id: pair by command
                pending = next((p for p in self._pending.values() if p.cmd == reply.cmd), None)
                if pending is not None:
                    del self._pending[pending.id]
        if pending is not None:
            pending.resolve(reply.message)
        return True

    def _end(self, why: str) -> None:
        with self._lock:
            self._ended = why
            pending, self._pending = list(self._pending.values()), {}
        for p in pending:
            p.abandon(why)

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def _request(where: Path | TcpEndpoint, cmd: str, timeout: float) -> PendingReply:
    """Send one command on a connection of its own; the PendingReply once answered, ended or timed out."""
    client = Client(where, timeout=timeout)
    try:
        pending = client.send_command(cmd)
        deadline = time.monotonic() + timeout
        # Held in a name: leaving the loop must not end the stream (and with it the wait) before the time-out is said.
        stream = client.lines(poll=0.2)
        for _batch in stream:  # reading the stream is what delivers the reply
            if pending.message is not None or time.monotonic() > deadline:
                break
        pending.abandon(f"no answer in {timeout:g} s")  # a no-op when it answered or its stream ended first
        stream.close()
        return pending
    finally:
        client.close()


def request(path: Path | TcpEndpoint, cmd: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
    """Send one command and wait for the reply; TransportError when none comes."""
    pending = _request(path, cmd, timeout)
    if pending.message is None:
        raise TransportError(f"the agent at {path}: {pending.gone}")
    return pending.message


def ask(processes: Sequence[tuple[str, Path | TcpEndpoint]], cmd: str, timeout: float = COMMAND_TIMEOUT_S) -> Replies:
    """Send `cmd` to every process at once, each on a connection of its own; each one's answer, in the order given."""
    answers: list[Answer | None] = [None] * len(processes)

    def one(i: int, name: str, where: Path | TcpEndpoint) -> None:
        try:
            answers[i] = _request(where, cmd, timeout).answer(name, timeout)
        except TransportError as err:  # could not connect or send: that is its answer
            answers[i] = Answer(name, str(err), answered=False)

    threads = [threading.Thread(target=one, args=(i, name, where), name="pitstop-ask", daemon=True)
               for i, (name, where) in enumerate(processes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(2 * timeout + 1.0)  # connect and reply are each bounded by `timeout`
    return Replies(cmd, tuple(a or Answer(name, f"no answer in {timeout:g} s", answered=False)
                              for a, (name, _) in zip(answers, processes)))
