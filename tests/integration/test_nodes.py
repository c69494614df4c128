"""A job over two nodes reads as one job: two torchrun launchers meeting at a c10d rendezvous, and Slurm's tasks.

Each "node" is a network namespace of the test's own where the test may make one
(tests/integration/netns.py), else 127.0.0.1 with PITSTOP_NODE. Ray Train's
workers on two nodes: tests/integration/test_ray.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .conftest import SCRIPTS, kill_group, pitstop
from .netns import Nodes, free_port

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc_per_node", "1",
            "--rdzv_backend", "c10d"]


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    made = Nodes()
    made.open()
    yield made
    made.close()


def _both(commands: list[tuple[list[str], dict[str, str]]], timeout: float = 200) -> list[tuple[int, str]]:
    """Run the two nodes' `pitstop run`s at once (they meet at the rendezvous); (exit code, stderr) each."""
    procs = [subprocess.Popen(c, env=e, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, start_new_session=True) for c, e in commands]
    out = []
    try:
        for proc in procs:
            _, err = proc.communicate(timeout=timeout)
            out.append((proc.returncode, err))
    finally:
        for proc in procs:
            kill_group(proc)
    return out


def _torchrun_nodes(nodes: Nodes, records: list[Path], env: dict[str, str], steps: int,
                    extra: list[str] = ()) -> list[tuple[int, str]]:  # type: ignore[assignment]
    port = free_port()
    commands = []
    for i, record in enumerate(records):
        torchrun = [*TORCHRUN, "--rdzv_endpoint", f"{nodes.address(0)}:{port}", "--rdzv_id", "nodes-test",
                    "--rdzv_conf", f"is_host={int(i == 0)},join_timeout=60", "--local_addr", nodes.address(i),
                    str(SCRIPTS / "ddp_gloo.py"), str(steps)]
        command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", *extra, "--record", str(record), "--",
                   *torchrun]
        commands.append(nodes.launcher(i, command, env))
    return _both(commands)


@pytest.mark.slow
def test_two_torchrun_nodes_read_as_one_job_and_a_slow_node_is_named(
    tmp_path: Path, env: dict[str, str], nodes: Nodes
) -> None:
    env.update(SLOW_RANK="1", STEP_SLEEP_MS="10", LOADER_WORKERS="0")  # no spawned worker: ~3 s of CPU a rank
    records = [tmp_path / "node0", tmp_path / "node1"]
    ends = _torchrun_nodes(nodes, records, env, 100, ["--profile", "10:5:5"])
    for code, err in ends:
        assert code == 0, err[-3000:]
        # each node's own summary: its one rank, and how to read the job
        assert "these are 1 of world size 2 ranks; the others ran on other nodes" in err, err[-3000:]
    assert f"pitstop view {records[0]} OTHER_NODES_RECORDS... --summary" in ends[0][1]
    viewed = pitstop(["view", str(records[0]), str(records[1]), "--summary"], env)
    assert viewed.returncode == 0, viewed.stderr
    text = viewed.stdout
    assert "different runs" not in text
    assert re.search(r"pitstop job summary: ddp_gloo.py \(job torchrun:nodes-test@", text), text[:2000]
    assert "ranks       2 seen of world size 2 (2 finished)" in text
    assert "nodes       2 seen (node-0: rank 0; node-1: rank 1)" in text
    rows = {line.split()[1]: line.split()[3] for line in text.splitlines() if re.match(r"  rank \d  ", line)}
    assert rows == {"0": "node-0", "1": "node-1"}
    assert re.search(r"^  straggler   rank 1: ", text, re.M), text[:2000]
    assert "slow node   node-1: its only rank is a straggler (rank 1)" in text


