"""Provides the Ray driver's side of pitstop: its workers get the agent, and its record says where their records go.

A local cluster that `ray.init()` starts inherits the driver's environment, so
every Ray worker carries pitstop's bootstrap. A cluster started beforehand
(`ray start --head`, then `ray.init(address="auto")`) does not: its workers
were started by a raylet that never saw `pitstop run`. Ray's documented way to
give a job's workers variables is the job's runtime_env `env_vars`
(docs.ray.io, "Environment dependencies": `${VAR}` appends to the cluster's
own value), so `ray.init` is wrapped to add pitstop's variables there, beside
whatever the user's runtime_env asks for, which always wins.

Ray Train workers on another node than the driver, or under
`RunConfig(storage_path=...)`, write their records under the run's storage path
(`_ray.record_dir`); the trainer's `fit` is wrapped to put that directory in the
driver's record base (`links_path`), where `pitstop view` of the driver's
record follows it. The agent never imports Ray: both wraps go in right after
the user's script imports the module (`after_import`).
"""

from __future__ import annotations

import functools
import os
import socket
from collections.abc import Mapping
from typing import Any

from pitstop.profiling import jobenv
from pitstop.profiling._postimport import after_import
from pitstop.profiling._ray import DRIVER_NODE_ENV, record_dir
from pitstop.profiling.launch import BOOTSTRAP_DIR, PACKAGE_PARENT, SESSION_ENV
from pitstop.profiling.record import links_path

# The bootstrap's variables: a worker without them is not under pitstop (sitecustomize.decide).
OWNER_ENV = "PITSTOP_OWNER_PID"
# Trainer classes whose `fit` starts a Ray Train run: Ray Train's (v2, the default since ray 2.51)
# and the older one (RAY_TRAIN_V2_ENABLED=0).
TRAINERS = (("ray.train.v2.api.data_parallel_trainer", "DataParallelTrainer"),
            ("ray.train.base_trainer", "BaseTrainer"))


def worker_env_vars(environ: Mapping[str, str], pid: int, node: str) -> dict[str, str]:
    """The runtime_env `env_vars` that give a Ray worker pitstop's agent, dormant until its first step."""
    return {
        SESSION_ENV: environ[SESSION_ENV],
        OWNER_ENV: str(pid),
        "PITSTOP_PATH": str(PACKAGE_PARENT),
        # The cluster's own PYTHONPATH follows ("${PYTHONPATH}": Ray expands it on the node).
        "PYTHONPATH": f"{BOOTSTRAP_DIR}{os.pathsep}${{PYTHONPATH}}",
        DRIVER_NODE_ENV: node,
    }


def merged_runtime_env(user: Any, ours: dict[str, str]) -> tuple[Any, str | None]:
    """(the runtime_env to pass, why pitstop's variables could not go in, else None).

    The user's runtime_env is kept as asked: only its `env_vars` gain the variables
    it does not set. A PYTHONPATH of the user's own cannot carry the bootstrap without
    changing it, so the workers are left unmeasured and the reason says so.
    """
    if user is None:
        return {"env_vars": dict(ours)}, None
    if not isinstance(user, dict):
        return user, f"runtime_env is a {type(user).__name__}, not a dict"
    env_vars = user.get("env_vars") or {}
    if not isinstance(env_vars, dict):
        return user, "its runtime_env's env_vars is not a dict"
    if "PYTHONPATH" in env_vars and str(BOOTSTRAP_DIR) not in str(env_vars["PYTHONPATH"]):
        return user, (f"its runtime_env sets PYTHONPATH; put {BOOTSTRAP_DIR} first in it to measure them "
                      "(pitstop then adds its own variables beside yours)")
    merged = type(user)(user)  # a RuntimeEnv stays one: it is a dict
    merged["env_vars"] = {**ours, **env_vars}
    return merged, None


def _wrap_init(agent: Any, ray: Any) -> None:
    init = getattr(ray, "init", None)
    if not callable(init) or getattr(init, "_pitstop", False):
        return
    node = jobenv.node_name(os.environ, socket.gethostname())

    @functools.wraps(init)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        try:
            ours = worker_env_vars(os.environ, os.getpid(), node)
            job_config = kwargs.get("job_config")
            if job_config is not None and getattr(job_config, "runtime_env", None) is not None \
                    and "runtime_env" not in kwargs:
                env, why = merged_runtime_env(job_config.runtime_env, ours)
                if why is None:
                    job_config.set_runtime_env(env)
            else:
                env, why = merged_runtime_env(kwargs.get("runtime_env"), ours)
                if why is None:
                    kwargs["runtime_env"] = env
            if why is not None:
                agent.note("warn", "ray", f"Ray workers of a cluster started apart (ray start) will not be "
                           f"measured: {why}")
        except Exception as err:  # noqa: BLE001 - the user's ray.init runs as called
            agent.note("warn", "ray", f"Ray workers not given pitstop's agent: {type(err).__name__}: {err}")
        return init(*args, **kwargs)

    wrapped._pitstop = True  # type: ignore[attr-defined]
    ray.init = wrapped


def _link_run(agent: Any, trainer: Any) -> None:
    """Put the run's worker record directory in the driver's record base, for `pitstop view` to follow."""
    config = getattr(trainer, "run_config", None)
    storage, name = getattr(config, "storage_path", None), getattr(config, "name", None)
    if not storage or not name or agent.record_path is None:
        return
    storage = str(storage)
    where = record_dir(storage, str(name), agent.settings.session)
    if where is None:
        agent.note("warn", "ray", f"Ray Train's storage {storage} is not a local or shared filesystem: workers "
                   "on other nodes than the driver write their records on their own node")
        return
    links = links_path(agent.record_path)
    known = links.read_text().splitlines() if links.exists() else []
    if where not in known:
        links.parent.mkdir(parents=True, exist_ok=True)
        with open(links, "a") as out:
            out.write(where + "\n")


def _wrap_fit(agent: Any, module: Any, name: str) -> None:
    cls = getattr(module, name, None)
    fit = getattr(cls, "fit", None)
    if fit is None or getattr(fit, "_pitstop", False):
        return

    @functools.wraps(fit)
    def wrapped(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            _link_run(agent, self)
        except Exception as err:  # noqa: BLE001 - the user's fit runs as called
            agent.note("warn", "ray", f"Ray Train's record directory not linked: {type(err).__name__}: {err}")
        return fit(self, *args, **kwargs)

    wrapped._pitstop = True  # type: ignore[attr-defined]
    cls.fit = wrapped


def install(agent: Any) -> None:
    """Wrap `ray.init` and Ray Train's `fit` in this (driver) process once the script imports them."""
    after_import("ray", lambda ray: _wrap_init(agent, ray))
    for module, name in TRAINERS:
        after_import(module, lambda mod, name=name: _wrap_fit(agent, mod, name))

