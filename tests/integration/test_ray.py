"""Ray Train's workers are the ranks of one job, on a real Ray cluster: one `ray.init()` starts, and two "nodes".

The two nodes are network namespaces of the test's own where it may make them
(tests/integration/netns.py): the head's raylet in one, a worker node's raylet
in the other, started beforehand with `ray start` as on two machines, and the
driver under `pitstop run` beside the head; each node has 1 CPU, so a
TorchTrainer of two 1-CPU workers puts one on each node. Where no namespace can
be made, one raylet on this host stands for the other node (PITSTOP_NODE).
The cluster is shared by the tests that use it (module-scoped) and run on one
pytest-xdist worker ("ray"); what it started is killed when the module ends.

Skipped, saying why, where ray[train] is not installed: `./dev.sh setup`
installs it beside the test extra, and where it cannot (no wheel for this
Python or platform) writes pip's reason to `.pitstop-no-ray` in the venv.
"""

from __future__ import annotations

import importlib.util
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from pitstop.events import Hello

from .conftest import SCRIPTS, events_of, pitstop, run_group
from .netns import Nodes, free_port

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("ray")]

RUN = "pitstop-ray-test"  # the RunConfig name in scripts/ray_train.py

# Ray settings of the tests' own clusters, none of which pitstop reads. Each Ray process costs ~3 s of CPU
# (it imports ray.train: pandas, ray.data), and a TorchTrainer run started 8 of them beside its 2 workers
# (measured 2026-11-28 by process, load 9-12): the raylet's workers prestarted for the first driver
# (`ray::IDLE`, 0.9 s each, never used: every actor got a process of its own, and Ray killed them idle)
# and Ray Train's PreemptionWatcher actor (3.0 s a run) are not needed by a test cluster never preempted.
# Ray's metrics off as well (RAY_TRAIN_METRICS_ENABLED, RAY_enable_metrics_collection) saved nothing
# measurable (166 and 175 s of CPU for this file against 163 s), so they stay on.
LEAN = {"RAY_prestart_worker_first_driver": "0", "RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


def _no_ray() -> str | None:
    """Why the Ray tests cannot run here, else None (without importing ray: collection stays cheap)."""
    if importlib.util.find_spec("ray") is not None:
        return None
    reason = Path(sys.prefix, ".pitstop-no-ray")
    if reason.exists():
        return f"ray[train] could not be installed here by ./dev.sh setup: {reason.read_text().strip()[-400:]}"
    return "ray[train] is not installed (./dev.sh setup installs it; or pip install 'ray[train]')"


def _skip_without_ray() -> None:
    why = _no_ray()
    if why is not None:
        pytest.skip(why)


def _script_steps(stdout: str) -> dict[int, int]:
    """pid -> steps, as each worker of scripts/ray_train.py counted them (Ray prints a worker's line to the driver)."""
    return {int(pid): int(steps) for pid, steps in re.findall(r"worker \d pid (\d+) done: (\d+) steps", stdout)}


def _rows(summary: str) -> dict[int, tuple[str, int]]:
    """pid -> (node, steps) from a job block's rank table ("  rank 0  2422  node-0  finished  64 ...")."""
    rows = re.findall(r"^  rank \d+\s+(\d+)\s+(\S+)\s+finished\s+(\d+)", summary, re.M)
    return {int(pid): (node, int(steps)) for pid, node, steps in rows}


def _pid(record: Path) -> int:
    hello = next(e for e in events_of(record) if isinstance(e, Hello))
    return hello.pid


def _driver_counts(summary: str) -> dict[int, int]:
    """pid -> steps from "its 2 Ray Train workers did: 12658 (64 steps), 12686 (64 steps)"."""
    line = re.search(r"its 2 Ray Train workers did: (.*)", summary)
    assert line is not None, summary[-3000:]
    return {int(pid): int(steps) for pid, steps in re.findall(r"(\d+) \((\d+) steps\)", line.group(1))}


@dataclass
class Cluster:
    """A Ray cluster started beforehand: its head's address, its nodes, what its drivers need in their env."""

    address: str
    nodes: Nodes
    env: dict[str, str]
    home: Path
    starts: list[subprocess.Popen[str]] = field(default_factory=list)
    temp_dirs: list[Path] = field(default_factory=list)

    def close(self) -> None:
        # `ray start` leaves its daemons (gcs_server, raylet, workers) in the process group it was started in:
        # killing those groups ends this cluster and no other (`ray stop` would end every Ray on the host).
        for proc in self.starts:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.nodes.close()
        for path in self.temp_dirs:
            shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    _skip_without_ray()
    root = tmp_path_factory.mktemp("ray-cluster")
    home = root / "home"  # ~/ray_results (Ray's default storage path) and ~/.ray: the test's own
    home.mkdir()
    nodes = Nodes(subnet="10.203.78")
    nodes.open()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_") and k != "PYTHONPATH"}
    # `ray start --head` turns on token authentication where a token exists (~/.ray/auth_token, which any
    # earlier `ray.init()` leaves), and a node joining without it was refused ("InvalidAuthToken"): every
    # node and driver here gets one mode and one token, as Ray's docs ("Token authentication") ask of a cluster.
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="token",
               RAY_AUTH_TOKEN=secrets.token_hex(32), **LEAN)
    made = Cluster(f"{nodes.address(0)}:{port}", nodes, env, home)
    ray = str(Path(sys.executable).parent / "ray")
    try:
        # On one host the cluster's one raylet (2 CPUs) stands for node-1, the driver's being node-0.
        for i in (0, 1) if nodes.isolated else (1,):
            temp = Path(f"/tmp/pstray{os.getpid() % 100000}-{i}")  # short: Ray's socket paths hold 107 bytes
            made.temp_dirs.append(temp)
            # --no-monitor: no autoscaler (1.2 s of CPU) for a cluster of fixed nodes
            start = [ray, "start", "--head", f"--port={port}", "--include-dashboard=false", "--no-monitor"] \
                if i == 0 or not nodes.isolated else [ray, "start", f"--address={made.address}"]
            start += [f"--num-cpus={1 if nodes.isolated else 2}", "--object-store-memory=100000000",
                      "--disable-usage-stats", f"--temp-dir={temp}"]
            if nodes.isolated:
                start.append(f"--node-ip-address={nodes.address(i)}")
            command, node_env = nodes.launcher(i, start, env)
            proc = subprocess.Popen(command, env=node_env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, start_new_session=True)
            made.starts.append(proc)
            out, _ = proc.communicate(timeout=180)
            assert proc.returncode == 0, f"`ray start` on node-{i} failed:\n{out[-3000:]}"
        yield made
    finally:
        made.close()