@pytest.mark.slow
@pytest.mark.parametrize("launch", ["task-per-rank", "launcher-per-node"])
def test_slurm_steps_read_as_one_job_from_one_shared_directory(
    tmp_path: Path, env: dict[str, str], nodes: Nodes, launch: str
) -> None:
    """`srun pitstop run --record /shared/run -- python train.py` and `srun pitstop run -- torchrun ...`:
    Slurm's variables set on two launchers as srun sets them; every rank writes into one directory."""
    shared = tmp_path / "shared-run"
    env["LOADER_WORKERS"] = "0"  # the job's identity is the test's matter, not its DataLoader workers
    port = free_port()
    commands = []
    for i in range(2):
        slurm = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": str(i), "SLURM_NTASKS": "2",
                 "SLURM_NODEID": str(i), "SLURM_LOCALID": "0", "SLURM_JOB_NUM_NODES": "2", "SLURM_NNODES": "2",
                 "SLURM_TASKS_PER_NODE": "1(x2)", "SLURMD_NODENAME": f"gpu-{'ab'[i]}",
                 "MASTER_ADDR": nodes.address(0), "MASTER_PORT": str(port)}
        if launch == "task-per-rank":
            target = [sys.executable, str(SCRIPTS / "slurm_ddp.py"), "30"]
        else:
            target = [*TORCHRUN, "--rdzv_endpoint", f"{nodes.address(0)}:{port}", "--rdzv_id", "4242",
                      "--rdzv_conf", f"is_host={int(i == 0)},join_timeout=60", "--local_addr", nodes.address(i),
                      str(SCRIPTS / "ddp_gloo.py"), "30"]
        command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--record", str(shared), "--", *target]
        launcher, launcher_env = nodes.launcher(i, command, {**env, **slurm})
        launcher_env.pop("PITSTOP_NODE", None)  # Slurm names its nodes
        commands.append((launcher, launcher_env))
    for code, err in _both(commands):
        assert code == 0, err[-3000:]
        assert "1 of world size 2 ranks; the others ran on other nodes" in err, err[-3000:]
    assert sorted(p.name for p in shared.glob("*.jsonl.gz")) == ["rank0.jsonl.gz", "rank1.jsonl.gz"]
    viewed = pitstop(["view", str(shared), "--summary"], env)
    assert viewed.returncode == 0, viewed.stderr
    text = viewed.stdout
    assert "pitstop job summary: ddp_gloo.py (job slurm:4242.0)" in text or \
        "pitstop job summary: slurm_ddp.py (job slurm:4242.0)" in text, text[:2000]
    assert "ranks       2 seen of world size 2 (2 finished)" in text
    assert "nodes       2 seen (gpu-a: rank 0; gpu-b: rank 1)" in text


@pytest.mark.slow
def test_attach_job_finds_every_rank_of_every_node_in_the_jobs_own_store(
    tmp_path: Path, env: dict[str, str]
) -> None:
    """Each rank served with --listen publishes its endpoint in the rendezvous store; `attach --job` reads them."""
    from pitstop.profiling import jobstore

    from .conftest import wait_for

    env["STEP_SLEEP_MS"] = "20"  # ~300 steps of 25 ms or more: the job still runs when the viewer comes
    env["LOADER_WORKERS"] = "0"
    port, token = free_port(), tmp_path / "token"
    listen = [free_port(), free_port()]
    procs = []
    try:
        for i in range(2):
            torchrun = [*TORCHRUN, "--rdzv_endpoint", f"127.0.0.1:{port}", "--rdzv_id", "attach-test",
                        str(SCRIPTS / "ddp_gloo.py"), "300"]
            command = [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--listen", f"127.0.0.1:{listen[i]}",
                       "--token-file", str(token), "--record", str(tmp_path / f"node{i}"), "--", *torchrun]
            procs.append(subprocess.Popen(command, env={**env, "PITSTOP_NODE": f"node-{i}"},
                                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                          stderr=subprocess.DEVNULL, start_new_session=True))

        def both() -> bool:
            try:
                return len(jobstore.discover(f"127.0.0.1:{port}", timeout=2)[1]) == 2
            except Exception:  # noqa: BLE001 - the store is not up yet: torch raises its own errors
                return False

        wait_for(both, timeout=180, what="both ranks published in the rendezvous store")
        attached = pitstop(["attach", "--job", f"127.0.0.1:{port}", "--token-file", str(token), "--headless"], env,
                           timeout=240)
    finally:
        for proc in procs:
            kill_group(proc)
    assert attached.returncode == 0, attached.stderr[-3000:]
    # c10d hands out node ranks in the order the launchers join: either node may hold rank 0, and each
    # node's rank is found at that node's own --listen port.
    found = [f"job at 127.0.0.1:{port}: 2 of world size 2 ranks: rank 0 on node-{a} at 127.0.0.1:{listen[a]}, "
             f"rank 1 on node-{b} at 127.0.0.1:{listen[b]}" for a, b in ((0, 1), (1, 0))]
    assert any(line in attached.stderr for line in found), attached.stderr[-3000:]
    assert re.search(r"step \d+", attached.stderr), attached.stderr[-3000:]
