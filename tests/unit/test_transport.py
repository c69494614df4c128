"""The agent's socket server: a stalled viewer is dropped, never waited for."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from pitstop.errors import TransportError
from pitstop.profiling import transport
from pitstop.profiling.transport import AgentServer, Client, list_agents, runtime_dir, socket_for_pid


@pytest.fixture
def rundir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = Path(f"/tmp/pst-unit-{os.getpid()}")
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(path))
    return path


def test_a_stalled_client_never_blocks_publish_and_is_dropped(rundir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(transport, "MAX_BACKLOG", 1 << 20)
    server = AgentServer(lambda cmd: "ok", {"pid": os.getpid()})
    try:
        stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        stalled.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        stalled.connect(str(server.path))  # connects, then never reads
        line = '{"kind":"step","t":0,"step":0,"wall":0.1,"data_wait":0.0,"pad":"' + "x" * 1000 + '"}'
        started = time.perf_counter()
        for _ in range(200):
            server.publish([line] * 50)  # ~10 MB in all
        assert time.perf_counter() - started < 1.0  # publishing never waits for a reader
        deadline = time.monotonic() + 10
        while server._clients and time.monotonic() < deadline:  # noqa: SLF001 - the drop is the behaviour
            time.sleep(0.05)
        assert not server._clients  # noqa: SLF001
        fresh = Client(server.path)  # the server still serves others
        fresh.close()
        stalled.close()
    finally:
        server.close()
    assert not server.path.exists()


def test_stale_socket_of_a_dead_pid_is_named_and_removed(rundir: Path) -> None:
    directory = runtime_dir()
    dead = 4_000_000  # above any pid_max: never alive
    (directory / f"{dead}.sock").write_text("")
    (directory / f"{dead}.json").write_text('{"pid": %d}' % dead)
    with pytest.raises(TransportError, match=f"stale socket for pid {dead}"):
        socket_for_pid(dead)
    assert not (directory / f"{dead}.sock").exists()
    assert list_agents() == []


def test_a_directory_of_another_user_is_refused(rundir: Path) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to hand the directory to another user")
    rundir.mkdir(mode=0o700, exist_ok=True)
    os.chown(rundir, 65534, 65534)
    try:
        with pytest.raises(TransportError, match="belongs to another user"):
            runtime_dir()
    finally:
        os.chown(rundir, 0, 0)
