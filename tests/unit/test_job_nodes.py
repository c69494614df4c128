"""Records of one job written on several nodes (one `pitstop run` each: different sessions) read as one job."""

from __future__ import annotations

from pitstop.analysis import RunState, nodes
from pitstop.events import End, Event, Hello, Step
from pitstop.headless import summary_text
from pitstop.recorded import sessions

JOB = "torchrun:none@10.0.0.1:29400"


def hello(rank: int, node: str, world: int = 2, per_node: int = 1, job: str | None = JOB,
          session: str | None = None, started: float = 1000.0) -> Hello:
    return Hello(schema=2, pitstop_version="0.1.0", session=session or f"20261127-{node}", pid=100 + rank, ppid=1,
                 host="vm", argv=["python", "train.py"], cwd="/", started=started, python="3.12", rank=rank,
                 local_rank=rank % per_node, world_size=world, script="train.py", job=job,
                 launcher="torchrun" if job else None, node=node if job else None,
                 node_rank=rank // per_node if job else None, nodes=world // per_node if job else None,
                 local_world_size=per_node if job else None)


def run(h: Hello, wall: float = 0.1, wait: float = 0.001, n: int = 40) -> RunState:
    state = RunState()
    events: list[Event] = [h, *(Step(t=1001.0 + i * wall, step=i, wall=wall, data_wait=wait, samples=32)
                                for i in range(n)), End(t=2000.0, steps=n, dropped=0, exit_code=0)]
    for e in events:
        state.add(e)
    return state


def test_two_nodes_records_are_one_job_with_a_node_column() -> None:
    text = summary_text([run(hello(0, "node-a")), run(hello(1, "node-b"))])
    assert "different runs" not in text
    assert f"pitstop job summary: train.py (job {JOB})" in text
    assert "ranks       2 seen of world size 2 (2 finished)" in text
    assert "nodes       2 seen (node-a: rank 0; node-b: rank 1)" in text
    table = [line.split() for line in text.splitlines() if line.strip().startswith(("rank ", "rank  "))]
    assert ["rank", "pid", "node"] == table[0][:3]
    assert [row[3] for row in table[1:3]] == ["node-a", "node-b"]


def test_one_nodes_own_summary_says_the_others_ran_elsewhere_and_how_to_read_them_together() -> None:
    text = summary_text([run(hello(0, "node-a"))])
    assert "1 of world size 2 ranks; the others ran on other nodes (node rank 1)" in text
    assert "Read them together: pitstop view NODE0_RECORD OTHER_NODES_RECORDS... --summary" in text


def test_a_node_whose_every_rank_is_slow_is_named_and_a_missing_ranks_node_is_said() -> None:
    runs = [run(hello(r, "node-a" if r < 2 else "node-b", world=6, per_node=2), wait=0.001 if r < 2 else 0.05)
            for r in range(4)]
    text = summary_text(runs)
    assert "slow node   node-b: all its 2 ranks are stragglers (ranks 2-3)" in text
    assert "missing     rank 4 on node rank 2, rank 5 on node rank 2: no record of them was read" in text
    view = nodes(runs)
    assert [m.rank for m in view.missing] == [4, 5] and view.node_of == {0: "node-a", 1: "node-a", 2: "node-b",
                                                                          3: "node-b"}


def test_a_straggler_on_a_node_with_healthy_ranks_is_a_rank_not_a_node() -> None:
    runs = [run(hello(r, "node-a" if r < 2 else "node-b", world=4, per_node=2), wait=0.05 if r == 3 else 0.001)
            for r in range(4)]
    text = summary_text(runs)
    assert "straggler   rank 3" in text and "slow node" not in text


def test_records_of_different_jobs_in_one_directory_are_said_and_each_read() -> None:
    runs = [run(hello(0, "node-a")), run(hello(1, "node-b")),
            run(hello(0, "node-c", job="slurm:77.0")), run(hello(1, "node-d", job="slurm:77.0"))]
    text = summary_text(runs)
    assert f"these records belong to 2 different runs ({JOB}, slurm:77.0)" in text
    assert text.count("ranks       2 seen of world size 2") == 2


def test_two_runs_reusing_torchruns_default_run_id_are_two_runs_and_old_records_group_by_session() -> None:
    first = [run(hello(0, "a", session="s1")), run(hello(1, "b", session="s2"))]
    again = [run(hello(0, "a", session="s3", started=5000.0)), run(hello(1, "b", session="s4", started=5001.0))]
    assert len(sessions(first)) == 1 and len(sessions(first + again)) == 2
    old = [run(hello(0, "a", job=None, session="s9")), run(hello(1, "a", job=None, session="s9"))]
    assert [len(members) for _, members in sessions(old)] == [2]


def test_ray_trains_driver_joins_its_workers_job_and_says_it_does_not_train() -> None:
    """Ray Train's workers carry Ray's run as their job; the driver, which only started them, has none."""
    import dataclasses

    driver = run(dataclasses.replace(hello(0, "n", job=None, session="s1"), rank=None, pid=50, world_size=None), n=0)
    workers = [run(dataclasses.replace(hello(r, "n", job="ray:exp", session="s1"), launcher="ray", parent_pid=50))
               for r in range(2)]
    assert [len(members) for _, members in sessions([driver, *workers])] == [3]
    text = summary_text([driver, *workers])
    assert "ranks       2 seen of world size 2 (2 finished)" in text
    assert "driver      pid 50, Ray Train's driver: it does not train; its 2 Ray Train workers did" in text
    assert "findings: none (Ray Train's driver does not train; its workers did" in text
