"""Viewers across machines: `pitstop run --listen` serves TCP only to holders of the token."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.errors import TransportError
from pitstop.events import Hello, Step, decode
from pitstop.profiling._linedecode import decode_events
from pitstop.profiling.record import iter_record
from pitstop.profiling.transport import Client, TcpEndpoint

from .conftest import SCRIPTS, pitstop, wait_for


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _steps(record: Path) -> int:
    try:
        return sum(isinstance(e, Step) for e in iter_record(record))
    except Exception:
        return 0


def test_tcp_attach_needs_the_right_token(tmp_path: Path, env: dict[str, str]) -> None:
    port = _free_port()
    token_file = tmp_path / "token"
    record = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--listen", f"127.0.0.1:{port}",
         "--token-file", str(token_file), "--record", str(record), str(SCRIPTS / "loop_forever.py")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        wait_for(lambda: _steps(record) >= 3, what="three steps")
        assert oct(token_file.stat().st_mode & 0o777) == "0o600"
        token = token_file.read_text().strip()
        client = Client(TcpEndpoint("127.0.0.1", port, token))
        got = []
        for batch in client.lines(poll=0.2):
            got += [event for line in batch for event in decode_events(line)]
            if any(isinstance(e, Step) for e in got):
                break
        client.close()
        assert isinstance(got[0], Hello)
        with pytest.raises(TransportError, match="refused: wrong token"):
            Client(TcpEndpoint("127.0.0.1", port, "not-the-token"))
        with pytest.raises(TransportError, match="refused: missing token"):
            Client(TcpEndpoint("127.0.0.1", port, ""))
        # no token line at all: the server sends nothing and drops the connection
        raw = socket.create_connection(("127.0.0.1", port), timeout=10)
        raw.sendall(b'{"cmd": "stop"}\n')
        answer = raw.recv(4096)
        raw.close()
        assert b"refused" in answer and b'"kind":"hello"' not in answer
        # Idle strangers holding connections never keep the viewer with the token out (issue 13).
        strangers = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(12)]
        try:
            viewer = Client(TcpEndpoint("127.0.0.1", port, token), timeout=10)
            first = next(batch for batch in viewer.lines(poll=0.2) if batch)
            viewer.close()
            assert isinstance(decode(first[0]), Hello)
        finally:
            for stranger in strangers:
                stranger.close()
        bad = tmp_path / "bad-token"
        bad.write_text("guess\n")
        bad.chmod(0o600)
        result = pitstop(["attach", f"127.0.0.1:{port}", "--token-file", str(bad), "--headless"], env, timeout=30)
        assert result.returncode == 2 and "refused: wrong token" in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert proc.poll() is None  # training went on through all of it
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            for event in iter_record(record):
                if isinstance(event, Hello):
                    try:
                        os.kill(event.pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    break
