"""The job identity a process takes from its launcher's environment (pitstop/profiling/jobenv.py)."""

from __future__ import annotations

from pitstop.profiling.jobenv import identity, multi_node, ray_identity


def test_outside_a_job_launcher_there_is_no_job() -> None:
    assert identity({}, "h") is None
    assert identity({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1"}, "h") is None


def test_torchrun_ranks_of_two_nodes_share_the_run_id_and_store_and_name_their_node() -> None:
    def worker(group_rank: int, rank: int, host: str) -> dict[str, str]:
        return {"TORCHELASTIC_RUN_ID": "job7", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29400",
                "GROUP_RANK": str(group_rank), "GROUP_WORLD_SIZE": "2", "RANK": str(rank), "WORLD_SIZE": "4",
                "LOCAL_RANK": str(rank % 2), "LOCAL_WORLD_SIZE": "2"}

    a, b = identity(worker(0, 1, "a"), "gpu-a"), identity(worker(1, 3, "b"), "gpu-b")
    assert a is not None and b is not None
    assert a.job == b.job == "torchrun:job7@10.0.0.1:29400"
    assert (a.launcher, a.node, a.node_rank, a.nodes, a.rank, a.local_world_size) == ("torchrun", "gpu-a", 0, 2, 1, 2)
    assert (b.node, b.node_rank, b.store) == ("gpu-b", 1, "10.0.0.1:29400")
    # Two "nodes" on one host are told apart by PITSTOP_NODE
    assert identity({**worker(1, 3, "b"), "PITSTOP_NODE": "n1"}, "vm").node == "n1"  # type: ignore[union-attr]


def test_slurm_task_per_rank_takes_its_rank_from_slurm_procid() -> None:
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "0", "SLURM_PROCID": "5", "SLURM_NTASKS": "8",
           "SLURM_NODEID": "1", "SLURM_LOCALID": "1", "SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "4(x2)",
           "SLURMD_NODENAME": "gpu-b"}
    job = identity(env, "gpu-b.cluster")
    assert job is not None
    assert (job.job, job.launcher, job.node, job.node_rank, job.nodes) == ("slurm:4242.0", "slurm", "gpu-b", 1, 2)
    assert (job.rank, job.world_size, job.local_rank, job.local_world_size) == (5, 8, 1, 4)


def test_srun_over_torchrun_is_slurms_job_with_torchruns_ranks() -> None:
    """A launcher per node: SLURM_PROCID is the node's task, RANK the rank torchrun gave."""
    env = {"SLURM_JOB_ID": "4242", "SLURM_STEP_ID": "1", "SLURM_PROCID": "1", "SLURM_NTASKS": "2",
           "SLURM_NODEID": "1", "SLURM_JOB_NUM_NODES": "2", "TORCHELASTIC_RUN_ID": "none", "GROUP_RANK": "1",
           "GROUP_WORLD_SIZE": "2", "RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "gpu-a", "MASTER_PORT": "29500"}
    job = identity(env, "gpu-b")
    assert job is not None
    assert (job.job, job.rank, job.world_size, job.node_rank, job.nodes) == ("slurm:4242.1", 3, 4, 1, 2)
    assert job.store == "gpu-a:29500"


def test_a_ray_train_worker_is_its_runs_rank() -> None:
    job = ray_identity("TorchTrainer_2026", "node-a", rank=1, world_size=4, local_rank=1, local_world_size=2,
                       node_rank=0)
    assert (job.job, job.launcher, job.nodes, job.rank) == ("ray:TorchTrainer_2026", "ray", 2, 1)


def test_fronts_of_a_job_over_nodes_may_share_a_record_directory() -> None:
    assert multi_node({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "2"}, ["python", "train.py"])
    assert multi_node({}, ["torchrun", "--nnodes", "2", "--nproc_per_node", "1", "t.py"])
    assert multi_node({}, ["torchrun", "--nnodes=1:4", "t.py"])
    assert not multi_node({}, ["torchrun", "--nnodes", "1", "t.py"])
    assert not multi_node({"SLURM_JOB_ID": "1", "SLURM_NTASKS": "1"}, ["python", "train.py"])
