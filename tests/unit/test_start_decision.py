"""The bootstrap's start decision: exhaustive cases of who gets the agent."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

import pitstop.profiling.launch as launch


def _load() -> ModuleType:
    # Loaded by path under another name: importing it as `sitecustomize` would run it.
    path = Path(launch.BOOTSTRAP_DIR) / "sitecustomize.py"
    spec = importlib.util.spec_from_file_location("_pitstop_bootstrap_under_test", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    module.__dict__["_pitstop_test"] = True
    import sys

    flag = getattr(sys, "_pitstop_bootstrapped", None)
    sys._pitstop_bootstrapped = True  # type: ignore[attr-defined]  # keep the module-level start off
    try:
        spec.loader.exec_module(module)
    finally:
        if flag is None:
            del sys._pitstop_bootstrapped  # type: ignore[attr-defined]
    return module


boot = _load()
PY = "/usr/bin/python3"
SESSION = {"PITSTOP_SESSION": "{}"}


@pytest.mark.parametrize(
    "argv, env, expected",
    [
        ([PY, "train.py", "--lr", "1"], SESSION, True),
        ([PY, "-u", "train.py"], SESSION, True),
        ([PY, "-X", "dev", "train.py"], SESSION, True),
        ([PY, "-W", "ignore", "train.py"], SESSION, True),
        ([PY, "-m", "mypkg.train", "--x"], SESSION, True),
        ([PY, "-mmypkg.train"], SESSION, True),
        ([PY, "-c", "import torch"], SESSION, True),
        # not under pitstop at all
        ([PY, "train.py"], {}, False),
        ([PY, "train.py"], {"PITSTOP_SESSION": ""}, False),
        # switched off by the user
        ([PY, "train.py"], {**SESSION, "PITSTOP_DISABLE": "1"}, False),
        # launchers
        ([PY, "/venv/bin/torchrun", "--nproc_per_node", "2", "train.py"], SESSION, False),
        ([PY, "-m", "torch.distributed.run", "--nproc_per_node", "2", "train.py"], SESSION, False),
        ([PY, "-m", "torch.distributed.launch", "train.py"], SESSION, False),
        ([PY, "/venv/bin/accelerate", "launch", "train.py"], SESSION, False),
        ([PY, "-m", "accelerate.commands.launch", "train.py"], SESSION, False),
        ([PY, "/venv/bin/deepspeed", "train.py"], SESSION, False),
        ([PY, "/venv/bin/fabric", "run", "--devices", "2", "train.py"], SESSION, False),
        ([PY, "-m", "lightning.fabric.cli", "run", "train.py"], SESSION, False),
        ([PY, "/venv/bin/lightning", "run", "model", "train.py"], SESSION, False),
        # multiprocessing helpers: spawn/forkserver workers, the resource tracker, the forkserver
        ([PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=13)", "--multiprocessing-fork"], SESSION, False),
        ([PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)"], SESSION, False),
        ([PY, "-B", "-c", "from multiprocessing.forkserver import main; main(19, 20, ['__main__'])"], SESSION, False),
        # interactive interpreter: nothing to train
        ([PY], SESSION, False),
        ([PY, "-i"], SESSION, False),
    ],
)
def test_decision(argv: list[str], env: dict[str, str], expected: bool) -> None:
    start, reason = boot.should_start(env, argv, 100)
    assert start is expected, reason
    assert reason


def test_children_of_the_agent_process_never_start() -> None:
    env = {**SESSION, "PITSTOP_OWNER_PID": "100"}
    start, reason = boot.should_start(env, [PY, "train.py"], 200)
    assert not start and "child of the agent process 100" in reason


def test_starting_twice_in_one_process_is_refused() -> None:
    env = {**SESSION, "PITSTOP_OWNER_PID": "100"}
    start, reason = boot.should_start(env, [PY, "train.py"], 100)
    assert not start and "already" in reason


def test_a_script_named_like_a_launcher_but_ending_py_still_starts() -> None:
    start, _ = boot.should_start(SESSION, [PY, "torchrun_example.py"], 1)
    assert start


@pytest.mark.parametrize(
    "extra, argv, expected",
    [
        ({"LOCAL_RANK": "1"}, [PY, "train.py"], True),  # Lightning's DDP launcher re-runs the script as rank 1
        ({"LOCAL_RANK": "1", "PITSTOP_OWNER_LOCAL_RANK": "1"}, [PY, "train.py"], False),  # rank 1's own subprocess
        ({"LOCAL_RANK": "0"}, [PY, "tool.py"], False),  # rank 0 set LOCAL_RANK=0 in its env, then ran a tool
        # ranks of torch's elastic agent run inside a launcher pitstop does not know, rank 0 too
        ({"LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "none"}, [PY, "train.py"], True),
        ({"LOCAL_RANK": "1", "TORCHELASTIC_RUN_ID": "none"}, [PY, "train.py"], True),
        ({"LOCAL_RANK": "0", "TORCHELASTIC_RUN_ID": "none", "PITSTOP_OWNER_LOCAL_RANK": "0"}, [PY, "tool.py"],
         False),  # a torchrun rank's own subprocess
        ({"LOCAL_RANK": "2"}, [PY, "-c", "from multiprocessing.spawn import spawn_main; spawn_main()",
                               "--multiprocessing-fork"], False),  # a spawned DataLoader worker of a rank
        ({}, [PY, "train.py"], False),  # any other child
    ],
)
def test_ranks_a_script_starts_itself_get_their_own_agent(extra: dict[str, str], argv: list[str], expected: bool) -> None:
    env = {**SESSION, "PITSTOP_OWNER_PID": "100", "PITSTOP_OWNER_LOCAL_RANK": "", **extra}
    start, reason = boot.should_start(env, argv, 200)
    assert start is expected, reason


OWNED = {**SESSION, "PITSTOP_OWNER_PID": "100", "PITSTOP_OWNER_LOCAL_RANK": ""}
SPAWN_CHILD = [PY, "-B", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=6, pipe_handle=13)",
               "--multiprocessing-fork"]


@pytest.mark.parametrize(
    "argv, env, action",
    [
        # the main process of a run, and a rank a launcher started: the agent starts
        ([PY, "train.py"], SESSION, "start"),
        ([PY, "-m", "pkg.train"], SESSION, "start"),
        ([PY, "train.py"], {**SESSION, "RANK": "1", "LOCAL_RANK": "1"}, "start"),  # torchrun's rank: no owner
        # a multiprocessing child of the agent process (a hogwild trainer, a DataLoader or Pool
        # worker started with spawn): dormant, started by its first step, so a worker never records
        (SPAWN_CHILD, OWNED, "dormant"),
        ([PY, "-c", "from multiprocessing.spawn import spawn_main; spawn_main()", "--multiprocessing-fork"],
         {**OWNED, "LOCAL_RANK": "1", "PITSTOP_OWNER_LOCAL_RANK": "1"}, "dormant"),  # a rank's spawned child
        # ...but not a spawned child of a process without an agent (a launcher's)
        (SPAWN_CHILD, SESSION, "skip"),
        # a Ray worker of a local cluster the driver (the agent process) started: a RayTrainWorker trains
        ([PY, "-u", "/venv/lib/python3.11/site-packages/ray/_private/workers/default_worker.py",
          "--node-ip-address=127.0.0.1", "--worker-launch-time-ms=1"], OWNED, "dormant"),
        ([PY, "/venv/site-packages/ray/_private/workers/default_worker.py"], SESSION, "skip"),
        # multiprocessing's helpers never: the resource tracker, the forkserver, loky's workers
        ([PY, "-B", "-c", "from multiprocessing.resource_tracker import main;main(5)"], OWNED, "skip"),
        ([PY, "-B", "-c", "from multiprocessing.forkserver import main; main(19, 20, ['__main__'])"], OWNED, "skip"),
        ([PY, "-c", "x", "--multiprocessing-forkserver"], OWNED, "skip"),
        ([PY, "-m", "joblib.externals.loky.backend.popen_loky_posix", "--process-name", "w"], OWNED, "skip"),
        # any other child of the agent process (a subprocess, a `python -c` it runs): not measured
        ([PY, "-c", "import torch"], OWNED, "skip"),
        ([PY, "tool.py"], OWNED, "skip"),
        # launchers, the agent's own process, no session, switched off
        ([PY, "-m", "torch.distributed.run", "train.py"], SESSION, "skip"),
        ([PY, "/venv/bin/torchrun", "train.py"], SESSION, "skip"),
        (SPAWN_CHILD, {**OWNED, "PITSTOP_OWNER_PID": "200"}, "skip"),  # pid 200 is this process
        (SPAWN_CHILD, {**OWNED, "PITSTOP_DISABLE": "yes"}, "skip"),
        (SPAWN_CHILD, {"PITSTOP_OWNER_PID": "100"}, "skip"),
    ],
)
def test_decide_start_dormant_or_skip(argv: list[str], env: dict[str, str], action: str) -> None:
    got, reason = boot.decide(env, argv, 200)
    assert got == action, reason
    assert reason
    assert boot.should_start(env, argv, 200) == (action == "start", reason)
