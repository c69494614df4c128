"""Provides the viewer's side of an agent's socket: a connection that reads the event stream and sends commands."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from pitstop.errors import TransportError
from pitstop.profiling.transport._endpoints import TcpEndpoint


class Client:
    """A viewer's connection to one agent socket (Unix path or TCP endpoint)."""

    def __init__(self, path: Path | TcpEndpoint, timeout: float = 5.0) -> None:
        self.path = path
        self._buf = b""
        self._lock = threading.Lock()
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
        self._sock.sendall(json.dumps({"token": end.token}).encode() + b"\n")
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
        try:
            message = str(json.loads(first).get("message", ""))
        except ValueError:
            message = "garbled answer"
        if message != "ok":
            self._sock.close()
            raise TransportError(f"{end} {message}")

    def send_command(self, cmd: str) -> None:
        with self._lock:
            try:
                self._sock.sendall(json.dumps({"cmd": cmd}).encode() + b"\n")
            except OSError as err:
                raise TransportError(f"the agent at {self.path} went away") from err

    def lines(self, poll: float = 0.25) -> Iterator[list[bytes]]:
        """Batches of raw lines as they arrive; an empty batch every `poll` s while idle; ends at EOF."""
        self._sock.settimeout(poll)
        while True:
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
            *whole, self._buf = self._buf.split(b"\n")
            yield [line for line in whole if line]

    def close(self) -> None:
        try:
            self._sock.close()
        except OSError:
            pass


def request(path: Path, cmd: str, timeout: float = 5.0) -> str:
    """Send one command and wait for its reply (for `pitstop profile PID`)."""
    client = Client(path, timeout=timeout)
    try:
        client.send_command(cmd)
        deadline = time.monotonic() + timeout
        for batch in client.lines(poll=0.2):
            for line in batch:
                if b'"kind":"reply"' in line or b'"kind": "reply"' in line:
                    data = json.loads(line)
                    if data.get("cmd") == cmd:
                        return str(data.get("message", ""))
            if time.monotonic() > deadline:
                raise TransportError(f"no reply from the agent at {path} within {timeout:.0f} s")
        raise TransportError(f"the agent at {path} closed the connection")
    finally:
        client.close()
