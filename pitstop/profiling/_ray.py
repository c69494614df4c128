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

from pitstop.profiling.jobenv import JobIdentity, node_name, ray_identity


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
