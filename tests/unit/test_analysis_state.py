"""Tests of RunState and JobState: what they keep, what they bound, how they order ranks."""

from __future__ import annotations

import math

import pytest

from pitstop.analysis import JobState, RunState, StreamBatch
from pitstop.analysis import _state
from pitstop.events import (
    Applied,
    DataLoaderInfo,
    End,
    Gpu,
    Hello,
    Loss,
    Model,
    Note,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
)


def hello(pid: int = 10, rank: int | None = None, started: float = 100.0) -> Hello:
    return Hello(
        schema=1, pitstop_version="0.1.0", session="s1", pid=pid, ppid=1, host="h",
        argv=["python", "train.py"], cwd="/", started=started, python="3.12", rank=rank,
    )


def step(i: int, t: float, wall: float = 0.1, wait: float = 0.0, samples: int | None = 8, **kw: int) -> Step:
    return Step(t=t, step=i, wall=wall, data_wait=wait, samples=samples, **kw)


def test_add_keeps_each_kind_and_bumps_version() -> None:
    run = RunState()
    events = [
        hello(),
        Runtime(t=101.0, torch_version="2.13", cuda_version=None, device_type="cpu"),
        Model(t=101.5, conv2d=2),
        DataLoaderInfo(t=101.6, id=7, num_workers=2, batch_size=8, pin_memory=False,
                       persistent_workers=False, prefetch_factor=2),
        Applied(t=101.7, applied={"cudnn_benchmark": True}),
        step(0, 102.0),
        Sample(t=102.1),
        ProfileWindow(t=103.0, step_start=0, step_end=1, device="cpu"),
        Note(t=103.1, level="warn", source="sampler", message="no NVML"),
        End(t=104.0, steps=1, dropped=3),
    ]
    for n, event in enumerate(events, 1):
        run.add(event)
        assert run.version == n
    assert run.hello is events[0] and run.runtime is events[1] and run.model is events[2]
    assert run.dataloaders == {7: events[3]}
    assert run.applied is events[4]
    assert list(run.steps) == [events[5]] and list(run.samples) == [events[6]]
    assert list(run.profiles) == [events[7]] and list(run.notes) == [events[8]]
    assert run.end is events[9]
    assert run.device_type == "cpu" and run.pid == 10 and run.rank is None
    assert run.first_t == 100.0 and run.last_t == 104.0


def test_unknown_objects_are_counted_not_raised() -> None:
    run = RunState()
    run.add("not an event")  # type: ignore[arg-type]
    assert run.unknown_events == 1 and run.version == 1


def test_step_totals_survive_the_deque_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "MAX_STEPS", 10)
    run = RunState()
    for i in range(25):
        run.add(step(i, 200.0 + i * 0.1, wall=0.1, wait=0.04, samples=4, host_rss=1000 + i))
    assert len(run.steps) == 10 and run.steps[0].step == 15
    assert run.total_steps == 25
    assert run.total_samples == 100 and run.steps_with_samples == 25
    assert math.isclose(run.total_wall, 2.5) and math.isclose(run.total_data_wait, 1.0)
    assert run.first_step_t == 200.0 and run.first_step_start == pytest.approx(199.9)
    assert run.last_step == 24 and run.peak_rss == 1024
    assert [s.step for s in run.head] == list(range(25))


def test_memory_peaks_take_the_largest_reading_and_ignore_none() -> None:
    run = RunState()
    run.add(step(0, 1.0, mem_allocated=5, mem_reserved=9, mem_peak=7))
    run.add(step(1, 2.0))
    run.add(step(2, 3.0, mem_allocated=6, mem_reserved=8, mem_peak=6))
    assert run.peak_mem_allocated == 7 and run.peak_mem_reserved == 9
    cpu_only = RunState()
    cpu_only.add(step(0, 1.0))
    assert cpu_only.peak_mem_allocated is None and cpu_only.peak_rss is None