def _drive(cluster: Cluster, env: dict[str, str], record: Path,
           storage: Path | None) -> subprocess.CompletedProcess[str]:
    """`pitstop run -- python ray_train.py 16 1 auto` on node-0 (beside the head), joining the cluster."""
    env = {**env, **{k: cluster.env[k] for k in ("HOME", "RAY_USAGE_STATS_ENABLED", "RAY_AUTH_MODE",
                                                  "RAY_AUTH_TOKEN", *LEAN)}, "RAY_ADDRESS": cluster.address}
    env.pop("RAY_STORAGE", None)
    if storage is not None:
        env["RAY_STORAGE"] = str(storage)
    command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--record", str(record), "--",
               sys.executable, str(SCRIPTS / "ray_train.py"), "16", "1", "auto"]
    return run_group(*cluster.nodes.launcher(0, command, env), timeout=300)


def test_ray_train_workers_are_the_ranks_of_one_job_and_the_driver_says_it_does_not_train(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """TorchTrainer over 2 CPU workers on a local cluster `ray.init()` starts from the driver under `pitstop run`."""
    _skip_without_ray()
    env.update(RAY_STORAGE=str(tmp_path / "ray_results"), RAY_USAGE_STATS_ENABLED="0", **LEAN)
    record = tmp_path / "ray-run"
    result = pitstop(["run", "--headless", "--record", str(record), "--", sys.executable,
                      str(SCRIPTS / "ray_train.py"), "32", "2"], env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stderr
    counted = _script_steps(result.stdout)
    assert sorted(counted.values()) == [64, 64], result.stdout[-3000:]  # 2 epochs of 32 steps on each worker
    assert "different runs" not in text, text[-3000:]
    assert "pitstop job summary: ray_train.py (job ray:pitstop-ray-test)" in text, text[-3000:]
    assert "ranks       2 seen of world size 2 (2 finished)" in text, text[-3000:]
    assert re.search(r"driver      pid \d+, Ray Train's driver: it does not train; its 2 Ray Train workers did", text)
    assert _driver_counts(text) == counted, text[-3000:]
    assert "findings: none (Ray Train's driver does not train; its workers did" in text
    viewed = pitstop(["view", str(record), "--summary"], env)
    assert "ranks       2 seen of world size 2 (2 finished)" in viewed.stdout, viewed.stdout[:3000]
    assert {pid: steps for pid, (_, steps) in _rows(viewed.stdout).items()} == counted, viewed.stdout[:3000]
    # RunConfig(storage_path=...) set: the workers' records are under it, and the driver's summary says where.
    under = sorted((tmp_path / "ray_results" / RUN / "pitstop").glob("*/rank*.jsonl.gz"))
    assert [p.name for p in under] == ["rank0.jsonl.gz", "rank1.jsonl.gz"], under
    assert f"records     the workers' under the run's storage path: {under[0].parent}" in text, text[-3000:]
    assert not list(record.glob("rank1*")), list(record.iterdir())  # nothing beside the driver's record


def test_ray_train_on_two_nodes_reads_as_one_job_with_a_worker_on_each_node(
    cluster: Cluster, tmp_path: Path, env: dict[str, str]
) -> None:
    """A cluster started beforehand (`ray start` on each node): the workers get the agent through the job's
    runtime_env, write under `RunConfig(storage_path=...)`, a directory both nodes see, and the driver's
    summary is the job across both nodes."""
    storage, record = tmp_path / "shared", tmp_path / "ray-run"
    result = _drive(cluster, env, record, storage)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stderr
    counted = _script_steps(result.stdout)
    assert sorted(counted.values()) == [16, 16], result.stdout[-3000:]  # 1 epoch of 16 steps on each worker
    assert "pitstop job summary: ray_train.py (job ray:pitstop-ray-test)" in text, text[-3000:]
    assert "different runs" not in text, text[-3000:]
    assert "ranks       2 seen of world size 2 (2 finished)" in text, text[-3000:]
    assert _driver_counts(text) == counted, text[-3000:]
    rows = _rows(text)
    assert {pid: steps for pid, (_, steps) in rows.items()} == counted, text[-3000:]
    if cluster.nodes.isolated:  # one worker on each node, each named by its own host name
        assert sorted(node for node, _ in rows.values()) == ["node-0", "node-1"], text[-3000:]
        # Ray gives world rank 0 to either node's worker: the nodes row lists them in rank order
        by_rank = sorted(re.findall(r"^  rank (\d+)\s+\d+\s+(node-[01])\s+finished", text, re.M))
        said = "; ".join(f"{node}: rank {rank}" for rank, node in by_rank)
        assert f"\n  nodes       2 seen ({said})\n" in text, text[-3000:]
    else:
        assert sorted(node for node, _ in rows.values()) == ["node-1", "node-1"], text[-3000:]
    under = sorted((storage / RUN / "pitstop").glob("*/rank*.jsonl.gz"))
    assert [p.name for p in under] == ["rank0.jsonl.gz", "rank1.jsonl.gz"], under
    assert f"records     the workers' under the run's storage path: {under[0].parent}" in text, text[-3000:]
    viewed = pitstop(["view", str(record), "--summary"], env)
    assert "ranks       2 seen of world size 2 (2 finished)" in viewed.stdout, viewed.stdout[:3000]
    assert _rows(viewed.stdout) == rows, viewed.stdout[:3000]


def test_ray_train_with_rays_default_storage_keeps_each_record_on_a_node_the_driver_reads(
    cluster: Cluster, tmp_path: Path, env: dict[str, str]
) -> None:
    """Ray's default storage path (~/ray_results, here a home both nodes see): the worker on the driver's node
    writes beside the driver's record, the one on the other node under the storage path, and `pitstop view`
    of the driver's record reads both."""
    record = tmp_path / "ray-run"
    result = _drive(cluster, env, record, None)
    assert result.returncode == 0, result.stderr[-3000:]
    text = result.stderr
    counted = _script_steps(result.stdout)
    assert sorted(counted.values()) == [16, 16], result.stdout[-3000:]
    assert "ranks       2 seen of world size 2 (2 finished)" in text, text[-3000:]
    under = cluster.home / "ray_results" / RUN / "pitstop"
    assert re.search(rf"records     the workers' under the run's storage path: {re.escape(str(under))}/\S+", text)
    rows = _rows(text)
    # the workers' records by pid: under the storage path, and beside the driver's (which took rank0.jsonl.gz)
    elsewhere = {_pid(p) for p in under.glob("*/rank*.jsonl.gz")}
    beside = {_pid(p) for p in record.glob("rank*.jsonl.gz") if p.name != "rank0.jsonl.gz"}
    if cluster.nodes.isolated:  # node-1's worker under the storage path, node-0's beside the driver's record
        assert elsewhere == {pid for pid, (node, _) in rows.items() if node == "node-1"}, (rows, elsewhere)
        assert beside == {pid for pid, (node, _) in rows.items() if node == "node-0"}, (rows, beside)
        assert len(elsewhere) == len(beside) == 1, (elsewhere, beside)
    else:  # both workers on the other "node"
        assert elsewhere == set(rows) and not beside, (rows, elsewhere, beside)
    viewed = pitstop(["view", str(record), "--summary"], env)
    assert _rows(viewed.stdout) == rows, viewed.stdout[:3000]
    assert {pid: steps for pid, (_, steps) in rows.items()} == counted, viewed.stdout[:3000]
