"""Ray Train without Ray: where a worker's record goes, the driver's runtime_env, the links `pitstop view` follows."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from pathlib import Path

from pitstop.analysis import RunState, nodes
from pitstop.events import SCHEMA_VERSION, Hello
from pitstop.profiling._ray import record_dir, worker_record_base
from pitstop.profiling._raydriver import merged_runtime_env, worker_env_vars
from pitstop.profiling.launch import BOOTSTRAP_DIR, SESSION_ENV
from pitstop.profiling.record import RecordWriter, linked_dirs, links_path
from pitstop.profiling.sources import RecordSource
from pitstop.recorded import job_files, job_lines, load_runs

DEFAULT = os.path.expanduser("~/ray_results")


def test_a_worker_writes_under_the_storage_path_the_user_set_or_from_another_node() -> None:
    chosen = worker_record_base("/shared/runs", DEFAULT, "exp", "sess", "node-a", "node-a")
    assert chosen == "/shared/runs/exp/pitstop/sess"
    assert worker_record_base(DEFAULT, DEFAULT, "exp", "sess", "node-b", "node-a") == f"{DEFAULT}/exp/pitstop/sess"
    # Ray's default storage on the driver's own node: beside the driver's record, as before.
    assert worker_record_base(DEFAULT, DEFAULT, "exp", "sess", "node-a", "node-a") is None
    assert worker_record_base(DEFAULT + "/", DEFAULT, "exp", "sess", "node-a", None) is None
    # A cloud bucket has no path a node can write a file to.
    assert worker_record_base("s3://bucket/runs", DEFAULT, "exp", "sess", "node-b", "node-a") is None
    assert record_dir("file:///shared/runs", "exp", "sess") == "/shared/runs/exp/pitstop/sess"


def test_the_drivers_runtime_env_keeps_what_the_user_asked_and_adds_pitstops_variables() -> None:
    ours = worker_env_vars({SESSION_ENV: "{}"}, 42, "node-a")
    assert ours["PITSTOP_OWNER_PID"] == "42" and ours["PYTHONPATH"].startswith(str(BOOTSTRAP_DIR) + os.pathsep)
    assert ours["PYTHONPATH"].endswith("${PYTHONPATH}")  # Ray appends the cluster's own
    env, why = merged_runtime_env(None, ours)
    assert why is None and env == {"env_vars": ours}
    user = {"pip": ["x"], "env_vars": {"A": "1", "PITSTOP_PATH": "/mine"}}
    env, why = merged_runtime_env(user, ours)
    assert why is None and env["pip"] == ["x"] and env["env_vars"]["A"] == "1"
    assert env["env_vars"]["PITSTOP_PATH"] == "/mine" and env["env_vars"]["PITSTOP_OWNER_PID"] == "42"
    assert user == {"pip": ["x"], "env_vars": {"A": "1", "PITSTOP_PATH": "/mine"}}  # the user's own dict untouched
    env, why = merged_runtime_env({"env_vars": {"PYTHONPATH": "/lib"}}, ours)
    assert env == {"env_vars": {"PYTHONPATH": "/lib"}} and why is not None and "sets PYTHONPATH" in why


def _hello(session: str, pid: int, rank: int | None, record: Path) -> Hello:
    worker = {} if rank is None else {"parent_pid": 1, "job": "ray:exp", "launcher": "ray", "node": "n"}
    return Hello(schema=SCHEMA_VERSION, pitstop_version="t", session=session, pid=pid, ppid=1, host="h", argv=["x"],
                 cwd="/", started=1.0, python="3", mode="run", rank=rank, local_rank=None,
                 world_size=None if rank is None else 2, script="x", record=str(record), **worker)


def test_view_of_the_drivers_record_reads_the_records_its_links_name(tmp_path: Path) -> None:
    driver = tmp_path / "run" / "rank0.jsonl.gz"
    storage = tmp_path / "shared" / "exp" / "pitstop" / "sess"
    for path, pid, rank in ((driver, 1, None), (storage / "rank0.jsonl.gz", 2, 0), (storage / "rank1.jsonl.gz", 3, 1)):
        writer = RecordWriter(path)
        writer.write(_hello("sess", pid, rank, path))
        writer.close()
    links_path(driver).write_text(f"{storage}\n{tmp_path / 'never-written'}\n")
    assert linked_dirs(driver.parent) == [storage, tmp_path / "never-written"]
    files, others = job_files(driver.parent)
    assert files == [driver] and others == [storage / "rank0.jsonl.gz", storage / "rank1.jsonl.gz"]
    assert job_files(driver)[1] == others
    assert RecordSource(driver.parent).files == [driver, *others]  # the viewer's replay reads them too
    (tmp_path / "never-written").mkdir()  # an empty directory adds nothing
    assert job_files(driver.parent)[1] == others
    runs, _ = load_runs(driver.parent)
    assert sorted(r.pid for r in runs) == [1, 2, 3]
    assert f"  records     the workers' under the run's storage path: {storage}" in job_lines(runs)


def test_the_drivers_node_is_not_a_node_of_the_job_its_workers_ran_on(tmp_path: Path) -> None:
    """A cluster started apart: the driver (no rank) on its host, both workers on another node."""
    driver = RunState()
    driver.add(_hello("sess", 1, None, tmp_path / "d"))
    workers = []
    for rank in (0, 1):
        worker = RunState()
        hello = _hello("sess", 2 + rank, rank, tmp_path / f"w{rank}")
        worker.add(dataclasses.replace(hello, node="node-b", local_world_size=2, nodes=1))
        workers.append(worker)
    view = nodes([driver, *workers])
    assert view.nodes == ("node-b",) and not view.spans


def test_a_ray_node_without_pythonpath_does_not_put_the_workers_cwd_on_sys_path(tmp_path: Path) -> None:
    """Ray expands the runtime_env's "BOOTSTRAP:${PYTHONPATH}" to "BOOTSTRAP:" on a node without one."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITSTOP_")}
    env["PYTHONPATH"] = f"{BOOTSTRAP_DIR}{os.pathsep}"
    probe = "import os, sys; print(os.getcwd() in sys.path, os.environ['PYTHONPATH'])"
    out = subprocess.run([sys.executable, "-c", probe], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.stdout.split() == ["False", str(BOOTSTRAP_DIR)], out.stderr
