"""Provides the Hello event an agent starts its record with: the process, its job and rank."""

from __future__ import annotations

import os
import socket
import sys
import time
from typing import Any

from pitstop._version import __version__
from pitstop.events import SCHEMA_VERSION, Hello
from pitstop.profiling import jobenv


def env_int(name: str) -> int | None:
    """The environment variable `name` as an int, else None."""
    try:
        return int(os.environ[name])
    except (KeyError, ValueError):
        return None


def job_identity() -> jobenv.JobIdentity | None:
    """The job this process belongs to, from its launcher's environment (`jobenv`), else None."""
    try:
        return jobenv.identity(os.environ, socket.gethostname())
    except Exception:  # noqa: BLE001 - a job id is never worth a failed start
        return None


def ray_train_identity() -> jobenv.JobIdentity | None:
    """The Ray Train worker this process is, else None."""
    try:
        from pitstop.profiling._ray import train_identity

        return train_identity()
    except Exception:  # noqa: BLE001 - a job id is never worth a failed start
        return None


def job_fields(job: jobenv.JobIdentity | None) -> dict[str, Any]:
    """Hello's job fields (events.Hello: job ... store)."""
    if job is None:
        return {}
    return {"job": job.job, "launcher": job.launcher, "node": job.node, "node_rank": job.node_rank,
            "nodes": job.nodes, "local_world_size": job.local_world_size, "store": job.store}


def make_hello(agent: Any, ranked: tuple[int, int] | None) -> Hello:
    """The run's Hello event for this process (`ranked`: a child's (rank, world size), else None)."""
    script = agent.settings.script or (sys.argv[0] if sys.argv else "")
    job = agent.job
    local_rank = env_int("LOCAL_RANK")
    if local_rank is None and job is not None:
        local_rank = job.local_rank
    world_size = env_int("WORLD_SIZE") or (job.world_size if job is not None else None)
    return Hello(
        schema=SCHEMA_VERSION,
        pitstop_version=__version__,
        session=agent.settings.session,
        pid=agent.pid,
        ppid=os.getppid(),
        host=socket.gethostname(),
        argv=list(getattr(sys, "orig_argv", sys.argv)),
        cwd=os.getcwd(),
        started=time.time(),
        python=sys.version.split()[0],
        mode=agent.settings.mode,
        rank=agent.rank,
        local_rank=local_rank,
        world_size=world_size if ranked is None else ranked[1],
        script=script,
        record=str(agent.record_path),
        command=agent.settings.command,
        command_cwd=agent.settings.command_cwd,
        command_env=agent.settings.command_env,
        parent_pid=agent.parent_pid,
        config=agent.settings.config_path,
        **job_fields(job),
    )
