"""Provides the agent's side of its socket: the server that sends the event stream to viewers and answers their commands.

The agent's writer thread publishes: it files the lines into the history and
sends them to each viewer itself, non-blocking, under one lock. The server's
named daemon thread accepts, reads commands and flushes what a slow viewer
could not take at once; it sleeps in select until one of those happens, so a
run with viewers costs no wake-ups beyond the writer's own (each wake-up of a
Python thread is a GIL hand-off with the training thread; in a 2-rank job on
2 saturated cores, cutting these and the headless front's wake-ups took the
job's step time from 1.0275x plain to ~1.01x, benchmarks/distributed_overhead.py).
A stalled or vanished client can never slow training: a client whose unsent
backlog passes MAX_BACKLOG is dropped.
"""

from __future__ import annotations

import json
import os
import selectors
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pitstop.errors import TransportError
from pitstop.profiling.rundir import runtime_dir
from pitstop.profiling.transport._wire import parse_command, parse_token, reply_line
from pitstop.stepcolumns import steps_in

MAX_BACKLOG = 16 << 20  # bytes queued for one client before it is dropped (~60 s of a busy run)
# Recent events replayed to a client on connect, besides sticky ones: a `steps` line (the agent
# publishes the record's lines) counts as the steps it holds.
HISTORY_EVENTS = 20_000
# Sticky events are replayed to every viewer however old: the latest of each of these kinds...
LATEST_KINDS = frozenset({"runtime", "model", "applied", "rank"})
# ...and DataLoaders: the first ones built (the training loader, usually) and the latest. A script
# that builds its eval loader every epoch sends one a few minutes: in a one-day run fed to this
# server (benchmarks/replay_memory.py) 432 of them pushed the Runtime event and the training loader
# out of the 256 sticky lines kept before, and a viewer attaching showed "device n/a".
FIRST_LOADERS = 8
LATEST_LOADERS = 56


def _peer_uid(conn: socket.socket) -> int | None:
    try:
        creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    except (OSError, AttributeError):  # not Linux: the 0700 directory is the guard
        return None
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid


@dataclass
class _Client:
    conn: socket.socket
    out: bytearray
    inbuf: bytearray
    authed: bool = True  # TCP clients start False and must send the token first
    since: float = 0.0
    dead: bool = False  # set by the publisher; the server thread drops it
    host: str = ""  # a TCP client's address, for the per-address cap on unauthenticated connections


AUTH_TIMEOUT_S = 5.0  # a TCP client that has not sent its token by then is dropped
# Idle strangers must not keep a viewer out (with 10 unauthenticated connections open,
# the 11th attempt timed out: a backlog of 8 and one accept per wake-up of a thread that waits for
# the GIL). The kernel now completes any burst of handshakes, each wake-up accepts all that wait,
# and past these caps the oldest unauthenticated connection (from that address, else from any) is
# closed: a viewer sends its token at once, so it is never the oldest.
TCP_BACKLOG = socket.SOMAXCONN
MAX_UNAUTHED_PER_HOST = 4
MAX_UNAUTHED = 32
ACCEPT_BURST = 256  # connections accepted in one wake-up at most: the thread also serves viewers
TCP_PAUSE_S = 1.0  # accepting fails (no file descriptor left): stop listening this long instead of spinning


