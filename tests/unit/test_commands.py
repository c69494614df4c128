"""Commands are request and reply, per process: each one's own answer, or that it gave none (issue 13, seam 1)."""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from pathlib import Path


from pitstop.events import Hello, Step, encode
from pitstop.profiling.sources import SocketSource
from pitstop.profiling.transport import AgentServer, ask, request
from pitstop.streams import Answer, StreamBatch

OFF = "profiler windows are off in this run"
# How long a silent process is waited for: the live one, a thread of this process, must answer within
# it even on a busy machine (0.5 s is too close at load 9-13 on 2 cores, issue 13); each test waits it out once.
SILENT_S = 3.0


def hello(rank: int | None, pid: int) -> Hello:
    return Hello(schema=1, pitstop_version="0.1.0", session="s", pid=pid, ppid=1, host="h", argv=["python"],
                 cwd="/", started=1.0, python="3.11", rank=rank)


class SilentAgent:
    """A fake agent of a hung process: it sends its hello and reads commands, and never answers."""

    def __init__(self, path: Path, first: Hello) -> None:
        self.path = path
        self.commands: list[bytes] = []
        self.got_command = threading.Event()
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(path))
        self._listener.listen(4)
        self._conns: list[socket.socket] = []
        self._first = encode(first).encode() + b"\n"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            self._conns.append(conn)
            conn.sendall(self._first)
            threading.Thread(target=self._read, args=(conn,), daemon=True).start()

    def _read(self, conn: socket.socket) -> None:
        while True:
            try:
                data = conn.recv(4096)
            except OSError:
                return
            if not data:
                return
            self.commands.append(data)
            self.got_command.set()

    def close(self) -> None:
        for sock in (self._listener, *self._conns):
            sock.close()


class Viewer:
    """Reads a source in a thread, as a viewer does; the test waits on what it has read."""

    def __init__(self, source: SocketSource) -> None:
        self.got: list[StreamBatch] = []
        self._cond = threading.Condition()
        self._source = source
        self._thread = threading.Thread(target=self._consume, daemon=True)
        self._thread.start()

    def _consume(self) -> None:
        for batch in self._source.batches():
            with self._cond:
                self.got.append(batch)
                self._cond.notify_all()

    def wait_for(self, what: str, predicate: Callable[[list[StreamBatch]], bool]) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: predicate(self.got), timeout=60), f"no {what} in {self.got}"

    def hellos(self, n: int) -> None:
        self.wait_for(f"{n} hellos", lambda got: sum(isinstance(e, Hello) for b in got for e in b.events) >= n)

    def close(self) -> None:
        self._source.close()
        self._thread.join(10)


def test_each_rank_answers_for_itself_and_a_silent_one_is_named(rundir: Path) -> None:
    server = AgentServer(lambda cmd: OFF if cmd == "profile" else "?", {"pid": os.getpid()})
    server.publish([encode(hello(0, os.getpid())), encode(Step(t=2.0, step=0, wall=0.1, data_wait=0.0))])
    silent = SilentAgent(rundir / "silent.sock", hello(1, 99999))
    source = SocketSource("job", sockets=[silent.path, server.path], poll_s=0.05)
    viewer = Viewer(source)
    try:
        viewer.hellos(2)
        replies = source.command("profile", timeout=SILENT_S)
    finally:
        viewer.close()
        server.close()
        silent.close()
    # In rank order, whatever order the sockets were given in; the agent's own words, not "sent".
    assert replies.answers == (Answer("rank 0", OFF), Answer("rank 1", f"no answer in {SILENT_S:g} s", answered=False))
    assert replies.text() == f"rank 0: {OFF}\nrank 1: no answer in {SILENT_S:g} s"
    assert not replies.complete
    assert b'"cmd":"profile"' in b"".join(silent.commands)  # it was asked
    # Replies are not events: nothing but the hello and the step reached the viewer.
    assert sorted(type(e).__name__ for b in viewer.got for e in b.events) == ["Hello", "Hello", "Step"]


def test_a_process_whose_stream_ended_says_so(rundir: Path) -> None:
    server = AgentServer(lambda cmd: OFF, {"pid": os.getpid()})
    server.publish([encode(hello(None, os.getpid()))])
    source = SocketSource("one", sockets=[server.path], until=lambda: False, poll_s=0.05)
    viewer = Viewer(source)
    try:
        viewer.hellos(1)
        server.close()  # the process exits
        viewer.wait_for("end of stream", lambda got: any(b.closed for b in got))
        replies = source.command("profile", timeout=SILENT_S)
    finally:
        viewer.close()
    assert replies.answers == (Answer(f"pid {os.getpid()}", "its stream ended before it answered", answered=False),)


def test_pitstop_profile_asks_every_process_on_its_own_connection(rundir: Path) -> None:
    server = AgentServer(lambda cmd: f"{cmd}: {OFF}", {"pid": os.getpid()})
    silent = SilentAgent(rundir / "silent.sock", hello(1, 99999))
    try:
        assert request(server.path, "profile") == f"profile: {OFF}"
        replies = ask([("rank 0", server.path), ("rank 1", silent.path)], "profile", timeout=SILENT_S)
    finally:
        server.close()
        silent.close()
    assert [str(a) for a in replies.answers] == [f"rank 0: profile: {OFF}", f"rank 1: no answer in {SILENT_S:g} s"]
