"""Provides live discovery through the job's own store: each rank publishes its viewer endpoint there.

A job over several nodes already has a key-value store every rank can reach:
torch.distributed's TCPStore at MASTER_ADDR:MASTER_PORT, and torchrun's c10d
rendezvous store at its `--rdzv_endpoint`. A rank served over TCP
(`pitstop run --listen`) sets one key per rank there, `pitstop/rank/<r>`, with
where its viewer endpoint is and which node it runs on, and `pitstop/world`;
`pitstop attach --job HOST:PORT` reads them back and opens every rank on every
node (each still asks for the token). Nothing of pitstop's own is registered.

The training comes first: the publishing runs on a daemon thread, only once the
script itself imported torch.distributed (the agent never imports it), with a
short connect timeout, once per store, and any failure is one Note.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

PREFIX = "pitstop/"
CONNECT_TIMEOUT_S = 5.0
# How long the thread waits for the script to import torch.distributed: a job that does not within
# 10 minutes (a long data preparation) is not published; its ranks stay reachable by HOST:PORT.
WAIT_FOR_TORCH_S = 600.0
POLL_S = 1.0
LAUNCHER_OPTIONS = ("--rdzv_endpoint", "--rdzv-endpoint")


@dataclass(frozen=True)
class RankEndpoint:
    """Where one rank's viewer endpoint is, as the rank published it."""

    rank: int
    host: str
    port: int
    node: str | None
    pid: int | None


def parse_store(text: str) -> tuple[str, int]:
    """"HOST:PORT" (an IPv6 host in brackets) -> (host, port)."""
    host, _, port = text.rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise ValueError(f"{text!r}: give the job's store as HOST:PORT")
    return host, int(port)


def rendezvous_endpoint(argv: list[str]) -> str | None:
    """The c10d rendezvous endpoint in a torchrun command line ("node0:29400"), None without one."""
    for i, arg in enumerate(argv):
        for option in LAUNCHER_OPTIONS:
            if arg == option and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(option + "="):
                return arg.split("=", 1)[1]
    return None


def _launcher_argv(ppid: int) -> list[str]:
    """The parent's command line (torchrun's, for a rank it started); [] where unreadable."""
    try:
        return [a.decode(errors="replace") for a in Path(f"/proc/{ppid}/cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []


def stores_of(store: str | None, ppid: int) -> list[str]:
    """The stores a rank publishes in: its MASTER_ADDR:MASTER_PORT, and its launcher's rendezvous endpoint."""
    out = [store] if store else []
    endpoint = rendezvous_endpoint(_launcher_argv(ppid))
    if endpoint and ":" in endpoint and endpoint not in out:
        out.append(endpoint)
    return out


def advertised_host(listen_host: str, store_host: str) -> str:
    """The address other nodes reach this rank at: the --listen host, or for a wildcard (0.0.0.0, ::) the
    local address of the route to the store (the interface the job itself talks over)."""
    if listen_host not in ("", "0.0.0.0", "::"):
        return listen_host
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((store_host, 9))  # no packet is sent: only the route is chosen
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def _client(dist: Any, host: str, port: int) -> Any:
    return dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=CONNECT_TIMEOUT_S),
                         wait_for_workers=False)


def publish(dist: Any, store: str, rank: int, world_size: int | None, listen: tuple[str, int], node: str | None,
            pid: int) -> str:
    """Set this rank's key in `store`; the endpoint published ("10.0.0.2:7071")."""
    host, port = parse_store(store)
    client = _client(dist, host, port)
    where = advertised_host(listen[0], host)
    value = {"host": where, "port": listen[1], "node": node, "pid": pid}
    client.set(f"{PREFIX}rank/{rank}", json.dumps(value))
    if world_size is not None:
        client.set(f"{PREFIX}world", str(world_size))
    return f"{where}:{listen[1]}"


def start(agent: Any, listen: tuple[str, int]) -> None:
    """Publish this rank's `listen` endpoint in its job's stores, from a daemon thread (never the training's)."""
    hello = agent.hello
    if hello is None or hello.rank is None:
        return
    stores = stores_of(hello.store, hello.ppid)
    if not stores:
        return

    def run() -> None:
        deadline = time.monotonic() + WAIT_FOR_TORCH_S
        dist = sys.modules.get("torch.distributed")
        while (dist is None or not hasattr(dist, "TCPStore")) and time.monotonic() < deadline:
            time.sleep(POLL_S)
            dist = sys.modules.get("torch.distributed")
        if dist is None or not hasattr(dist, "TCPStore"):
            return
        for store in stores:
            try:
                where = publish(dist, store, hello.rank, hello.world_size, listen, hello.node, hello.pid)
            except Exception as err:  # noqa: BLE001 - discovery is a convenience; the endpoint still serves
                agent.note("info", "jobstore", f"viewer endpoint not published in the job's store {store}: {err}")
            else:
                agent.note("info", "jobstore", f"viewer endpoint {where} published in the job's store {store}: "
                                               f"pitstop attach --job {store} finds every rank")

    threading.Thread(target=run, name="pitstop-jobstore", daemon=True).start()


def discover(store: str, timeout: float = CONNECT_TIMEOUT_S) -> tuple[int | None, list[RankEndpoint]]:
    """(world size, every rank's endpoint) read from the job's store at `store` ("HOST:PORT").

    Raises OSError (one line) when the store cannot be reached. Imports torch.distributed:
    a viewer's process, never a training one.
    """
    import torch.distributed as dist

    host, port = parse_store(store)
    try:
        client = dist.TCPStore(host, port, is_master=False, timeout=timedelta(seconds=timeout),
                               wait_for_workers=False)
    except Exception as err:  # noqa: BLE001 - torch raises DistNetworkError, RuntimeError, TimeoutError
        raise OSError(f"cannot reach the job's store at {store}: {str(err).splitlines()[0]}") from err
    try:
        world = None
        if client.check([f"{PREFIX}world"]):
            world = int(client.get(f"{PREFIX}world"))
        found = []
        for rank in range(world or 0):
            key = f"{PREFIX}rank/{rank}"
            if not client.check([key]):
                continue
            value = json.loads(client.get(key))
            found.append(RankEndpoint(rank, str(value["host"]), int(value["port"]), value.get("node"),
                                      value.get("pid")))
    except (RuntimeError, ValueError, KeyError) as err:  # the store went away (the job ended), or a foreign key
        raise OSError(f"cannot read the job's store at {store}: {str(err).splitlines()[0]}") from err
    return world, found