class AgentServer:
    """Serves one process's event stream to any number of local viewers."""

    def __init__(
        self,
        on_command: Callable[[str], str],
        info: dict[str, Any],
        tcp: tuple[str, int] | None = None,
        token: str | None = None,
    ) -> None:
        self._on_command = on_command
        self._lock = threading.Lock()  # clients, their buffers and the history: publisher vs server thread
        self._history: deque[tuple[bytes, int]] = deque()  # (line, the events it holds)
        self._history_events = 0
        self._hello = b""
        self._latest: dict[str, bytes] = {}  # LATEST_KINDS, in the order first seen
        self._first_loaders: list[bytes] = []
        self._loaders: deque[bytes] = deque(maxlen=LATEST_LOADERS)
        self._clients: dict[int, _Client] = {}
        self._stop = threading.Event()
        directory = runtime_dir()
        self.path = directory / f"{os.getpid()}.sock"
        self.info_path = directory / f"{os.getpid()}.json"
        for stale in (self.path, self.info_path):
            stale.unlink(missing_ok=True)  # a dead process with our recycled pid
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)  # the socket file is born 0600
        try:
            self._listener.bind(str(self.path))
        finally:
            os.umask(old_umask)
        self._listener.listen(8)
        self._listener.setblocking(False)
        self._tcp: socket.socket | None = None
        self._tcp_paused_until: float | None = None
        self._token = token
        if tcp is not None:
            if not token:
                raise TransportError("TCP listening needs a token")
            family = socket.AF_INET6 if ":" in tcp[0] else socket.AF_INET
            self._tcp = socket.socket(family, socket.SOCK_STREAM)
            self._tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._tcp.bind(tcp)
            self._tcp.listen(TCP_BACKLOG)
            self._tcp.setblocking(False)
            info = {**info, "tcp": f"{tcp[0]}:{self._tcp.getsockname()[1]}"}
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        tmp = self.info_path.with_suffix(".tmp")
        tmp.write_text(json.dumps({**info, "socket": str(self.path)}))
        os.chmod(tmp, 0o600)
        tmp.replace(self.info_path)
        self._thread = threading.Thread(target=self._loop, name="pitstop-socket", daemon=True)
        self._thread.start()

    def publish(self, lines: list[str]) -> None:
        """File encoded events into the history and send them to every viewer (never blocks).

        Runs on the caller's thread (the agent's writer). Sends are
        non-blocking: what a viewer cannot take now stays in its buffer and
        the server thread is woken to flush it when the socket drains; a
        viewer whose buffer passes MAX_BACKLOG is dropped. A client that
        connects gets the history and then every later line, in order.
        """
        if not lines:
            return
        payload = bytearray()
        with self._lock:
            for line in lines:
                raw = line.encode() + b"\n"
                payload += raw
                kind = line[9:].split('"', 1)[0] if line.startswith('{"kind":"') else ""
                if kind == "hello":
                    self._hello = raw
                elif kind in LATEST_KINDS:
                    self._latest[kind] = raw
                elif kind == "dataloader":
                    if len(self._first_loaders) < FIRST_LOADERS:
                        self._first_loaders.append(raw)
                    else:
                        self._loaders.append(raw)
                else:
                    held = steps_in(line)
                    history = self._history
                    history.append((raw, held))
                    self._history_events += held
                    while self._history_events > HISTORY_EVENTS and len(history) > 1:
                        self._history_events -= history.popleft()[1]
            wake = False
            for client in self._clients.values():
                if not client.authed or client.dead:
                    continue
                pending = bool(client.out)  # the server thread is already waiting to flush it
                client.out += payload
                if len(client.out) > MAX_BACKLOG:
                    client.dead = True
                    wake = True
                elif not pending and not self._send(client):
                    wake = True
        if wake:
            self._wake()

    def _send(self, client: _Client) -> bool:
        """Send what the socket takes now; True when nothing is left (lock held)."""
        while client.out:
            try:
                sent = client.conn.send(client.out[:262144])
            except BlockingIOError:
                return False
            except OSError:
                client.dead = True
                return False
            del client.out[:sent]
        return True

    def _wake(self) -> None:
        try:
            self._wake_w.send(b"\0")
        except OSError:  # the wake pipe is full: the server is awake anyway
            pass

    def close(self) -> None:
        self._stop.set()
        self._wake()
        self._thread.join(timeout=2.0)
        self._cleanup()

    def close_in_child(self) -> None:
        """After fork: drop our copies of the fds without unlinking the parent's socket."""
        for sock in (self._listener, self._tcp, self._wake_r, self._wake_w):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass

    def _cleanup(self) -> None:
        for sock in (self._listener, self._tcp, self._wake_r, self._wake_w, *[c.conn for c in self._clients.values()]):
            try:
                if sock is not None:
                    sock.close()
            except OSError:
                pass
        self._clients.clear()
        for path in (self.path, self.info_path):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                pass

    def _loop(self) -> None:
        sel = selectors.DefaultSelector()
        sel.register(self._listener, selectors.EVENT_READ, "accept")
        sel.register(self._wake_r, selectors.EVENT_READ, "wake")
        if self._tcp is not None:
            sel.register(self._tcp, selectors.EVENT_READ, "accept-tcp")
        while not self._stop.is_set():
            try:
                ready = sel.select(timeout=self._auth_wait())
            except OSError:
                return
            with self._lock:
                self._serve(sel, ready)

    def _auth_wait(self) -> float | None:
        """Seconds until the first deadline (an unauthenticated client's, a paused listener's); None: sleep."""
        deadlines = [c.since + AUTH_TIMEOUT_S for c in list(self._clients.values()) if not c.authed]
        if self._tcp_paused_until is not None:
            deadlines.append(self._tcp_paused_until)
        return max(0.0, min(deadlines) - time.monotonic()) + 0.01 if deadlines else None

    def _serve(self, sel: selectors.BaseSelector, ready: list[tuple[selectors.SelectorKey, int]]) -> None:
        """One wake-up of the server thread (lock held)."""
        now = time.monotonic()
        for fd, client in list(self._clients.items()):
            if not client.authed and now - client.since > AUTH_TIMEOUT_S:
                self._drop(sel, fd)
        if self._tcp is not None and self._tcp_paused_until is not None and now >= self._tcp_paused_until:
            self._tcp_paused_until = None
            sel.register(self._tcp, selectors.EVENT_READ, "accept-tcp")
        for key, mask in ready:
            if key.data == "accept":
                self._accept(sel)
            elif key.data == "accept-tcp":
                self._accept_tcp(sel)
            elif key.data == "wake":
                try:
                    while self._wake_r.recv(4096):
                        pass
                except OSError:
                    pass
                self._catch_up(sel)
            else:
                client = self._clients.get(key.data)
                if client is None:
                    continue
                try:
                    if mask & selectors.EVENT_READ:
                        self._read(sel, client)
                    if mask & selectors.EVENT_WRITE and key.data in self._clients:
                        self._flush(sel, client)
                except Exception:  # one bad client must not end the server thread
                    self._drop(sel, key.data)

    def _catch_up(self, sel: selectors.BaseSelector) -> None:
        """The publisher woke us: drop the clients it gave up on, flush what it could not send."""
        for fd, client in list(self._clients.items()):
            if client.dead:
                self._drop(sel, fd)
            elif client.out and client.authed:
                self._flush(sel, client)

    def _accept(self, sel: selectors.BaseSelector) -> None:
        try:
            conn, _ = self._listener.accept()
        except OSError:
            return
        uid = _peer_uid(conn)
        if uid is not None and uid != os.getuid():
            conn.close()  # another user's viewer: refused
            return
        conn.setblocking(False)
        client = _Client(conn, self._replay(), bytearray())
        self._clients[conn.fileno()] = client
        sel.register(conn, selectors.EVENT_READ | selectors.EVENT_WRITE, conn.fileno())

    def _replay(self) -> bytearray:
        sticky = (*self._latest.values(), *self._first_loaders, *self._loaders)
        return bytearray(self._hello + b"".join(sticky) + b"".join(raw for raw, _ in self._history))

    def replay_size(self) -> tuple[int, int]:
        """(lines, bytes) a viewer that connects now is sent before the live events."""
        with self._lock:
            replay = self._replay()
        return replay.count(b"\n"), len(replay)

    def _accept_tcp(self, sel: selectors.BaseSelector) -> None:
        """Accept every connection waiting (up to ACCEPT_BURST), keeping unauthenticated ones within their caps."""
        assert self._tcp is not None
        for _ in range(ACCEPT_BURST):
            try:
                conn, addr = self._tcp.accept()
            except BlockingIOError:  # none left
                return
            except OSError:  # out of file descriptors: the listener stays readable, so pause it, not spin
                sel.unregister(self._tcp)
                self._tcp_paused_until = time.monotonic() + TCP_PAUSE_S
                return
            conn.setblocking(False)
            client = _Client(conn, bytearray(), bytearray(), authed=False, since=time.monotonic(), host=str(addr[0]))
            self._make_room(sel, client.host)
            self._clients[conn.fileno()] = client
            sel.register(conn, selectors.EVENT_READ, conn.fileno())

    def _make_room(self, sel: selectors.BaseSelector, host: str) -> None:
        """Close the oldest unauthenticated connections so one more from `host` stays within the caps."""
        waiting = sorted(((c.since, fd, c.host) for fd, c in self._clients.items() if not c.authed))
        same = [w for w in waiting if w[2] == host]
        for _, fd, _ in same[: max(0, len(same) - MAX_UNAUTHED_PER_HOST + 1)]:
            self._drop(sel, fd)
        waiting = [w for w in waiting if w[1] in self._clients]
        for _, fd, _ in waiting[: max(0, len(waiting) - MAX_UNAUTHED + 1)]:
            self._drop(sel, fd)

    def _authenticate(self, sel: selectors.BaseSelector, client: _Client, line: bytes) -> bool:
        import hmac

        token = parse_token(line)
        if self._token and token and hmac.compare_digest(token.encode(), self._token.encode()):
            client.authed = True
            client.out += reply_line("auth", "ok")
            client.out += self._replay()
            return True
        reason = "missing token" if not token else "wrong token"
        try:
            client.conn.send(reply_line("auth", f"refused: {reason}"))
        except OSError:
            pass
        self._drop(sel, client.conn.fileno())
        return False

    def _read(self, sel: selectors.BaseSelector, client: _Client) -> None:
        fd = client.conn.fileno()
        try:
            data = client.conn.recv(65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._drop(sel, fd)
            return
        client.inbuf += data
        while b"\n" in client.inbuf:
            line, _, rest = bytes(client.inbuf).partition(b"\n")
            client.inbuf = bytearray(rest)
            if not client.authed:
                if not self._authenticate(sel, client, line):
                    return
                continue
            cmd, request_id = parse_command(line)
            try:
                reply = self._on_command(cmd)
            except Exception as err:  # a command must never kill the server thread
                reply = f"error: {err}"
            client.out += reply_line(cmd, reply, request_id)
        self._flush(sel, client)

    def _flush(self, sel: selectors.BaseSelector, client: _Client) -> None:
        """Send what the socket takes; wait for it to drain (EVENT_WRITE) if anything is left."""
        fd = client.conn.fileno()
        self._send(client)
        if client.dead:
            self._drop(sel, fd)
            return
        events = selectors.EVENT_READ | (selectors.EVENT_WRITE if client.out else 0)
        try:
            sel.modify(client.conn, events, fd)
        except (KeyError, ValueError, OSError):
            pass

    def _drop(self, sel: selectors.BaseSelector, fd: int) -> None:
        client = self._clients.pop(fd, None)
        if client is None:
            return
        try:
            sel.unregister(client.conn)
        except (KeyError, ValueError):
            pass
        try:
            client.conn.close()
        except OSError:
            pass
