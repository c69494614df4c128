"""Provides `pitstop stacks PID|RECORD|HOST:PORT`: where every rank of a live or recorded job waits.

The stacks are the ones the agents took at their latest stall (`Stall`
events, with the cause in words, job-wide). A live process with none, or one
whose agent cannot speak (its training thread holds the GIL in native code,
so no thread of it runs), is read now from outside with `py-spy dump`, with
its DataLoader workers; without py-spy that is said, with the fix.
"""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

from pitstop.analysis import JobState, stacks_text, thread_lines
from pitstop.errors import TransportError, UsageError
from pitstop.events import Sample

# A live job's history comes on connect: read until nothing new came for QUIET_S (at most READ_MAX_S).
# The sampler's reading a second is not news: counted as such, every read of a stuck process ran the
# whole READ_MAX_S (18 s a `pitstop stacks PID` at load 9 on 2 cores).
QUIET_S = 1.5
READ_MAX_S = 15.0


def read_live(source: object, quiet_s: float = QUIET_S, max_s: float = READ_MAX_S) -> JobState:
    """The job as its agents' sockets tell it on connect (history), read on a thread until quiet."""
    job = JobState()
    last = [time.monotonic()]
    lock = threading.Lock()
    failure: list[BaseException] = []

    def follow() -> None:
        try:
            for batch in source.batches():  # type: ignore[attr-defined]
                with lock:
                    job.add(batch)
                    if batch.closed or any(not isinstance(e, Sample) for e in batch.events):
                        last[0] = time.monotonic()
        except Exception as err:  # noqa: BLE001 - said by the caller
            failure.append(err)

    thread = threading.Thread(target=follow, name="pitstop-stacks-read", daemon=True)
    thread.start()
    start = time.monotonic()
    while thread.is_alive() and time.monotonic() - start < max_s:
        time.sleep(0.1)
        with lock:
            if job.runs and time.monotonic() - last[0] >= quiet_s:
                break
    source.close()  # type: ignore[attr-defined]
    thread.join(timeout=2.0)
    if failure and not job.runs:
        raise failure[0]
    return job


def now_lines(pid: int, workers: list[int]) -> list[str]:
    """A process's training thread and its workers' stacks, read now from outside (py-spy dump)."""
    from pitstop.profiling import waits

    out: list[str] = []
    for stack in waits.dump(pid, "main", native=True):  # the C call a thread that holds the GIL is in
        out.extend(thread_lines(stack))
    for w in workers:
        for stack in waits.dump(w, "worker"):
            out.extend(thread_lines(stack))
    return out


def cmd_stacks(target: str, token_file: str | None = None, now: bool = False) -> int:
    """`pitstop stacks PID|RECORD|HOST:PORT`."""
    if target.isdigit():
        from pitstop.profiling.sources import SocketSource
        from pitstop.profiling.transport import list_agents

        pid = int(target)
        session = next((a.session for a in list_agents() if a.pid == pid), None)
        if session is None:
            # No agent to ask (not under pitstop, or its agent cannot answer): read it now from outside.
            try:
                lines = now_lines(pid, [])
            except Exception as err:  # noqa: BLE001 - one line
                raise TransportError(f"pid {pid}: {err}") from err
            print(f"pid {pid} has no pitstop agent; its stacks read now (py-spy dump):")
            print("\n".join(f"  {line}" for line in lines))
            return 0
        job = read_live(SocketSource(f"pid {pid}", session=session))
        if not job.runs:
            # Its agent took the connection but said nothing: no thread of it runs (the training thread
            # holds the GIL in native code). Read it now from outside.
            print(f"pid {pid}: its pitstop agent did not answer within {READ_MAX_S:.0f} s (a thread holds the GIL?); "
                  "its stacks read now (py-spy dump):")
            print("\n".join(f"  {line}" for line in now_lines(pid, [])))
            return 0
    elif ":" in target and not Path(target).exists():
        from pitstop.profiling.sources import SocketSource
        from pitstop.profiling.transport import Client, TcpEndpoint, parse_hostport, read_token

        if not token_file:
            raise UsageError("stacks HOST:PORT needs --token-file (the file pitstop run --listen printed)")
        host, port = parse_hostport(target)
        end = TcpEndpoint(host, port, read_token(Path(token_file).expanduser()))
        Client(end).close()
        job = read_live(SocketSource(target, sockets=[end]))
    else:
        from pitstop.recorded import load_runs

        path = Path(target)
        if not path.exists():
            raise UsageError(f"stacks {target!r}: no such record, and not a PID or HOST:PORT")
        runs, _ = load_runs(path)
        print(stacks_text(JobState.of_runs(runs, closed=True), live=False))
        return 0
    print(stacks_text(job, live=True, read_now=now_lines, now=now, host=socket.gethostname()))
    return 0
