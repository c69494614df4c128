"""Tests of a straggler's predicted gain where its job's ranks share a host's cores, and where they do not."""

from __future__ import annotations

import dataclasses

import pytest

from pitstop.analysis import JobState, StreamBatch, job_findings, stragglers
from pitstop.events import End, Event, Hello, Proc, ProfileWindow, Runtime, Sample, Step

STEP_S = 0.040  # every rank's step: in DDP the all-reduce makes them equal


def hello(rank: int, host: str) -> Hello:
    return Hello(schema=1, pitstop_version="0.1.0", session="job-1", pid=100 + rank, ppid=1, host=host,
                 argv=["python", "train.py"], cwd="/", started=1000.0, python="3.12", rank=rank, local_rank=0,
                 world_size=2, script="train.py")


def rank_events(outside_s: float, cpu_pct: float | None, cores: int = 2, machine_pct: float | None = None) -> list[Event]:
    """60 steps of 40 ms, profiler windows at steps 10, 30 and 50 with `outside_s` a step outside collectives,
    and sampler readings every 0.2 s with the main process at `cpu_pct` of a core."""
    steps = [Step(t=1001.0 + (i + 1) * STEP_S, step=i, wall=STEP_S, data_wait=0.0005, samples=32) for i in range(60)]
    windows = [ProfileWindow(t=1100.0 + s, step_start=s, step_end=s + 5, device="cpu", duration_s=STEP_S * 5,
                             collective_ms=(STEP_S - outside_s) * 1e3) for s in (10, 30, 50)]
    samples = [] if cpu_pct is None else [Sample(t=1001.0 + 0.2 * k, procs=[Proc(pid=1, role="main", cpu=cpu_pct, rss=1)],
                                                 system_cpu=machine_pct)
                                          for k in range(1, 13)]
    runtime = Runtime(t=1000.5, torch_version="2.5", cuda_version=None, device_type="cpu", cpu_count=cores,
                      usable_cpus=cores, torch_threads=1)
    return [runtime, *steps, *windows, *samples, End(t=1004.0, steps=60, dropped=0, reason="exit", exit_code=0)]


def job(hosts: tuple[str, str], cpu_pct: float | None = 60.0, cores: int = 2,
        machine_pct: float | None = None) -> JobState:
    # Rank 1 runs 32 ms a step outside collectives against rank 0's 10 ms: 22 ms of a 40 ms step, 55%.
    j = JobState()
    for rank, outside in ((0, 0.010), (1, 0.032)):
        j.add(StreamBatch(f"rank{rank}.jsonl", [hello(rank, hosts[rank]), *rank_events(outside, cpu_pct, cores, machine_pct)]))
    j.close_all()
    return j


def test_ranks_sharing_a_host_s_cores_predict_the_gain_from_the_cpu_the_fixed_step_needs() -> None:
    # Rank 0 keeps 0.6 cores busy over 40 ms steps: 24 ms of CPU a step. Once rank 1 does only that work too,
    # the 2 ranks need 48 ms of CPU a step from the host's 2 cores: a step of at least 24 ms, 40% shorter,
    # not the 55% that rank 0's pace alone (its 10 ms outside collectives) would say.
    (s,) = stragglers(job(("vm", "vm")))
    assert s.share == pytest.approx(0.55)
    assert s.host_ranks == 2 and s.host_cores == 2 and s.others_cpu_s == pytest.approx(0.024)
    assert s.cpu_floor_s == pytest.approx(0.024) and s.floor_binds
    assert s.gain_share == pytest.approx(0.40)
    (f,) = job_findings(job(("vm", "vm")))
    assert f.gain.startswith("up to 40% shorter job steps if rank 1 kept pace (the 2 ranks on host vm share its 2 cores")
    assert "the others' pace alone would say 55%" in f.gain
    # The evidence still says how long the job waits on rank 1.
    assert "the job waits 55% of its 40.0 ms step on rank 1" in f.evidence[1]


def test_ranks_on_separate_hosts_keep_the_others_pace_as_the_gain() -> None:
    # The same figures, each rank on its own node (the 2-node torchrun test): no core is shared after the fix.
    (s,) = stragglers(job(("node0", "node1")))
    assert s.host_ranks == 1 and s.cpu_floor_s is None and not s.floor_binds
    (f,) = job_findings(job(("node0", "node1")))
    assert f.gain == "up to 55% shorter job steps if rank 1 kept pace"


def test_a_shared_host_with_cores_to_spare_or_without_cpu_readings_keeps_the_others_pace() -> None:
    # 8 cores: the 2 ranks' 48 ms of CPU a step fit in 6 ms a step, below the 18 ms rank 0's pace says.
    (f,) = job_findings(job(("vm", "vm"), cores=8))
    assert f.gain == "up to 55% shorter job steps if rank 1 kept pace"
    # No sampler reading (an older record, the sampler off): nothing to bound it with.
    (s,) = stragglers(job(("vm", "vm"), cpu_pct=None))
    assert s.others_cpu_s is None and s.gain_share == pytest.approx(0.55)


def test_a_node_the_launcher_names_tells_ranks_apart_on_one_host_name() -> None:
    # The 2-node test runs both nodes in network namespaces of one machine: the same host name, PITSTOP_NODE apart.
    j = JobState()
    for rank, outside in ((0, 0.010), (1, 0.032)):
        h = dataclasses.replace(hello(rank, "vm"), node=f"node{rank}")
        j.add(StreamBatch(f"rank{rank}.jsonl", [h, *rank_events(outside, 60.0)]))
    j.close_all()
    (s,) = stragglers(j)
    assert s.host_ranks == 1 and s.gain_share == pytest.approx(0.55)


def test_cores_other_processes_keep_busy_are_not_the_ranks_to_share() -> None:
    # The machine at 80% of 2 cores (1.6 busy) while the 2 ranks kept 1.2 busy: other processes took 0.4, so
    # the ranks' 48 ms of CPU a step get 1.6 cores, at least 30 ms a step: 25% shorter, not 40%.
    (s,) = stragglers(job(("vm", "vm"), machine_pct=80.0))
    assert s.host_free_cores == pytest.approx(1.6) and s.gain_share == pytest.approx(0.25)
    (f,) = job_findings(job(("vm", "vm"), machine_pct=80.0))
    assert "share its 2 cores, 1.6 of them left by other processes: " in f.gain
    assert f.gain.startswith("up to 25% shorter job steps")
    # The ranks alone kept the machine busy: no core is taken from them (the floor of the first test).
    (s,) = stragglers(job(("vm", "vm"), machine_pct=60.0))
    assert s.host_free_cores == pytest.approx(2.0) and s.gain_share == pytest.approx(0.40)


def test_a_reading_just_before_the_recent_steps_stands_for_them_when_none_fell_within() -> None:
    # 50 fast steps can fall between two readings of a 1 Hz sampler (pytorch/examples' multigpu_torchrun on
    # gloo: 50 steps in 0.95 s, its last reading 0.02 s before them): the one just before stands for them.
    j = JobState()
    for rank, outside in ((0, 0.010), (1, 0.032)):
        events = [e for e in rank_events(outside, 60.0) if not isinstance(e, Sample)]
        events.insert(1, Sample(t=1001.3, procs=[Proc(pid=1, role="main", cpu=60.0, rss=1)]))
        j.add(StreamBatch(f"rank{rank}.jsonl", [hello(rank, "vm"), *events]))
    j.close_all()
    (s,) = stragglers(j)
    assert s.others_cpu_s == pytest.approx(0.024) and s.gain_share == pytest.approx(0.40)