def test_sample_totals_cover_gpu_cpu_and_workers() -> None:
    run = RunState()
    run.add(Sample(
        t=1.0,
        gpus=[Gpu(index=0, name="A", util=80.0, mem_used=10, mem_total=100, power_w=200.0),
              Gpu(index=1, name="A", util=40.0, mem_used=30, mem_total=100, power_w=100.0)],
        procs=[Proc(pid=1, role="main", cpu=90.0, rss=50), Proc(pid=2, role="worker", cpu=60.0, rss=5),
               Proc(pid=3, role="worker", cpu=40.0, rss=5)],
        system_cpu=30.0, alloc_retries=2, ooms=0,
    ))
    run.add(Sample(t=2.0, gpus=[Gpu(index=0, name="A", util=None)], procs=[Proc(pid=1, role="main", cpu=None, rss=70)],
                   alloc_retries=5))
    assert run.gpu_util_n == 1 and run.gpu_util_sum == 60.0  # mean over GPUs, per sample with a reading
    assert run.gpu_power_sum == 300.0 and run.gpu_mem_peak == 30 and run.gpu_mem_total == 100
    assert run.cpu_main_n == 1 and run.cpu_main_sum == 90.0
    assert run.cpu_workers_sum == 100.0 and run.workers_max == 2
    assert run.system_cpu_n == 1 and run.peak_rss == 70
    assert (run.first_alloc_retries, run.last_alloc_retries, run.last_ooms) == (2, 5, 0)


def test_the_machines_cpu_is_averaged_over_the_samples_the_process_cpu_is() -> None:
    # accelerate's checkpointing example: "cpu main 1.21 cores, machine 0.98 of 2": the machine's mean took in
    # the first sample (system 0.0, from the sampler's start), where the process's CPU has no reading yet.
    run = RunState()
    run.add(Sample(t=1.0, procs=[Proc(pid=1, role="main", cpu=None, rss=5)], system_cpu=0.0))
    for i in range(4):
        run.add(Sample(t=2.0 + i, procs=[Proc(pid=1, role="main", cpu=120.0, rss=5)], system_cpu=60.0))
    assert run.cpu_main_sum / run.cpu_main_n == 120.0
    assert run.system_cpu_sum / run.system_cpu_n == 60.0  # 2 cores: 1.2 of 2, not 0.96


def test_losses_record_nonfinite_once_and_keep_the_latest_finite() -> None:
    run = RunState()
    run.add(Loss(t=1.0, steps=[0, 1, 2], values=[2.0, 1.5, None], nonfinite=[2]))
    run.add(Loss(t=2.0, steps=[3, 4], values=[float("nan"), 1.2], nonfinite=[3]))
    assert run.losses == {0: 2.0, 1: 1.5, 2: None, 3: None, 4: 1.2}
    assert run.nonfinite_steps == [2, 3] and run.nonfinite_total == 2
    assert run.last_loss() == 1.2
    run.add(Loss(t=3.0, steps=[5], values=[None], nonfinite=[5]))
    assert run.last_loss() == 1.2  # a non-finite value is never "the last loss"


def test_losses_are_bounded_oldest_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_state, "MAX_LOSSES", 3)
    run = RunState()
    run.add(Loss(t=1.0, steps=[0, 1, 2, 3, 4], values=[5.0, 4.0, 3.0, 2.0, 1.0]))
    assert list(run.losses) == [2, 3, 4]


def test_recent_and_measured_steps() -> None:
    run = RunState()
    for i in range(6):
        run.add(step(i, float(i)))
    assert [s.step for s in run.measured_steps(3)] == [3, 4, 5]
    assert [s.step for s in run.recent_steps(2)] == [4, 5]
    assert run.recent_steps(0) == [] and len(run.recent_steps(100)) == 6


def test_job_state_routes_batches_and_orders_ranks() -> None:
    job = JobState()
    job.add(StreamBatch(stream="pid:30@h", events=[hello(pid=30, rank=1)]))
    job.add(StreamBatch(stream="pid:20@h", events=[hello(pid=20, rank=None)]))
    job.add(StreamBatch(stream="pid:40@h", events=[hello(pid=40, rank=0)]))
    run = job.add(StreamBatch(stream="pid:40@h", events=[step(0, 101.0)]))
    job.add(StreamBatch(stream="odd", events=[]))
    assert job.version == 5 and run is job.runs["pid:40@h"] and run.total_steps == 1
    assert [label for label, _ in job.ranks()] == ["rank 0", "rank 1", "pid 20", "odd"]
    assert job.primary() is job.runs["pid:40@h"]


def test_job_state_primary_without_ranks_is_lowest_pid_and_none_when_empty() -> None:
    job = JobState()
    assert job.primary() is None and job.ranks() == []
    job.add(StreamBatch(stream="b", events=[hello(pid=9)]))
    job.add(StreamBatch(stream="a", events=[hello(pid=5)]))
    assert job.primary() is job.runs["a"]
