"""Provides replay_memory.py's job part (a directory of many ranks' records) and its attach part (a day-long live run).

Job: `--job RANKS:HOURS` writes one record per rank (`rank{r}.jsonl.gz`, one
session, ranks 8 to a host), two of them waiting 4 ms a step for data where
the others wait 0.5 ms (a straggler the table names), then indexes every rank
as the keeper does while the run records (not timed as a reader's cost: said
apart). The readers are then measured in fresh processes by replay_memory.py.

Attach: a real AgentServer in this process is fed a day of one process's
lines through `publish`, as the agent's writer feeds it, with a DataLoader
built anew every epoch; then a fresh process opens the viewer on its socket
through the SocketSource `pitstop attach` uses and times its first screen.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from multiprocessing import Pool
from pathlib import Path

from _synthetic import Process, record_events, write_record

from pitstop.events import End, Event, Step
from pitstop.profiling.record import record_lines as agent_lines

STRAGGLE_WAIT = 0.4  # a straggler's data wait, as a share of its ~10 ms step: 4 ms
EPOCH_STEPS = 20_000  # the attach part's script builds an eval DataLoader every epoch (200 s of steps)
PUBLISH_EVENTS = 64  # events per publish: the agent's writer sends what its queue held, ~50 steps at 10 ms steps


def parse_job(text: str) -> tuple[int, float]:
    """"64:1" -> (64 ranks, 1.0 hour)."""
    ranks, _, hours = text.partition(":")
    try:
        n, h = int(ranks), float(hours or "1")
    except ValueError as err:
        raise SystemExit(f"--job {text!r}: give RANKS:HOURS, e.g. 64:1") from err
    if n < 1 or h <= 0:
        raise SystemExit(f"--job {text!r}: at least one rank and a positive length")
    return n, h


def stragglers_of(ranks: int) -> tuple[int, ...]:
    """The ranks that wait longer for data: two in a big job, one in a small one, none alone."""
    if ranks < 2:
        return ()
    return (ranks // 3, 2 * ranks // 3 + 1) if ranks >= 8 else (ranks - 1,)


def _write_rank(args: tuple[Path, int, int, float, int]) -> int:
    directory, rank, world, hours, nodes = args
    slow = STRAGGLE_WAIT if rank in stragglers_of(world) else 0.05
    if nodes <= 1:
        path = directory / f"rank{rank}.jsonl.gz"
        who = Process(session="bench-job", pid=10_000 + 10 * rank, rank=rank, world_size=world,
                      host=f"node{rank // 8}", data_wait=slow)
    else:  # a launcher per node, each under its own `pitstop run` (a session each), one directory per node
        per = world // nodes
        node = rank // per
        path = directory / f"node{node}" / f"rank{rank}.jsonl.gz"
        path.parent.mkdir(parents=True, exist_ok=True)
        who = Process(session=f"bench-job-node{node}", pid=10_000 + 10 * rank, rank=rank, world_size=world,
                      host=f"node{node}", data_wait=slow, job="torchrun:bench@node0:29400", node_rank=node,
                      nodes=nodes, local_world_size=per)
    return write_record(path, record_events(who, hours, str(path)))


def job_paths(directory: Path) -> Path | list[Path]:
    """What `pitstop view` is given: the job's directory, or each node's (`node{n}/`) when it has them."""
    nodes = sorted((p for p in directory.glob("node*") if p.is_dir()), key=lambda p: int(p.name[4:]))
    return nodes or directory


def _index_rank(path: Path) -> float:
    from pitstop.recorded import index_file

    began = time.process_time()
    index_file(path)
    return time.process_time() - began


def write_job(directory: Path, ranks: int, hours: float, nodes: int = 1) -> tuple[int, float]:
    """Write the job's records, a process per core; (lines, seconds). `nodes` > 1: a directory per node."""
    began = time.perf_counter()
    with Pool(os.cpu_count() or 1) as pool:
        lines = sum(pool.map(_write_rank, [(directory, r, ranks, hours, nodes) for r in range(ranks)]))
    return lines, time.perf_counter() - began


def index_job(directory: Path) -> tuple[float, float]:
    """Index every rank as the keeper does while the run records, a process per core; (wall s, CPU s summed)."""
    began = time.perf_counter()
    with Pool(os.cpu_count() or 1) as pool:
        cpu = sum(pool.map(_index_rank, sorted(directory.glob("**/rank*.jsonl.gz"))))
    return time.perf_counter() - began, cpu


# -- attach: the agent's server fed a day, a viewer connecting ---------------------------
def serve_day(hours: float) -> tuple[object, dict[str, object]]:
    """An AgentServer fed `hours` of one process's lines; (the server, what it took and holds)."""
    os.environ["PITSTOP_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="pst-bench-")  # not among the user's agents
    from pitstop.profiling.transport import AgentServer

    server = AgentServer(lambda cmd: "ok", {"pid": os.getpid(), "session": "bench-attach", "script": "train.py"})
    who = Process(session="bench-attach", pid=os.getpid(), loader_every=EPOCH_STEPS)
    rss0 = _rss_mib()
    began, cpu0 = time.perf_counter(), time.process_time()
    lines = 0
    batch: list[Event] = []
    steps = -1
    for event in record_events(who, hours):
        if type(event) is End:
            break  # the run goes on: the viewer attaches to a live process
        batch.append(event)
        if type(event) is Step:
            steps += 1
        if len(batch) >= PUBLISH_EVENTS:  # what the agent's writer publishes: its record's lines
            published = agent_lines(batch)
            server.publish(published)
            lines += len(published)
            batch = []
    published = agent_lines(batch)
    server.publish(published)
    lines += len(published)
    replay = server.replay_size()  # type: ignore[attr-defined]
    return server, {"lines": lines, "last_step": steps, "publish_s": time.perf_counter() - began,
                    "publish_cpu_s": time.process_time() - cpu0, "rss_before_mib": rss0, "rss_after_mib": _rss_mib(),
                    "replay_lines": replay[0], "replay_bytes": replay[1], "socket": str(server.path)}  # type: ignore[attr-defined]


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


async def attach_viewer(socket_path: Path, last_step: int) -> dict[str, object]:
    """`pitstop attach`'s viewer on one agent socket, headless: time to the screen showing the run's last step."""
    began = time.perf_counter()
    from pitstop.profiling.sources import SocketSource
    from pitstop.tui.app import PitstopApp

    app = PitstopApp(SocketSource("bench", sockets=[socket_path]))
    async with app.run_test(size=(120, 40)) as pilot:
        while True:
            run = app.job.primary()
            if run is not None and run.last_step == last_step:
                break
            if app.failed is not None:
                raise SystemExit(f"viewer failed: {app.failed}")
            await pilot.pause(0.02)
        app.refresh_views()
        await pilot.pause()
        first = time.perf_counter() - began
        out = {"first_screen_s": first, "steps_held": len(run.steps), "total_steps": run.total_steps,
               "device": run.device_type, "loaders": len(run.dataloaders),
               "train_loader": run.training_loader() is not None}
    with open("/proc/self/status") as status:  # VmHWM: ru_maxrss carries the forking parent's peak across exec
        out["peak_rss_mib"] = next(int(line.split()[1]) for line in status if line.startswith("VmHWM:")) / 1024.0
    return out


def run_attach_viewer(socket_path: Path, last_step: int) -> dict[str, object]:
    return asyncio.run(attach_viewer(socket_path, last_step))
