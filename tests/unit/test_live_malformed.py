"""A live stream never ends on a malformed event: it is dropped, counted and said (issue 13, seam 9)."""

from __future__ import annotations

import os
import threading
from pathlib import Path


from pitstop.errors import SchemaError
from pitstop.events import Hello, Note, Step, encode
from pitstop.profiling.sources import MALFORMED_REPORT_S, MalformedCounter, SocketSource
from pitstop.profiling.transport import AgentServer
from pitstop.streams import StreamBatch


HELLO = Hello(schema=1, pitstop_version="0.1.0", session="s", pid=os.getpid(), ppid=1, host="h", argv=["python"],
              cwd="/", started=1.0, python="3.11")
# The line issue 13 found ending `pitstop view --summary` in "TypeError: Proc.__init__() missing ...".
BAD_SAMPLE = '{"kind":"sample","t":2.0,"procs":[{"loader":0}]}'


def test_a_malformed_event_in_a_live_stream_is_dropped_and_said_and_the_stream_goes_on(rundir: Path) -> None:
    server = AgentServer(lambda cmd: "ok", {"pid": os.getpid()})
    source = SocketSource("test", sockets=[server.path], poll_s=0.05)
    got: list[StreamBatch] = []
    seen = threading.Event()

    def consume() -> None:
        for batch in source.batches():
            got.append(batch)
            events = [e for b in got for e in b.events]
            if any(isinstance(e, Step) and e.step == 1 for e in events) and any(isinstance(e, Note) for e in events):
                seen.set()

    server.publish([encode(HELLO), encode(Step(t=1.5, step=0, wall=0.1, data_wait=0.0)), BAD_SAMPLE,
                    encode(Step(t=2.5, step=1, wall=0.1, data_wait=0.0))])
    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    try:
        assert seen.wait(20), f"got {got}"
    finally:
        source.close()
        server.close()
        reader.join(10)
    events = [e for b in got for e in b.events]
    assert [e.step for e in events if isinstance(e, Step)] == [0, 1]
    (note,) = [e for e in events if isinstance(e, Note)]
    assert note.level == "warn" and note.source == "stream"
    assert note.message == ("dropped 1 malformed event so far "
                            "(last: malformed 'sample' event: procs[0]: missing 'cpu', 'pid', 'role', 'rss')")


def test_a_flood_of_malformed_events_is_said_at_the_first_then_counted() -> None:
    now = [0.0]
    counter = MalformedCounter(clock=lambda: now[0])
    err = SchemaError("not a JSON event line")
    first = counter.drop(err)
    assert first is not None and first.message == "dropped 1 malformed event so far (last: not a JSON event line)"
    assert all(counter.drop(err) is None for _ in range(99))  # within the quiet interval: counted, not said
    now[0] = MALFORMED_REPORT_S
    again = counter.drop(err)
    assert again is not None and again.message.startswith("dropped 101 malformed events so far")
    counter.drop(err)
    end = counter.flush()
    assert end is not None and end.message == "dropped 102 malformed events so far"
    assert counter.flush() is None
