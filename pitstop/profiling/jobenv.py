"""Provides a process's job identity, read from what its launcher put in its environment.

A job over many nodes is started by one launcher per node (torchrun's elastic
agents meeting at a rendezvous, Slurm's `srun` tasks, Ray Train's workers), and
each node's `pitstop run` is a separate front with its own session id. What the
ranks of one job share is what their launcher gave them: torchrun's run id and
rendezvous store address, Slurm's job and step ids, Ray Train's run. That is the
job id every record carries (`Hello.job`), so records written on different
nodes read as one job; nothing of pitstop's own is registered anywhere.

Standard library only, and pure (`identity(env, host)`): the agent calls it at
start, the front calls it before launching, the tests call it with made-up
environments. Ray Train's identity is not in the environment (its context is
an object inside the worker): `ray_identity` builds one from its figures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

# A node's name where the host name does not tell nodes apart (two "nodes" on one test host,
# containers that all call themselves "localhost"): set it on each node's launcher.
NODE_ENV = "PITSTOP_NODE"


@dataclass(frozen=True)
class JobIdentity:
    """Who a process is in a job that may span nodes; every field as its launcher said it."""

    job: str  # "slurm:4242.0", "torchrun:<run id>@10.0.0.1:29400", "ray:<run name>"
    launcher: str  # "slurm" | "torchrun" | "ray"
    node: str  # the node's name: PITSTOP_NODE, SLURMD_NODENAME, else the host name
    node_rank: int | None = None  # GROUP_RANK (torchrun), SLURM_NODEID, Ray's node rank
    nodes: int | None = None  # nodes in the job: GROUP_WORLD_SIZE, SLURM_JOB_NUM_NODES
    rank: int | None = None  # the process's global rank where the launcher says it
    world_size: int | None = None
    local_rank: int | None = None
    local_world_size: int | None = None  # ranks per node: LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE
    store: str | None = None  # "host:port" of the job's own key-value store (torchrun's rendezvous)


def _int(env: Mapping[str, str], name: str) -> int | None:
    try:
        return int(env[name])
    except (KeyError, ValueError):
        return None


def _tasks_per_node(env: Mapping[str, str]) -> int | None:
    """SLURM_NTASKS_PER_NODE, or SLURM_TASKS_PER_NODE when every node runs as many ("4(x2)")."""
    fixed = _int(env, "SLURM_NTASKS_PER_NODE")
    if fixed is not None:
        return fixed
    per = env.get("SLURM_TASKS_PER_NODE", "")
    head = per.split("(")[0]
    if head.isdigit() and "," not in per:
        return int(head)
    return None


def node_name(env: Mapping[str, str], host: str) -> str:
    """The node's name: PITSTOP_NODE, Slurm's name for it, else the host name."""
    return env.get(NODE_ENV) or env.get("SLURMD_NODENAME") or host


def identity(env: Mapping[str, str], host: str) -> JobIdentity | None:
    """The job this process belongs to, from its launcher's variables; None outside a job launcher.

    Slurm wins where both are set (`srun pitstop run -- torchrun ...`): its job and step
    ids are the same on every node, while torchrun's run id defaults to "none". The ranks
    are torchrun's there (RANK); under `srun python train.py` (a task per rank) each task's
    SLURM_PROCID is its rank and SLURM_NTASKS the world size.
    """
    node = node_name(env, host)
    torchrun = "TORCHELASTIC_RUN_ID" in env
    store = None
    if env.get("MASTER_ADDR") and env.get("MASTER_PORT"):
        store = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}"
    rank, world = _int(env, "RANK"), _int(env, "WORLD_SIZE")
    local_rank, local_world = _int(env, "LOCAL_RANK"), _int(env, "LOCAL_WORLD_SIZE")
    if env.get("SLURM_JOB_ID"):
        step = env.get("SLURM_STEP_ID")
        job = f"slurm:{env['SLURM_JOB_ID']}" + (f".{step}" if step else "")
        nodes = _int(env, "SLURM_JOB_NUM_NODES") or _int(env, "SLURM_NNODES")
        if torchrun or rank is not None:  # a launcher per node: the ranks are the launcher's
            return JobIdentity(job, "slurm", node, _int(env, "GROUP_RANK") if torchrun else _int(env, "SLURM_NODEID"),
                               _int(env, "GROUP_WORLD_SIZE") or nodes, rank, world, local_rank, local_world, store)
        return JobIdentity(job, "slurm", node, _int(env, "SLURM_NODEID"), nodes, _int(env, "SLURM_PROCID"),
                           _int(env, "SLURM_NTASKS"), _int(env, "SLURM_LOCALID"), _tasks_per_node(env), store)
    if torchrun:
        run_id = env.get("TORCHELASTIC_RUN_ID") or "none"
        return JobIdentity(f"torchrun:{run_id}@{store or '?'}", "torchrun", node, _int(env, "GROUP_RANK"),
                           _int(env, "GROUP_WORLD_SIZE"), rank, world, local_rank, local_world, store)
    return None


def ray_identity(run: str, node: str, rank: int, world_size: int, local_rank: int | None,
                 local_world_size: int | None, node_rank: int | None) -> JobIdentity:
    """A Ray Train worker's identity, from its train context (`ray.train.get_context()`)."""
    nodes = None
    if local_world_size and world_size % local_world_size == 0:
        nodes = world_size // local_world_size
    return JobIdentity(f"ray:{run}", "ray", node, node_rank, nodes, rank, world_size, local_rank, local_world_size)


def multi_node(env: Mapping[str, str], command: list[str]) -> bool:
    """Whether the front `pitstop run` is one of several fronts of one job: a Slurm step of several
    tasks, or a launcher told of several nodes (`torchrun --nnodes 2`). Their records may share a
    directory: each process writes its own rank's file."""
    if env.get("SLURM_JOB_ID") and ((_int(env, "SLURM_NTASKS") or 1) > 1 or (_int(env, "SLURM_NNODES") or 1) > 1):
        return True
    for i, arg in enumerate(command):
        value = None
        if arg in ("--nnodes", "--num_machines", "--num-machines"):
            value = command[i + 1] if i + 1 < len(command) else None
        elif arg.startswith(("--nnodes=", "--num_machines=", "--num-machines=")):
            value = arg.split("=", 1)[1]
        if value is not None:
            top = value.split(":")[-1]
            if not top.isdigit() or int(top) > 1:
                return True
    return False
