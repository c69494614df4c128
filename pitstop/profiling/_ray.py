"""Provides a Ray Train worker's job identity, from Ray's own train context (`ray.train.get_context()`).

A RayTrainWorker is a Ray worker process (dormant until its first step, like
any child of the driver's agent: sitecustomize.RAY_WORKER); at that step the
train function runs, so Ray's train context says which run this is, the
worker's world rank and its node rank. Read only where the worker already
imported ray.train: the agent never imports Ray.
"""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

from pitstop.profiling.jobenv import JobIdentity, node_name, ray_identity

# The driver's node, given to its Ray workers (`_raydriver.worker_env_vars`): a worker on another
# node cannot write beside the driver's record, whose directory is on the driver's node.
DRIVER_NODE_ENV = "PITSTOP_RAY_DRIVER_NODE"


def _call(context: object, name: str) -> object:
    method = getattr(context, name, None)
    return method() if callable(method) else None


def train_identity() -> JobIdentity | None:
    """This process's identity as a Ray Train worker; None outside one (or where Ray's context cannot tell)."""
    train = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        context = train.get_context()
        rank, world = _call(context, "get_world_rank"), _call(context, "get_world_size")
        if not isinstance(rank, int) or not isinstance(world, int):
            return None
        run = _call(context, "get_experiment_name") or _call(context, "get_run_name") or "run"
        local, per_node = _call(context, "get_local_rank"), _call(context, "get_local_world_size")
        node_rank = _call(context, "get_node_rank")
    except Exception:  # noqa: BLE001 - not a train worker, or a Ray whose context differs: no identity
        return None
    return ray_identity(str(run), node_name(os.environ, socket.gethostname()), rank, world,
                        local if isinstance(local, int) else None, per_node if isinstance(per_node, int) else None,
                        node_rank if isinstance(node_rank, int) else None)


def record_dir(storage: str, experiment: str, session: str) -> str | None:
    """Where a Ray Train run's workers write their records under its storage path; None where the storage
    is not a filesystem path (`s3://...`: each node would write its own, unseen, copy)."""
    if "://" in storage and not storage.startswith("file://"):
        return None
    root = storage[len("file://"):] if storage.startswith("file://") else storage
    return str(Path(os.path.abspath(os.path.expanduser(root))) / experiment / "pitstop" / session)


def worker_record_base(storage: str | None, default_storage: str | None, experiment: str, session: str,
                       node: str, driver_node: str | None) -> str | None:
    """The record base of a Ray Train worker that writes under the run's storage path, else None (beside the driver's).

    Under storage: a storage path the user set (`RunConfig(storage_path=...)`: on
    several nodes it is the filesystem they share), or a worker on another node than
    the driver (the driver's record directory is on the driver's node).
    """
    if not storage:
        return None
    chosen = default_storage is None or os.path.normpath(storage) != os.path.normpath(default_storage)
    elsewhere = driver_node is not None and driver_node != node
    if not (chosen or elsewhere):
        return None
    return record_dir(storage, experiment, session)


def storage_record_base(session: str) -> str | None:
    """This Ray Train worker's record base under its run's storage path (`worker_record_base`), from Ray's
    train context (`get_storage()`: the run's storage path and experiment directory); None where it stays
    beside the driver's."""
    train = sys.modules.get("ray.train")
    if train is None:
        return None
    try:
        storage = train.get_context().get_storage()
        root, experiment = storage.storage_fs_path, storage.experiment_dir_name
        filesystem = type(getattr(storage, "storage_filesystem", None)).__name__
    except Exception:  # noqa: BLE001 - a Ray whose context has no storage: beside the driver's
        return None
    if filesystem != "LocalFileSystem":  # pyarrow's: a cloud bucket has no path a node can write a file to
        return None
    constants = sys.modules.get("ray.train.constants")
    default = getattr(constants, "DEFAULT_STORAGE_PATH", None)
    return worker_record_base(str(root), str(default) if default else None, str(experiment), session,
                              node_name(os.environ, socket.gethostname()), os.environ.get(DRIVER_NODE_ENV))


def end_with_training_thread(agent: object) -> None:
    """Write the End when the thread that runs the train function ends.

    Ray Train runs the train function on a thread of a long-lived worker process, which
    Ray ends later without atexit (its workers read as "gone: killed" with every step
    recorded); the function's return is the end of this rank's training.
    """
    import threading

    trainer = threading.current_thread()
    if trainer is threading.main_thread():
        return

    def wait() -> None:
        trainer.join()
        stop = getattr(agent, "stop", None)
        if callable(stop):
            stop(reason="exit")

    threading.Thread(target=wait, name="pitstop-ray-end", daemon=True).start()
