"""Tests of job-level analysis: throughput over ranks, rank status, stragglers and the job findings."""

from __future__ import annotations

import dataclasses
import random

import pytest

from pitstop.analysis import (
    STRAGGLER_THRESHOLD,
    JobState,
    RunState,
    StreamBatch,
    job_findings,
    job_summary,
    stragglers,
)
from pitstop.events import DataLoaderInfo, End, Event, Hello, ProfileWindow, Sample, Step
from pitstop.headless import summary_text


def hello(rank: int, pid: int | None = None) -> Hello:
    return Hello(
        schema=1, pitstop_version="0.1.0", session="job-1", pid=pid or 100 + rank, ppid=1, host=f"node{rank // 2}",
        argv=["python", "train.py"], cwd="/", started=1000.0, python="3.12", rank=rank, local_rank=rank % 2,
        world_size=4, script="train.py",
    )


def steps(n: int, wall: float, wait: float = 0.0, samples: int | None = 32, t0: float = 1001.0) -> list[Step]:
    return [Step(t=t0 + (i + 1) * wall, step=i, wall=wall, data_wait=wait, samples=samples) for i in range(n)]


def window(start: int, step_wall: float, collective_s: float, n: int = 5) -> ProfileWindow:
    return ProfileWindow(t=1100.0 + start, step_start=start, step_end=start + n, device="cpu",
                         duration_s=step_wall * n, collective_ms=collective_s * 1e3)


def job_of(streams: dict[int, list[Event]], closed: bool = True) -> JobState:
    job = JobState()
    for rank, events in streams.items():
        job.add(StreamBatch(f"rank{rank}.jsonl", [hello(rank), *events]))
    if closed:
        job.close_all()
    return job


def end(code: int | None = 0, reason: str = "exit") -> End:
    return End(t=2000.0, steps=60, dropped=0, reason=reason, exit_code=code)


def test_job_throughput_is_the_sum_of_ranks_and_steps_per_s_the_slowest() -> None:
    # rank 0: 32 samples per 0.1 s = 320/s, 10 steps/s; rank 1: 32 per 0.2 s = 160/s, 5 steps/s
    job = job_of({0: [*steps(23, 0.1), end()], 1: [*steps(23, 0.2), end()]})
    s = job_summary(job)
    assert s.ranks == 2 and s.world_size == 4 and s.session == "job-1"
    assert s.samples_per_s == pytest.approx(480.0)
    assert s.steps_per_s == pytest.approx(5.0)
    assert [r.label for r in s.rows] == ["rank 0", "rank 1"]
    assert [r.status for r in s.rows] == ["finished", "finished"]
    assert s.rows[1].step_p50_s == pytest.approx(0.2) and s.rows[1].host == "node0"


def test_one_rank_without_batch_size_makes_job_samples_unknown_not_smaller() -> None:
    job = job_of({0: steps(20, 0.1), 1: steps(20, 0.1, samples=None)})
    s = job_summary(job)
    assert s.samples_per_s is None
    assert s.steps_per_s == pytest.approx(10.0)


def test_a_rank_whose_stream_closed_without_end_is_gone_and_the_others_keep_their_figures() -> None:
    job = job_of({0: [*steps(40, 0.05), end()], 1: steps(10, 0.05)})
    s = job_summary(job)
    r0, r1 = s.rows
    assert r0.status == "finished" and r0.step_p50_s == pytest.approx(0.05) and r0.steps == 40
    assert r1.status == "gone" and r1.last_step == 9 and r1.exit_code is None
    assert "without an End event" in (r1.status_reason or "")
    assert [r.label for r in s.gone] == ["rank 1"]
    rules = [f.rule for f in job_findings(job)]
    assert rules == ["rank-gone"]


def test_a_live_stream_without_end_is_running_not_gone() -> None:
    job = job_of({0: steps(20, 0.05), 1: steps(20, 0.05)}, closed=False)
    assert [r.status for r in job_summary(job).rows] == ["running", "running"]
    job.close("rank1.jsonl")
    assert [r.status for r in job_summary(job).rows] == ["running", "gone"]


@pytest.mark.parametrize("code, reason", [(1, "exit"), (None, "signal"), (137, "signal")])
def test_an_end_with_an_error_is_gone_with_its_exit_code(code: int | None, reason: str) -> None:
    job = job_of({0: [*steps(20, 0.05), end()], 1: [*steps(20, 0.05), end(code, reason)]})
    row = job_summary(job).rows[1]
    assert row.status == "gone" and row.exit_code == code


def test_a_child_trainer_its_parent_terminated_is_finished_and_a_rank_is_gone() -> None:
    """`with Pool()` ends its hogwild workers with SIGTERM once their work is done: not a dead rank."""
    job = JobState()
    child = dataclasses.replace(hello(1), rank=None, parent_pid=100)
    job.add(StreamBatch("rank0.jsonl", [hello(0), *steps(20, 0.05), end()]))
    job.add(StreamBatch("rank0-201.jsonl", [child, *steps(20, 0.05), end(143, "terminated")]))
    job.add(StreamBatch("rank2.jsonl", [hello(2), *steps(20, 0.05), end(143, "terminated")]))
    job.close_all()
    statuses = sorted(r.status for r in job_summary(job).rows)
    assert statuses == ["finished", "finished", "gone"]


def test_trial_complete_is_a_normal_end() -> None:
    job = job_of({0: [*steps(20, 0.05), end(0, "trial-complete")]})
    assert job_summary(job).rows[0].status == "finished"


def _ddp(slow: int | None, extra_s: float, ranks: int = 4, extra_wait: float = 0.0) -> JobState:
    """A DDP job seen through profiler windows: equal wall times, the fast ranks wait in the collective."""
    base_out, coll_min = 0.004, 0.001
    step_wall = base_out + coll_min + extra_s
    streams: dict[int, list[Event]] = {}
    for r in range(ranks):
        mine = extra_s if r == slow else 0.0
        wait = 0.001 + (extra_wait if r == slow else 0.0)
        wins = [window(s, step_wall, step_wall - base_out - mine) for s in (10, 30, 50)]
        streams[r] = [*steps(60, step_wall, wait=wait), *wins, end()]
    return job_of(streams)


def test_straggler_named_with_its_numbers_when_the_others_wait_in_the_collective() -> None:
    job = _ddp(slow=1, extra_s=0.030)
    found = stragglers(job)
    assert [s.label for s in found] == ["rank 1"]
    s = found[0]
    assert s.basis == "outside-collective" and s.windows == 3
    assert s.time_s == pytest.approx(0.034) and s.reference_s == pytest.approx(0.004)
    assert s.cause == "compute" and s.extra_compute_s == pytest.approx(0.030)
    assert "rank 1: 34.0 ms per step outside collectives vs median 4.0 ms (+750%)" in s.text
    assert "extra time is compute" in s.text
    f = job_findings(job)
    assert [x.rule for x in f] == ["straggler"] and f[0].severity == "high"
    assert job_summary(job).stragglers == tuple(found)


@pytest.mark.parametrize("waited,named", [(0.3, []), (0.0, ["rank 1"])])
def test_on_a_machine_whose_ranks_wait_for_cores_an_excess_under_a_timeslice_names_no_straggler(
        waited: float, named: list[str]) -> None:
    # The balanced 2-rank gloo job in a quiet test-suite run: its ranks waited ~0.3 cores' worth for a
    # free core, and rank 1 spent 4.2 ms a step outside collectives against rank 0's 2.1 ms (here 4.4: +110%).
    streams: dict[int, list[Event]] = {}
    step_wall = 0.007
    for r in range(2):
        outside = 0.0044 if r == 1 else 0.0021
        wins = [window(s, step_wall, step_wall - outside) for s in (10, 30, 50)]
        readings = [Sample(t=1001.0 + 0.1 * k, procs=[], cpu_wait=waited) for k in range(1, 5)]
        streams[r] = [*steps(60, step_wall, wait=0.001), *readings, *wins, end()]
    assert [s.label for s in stragglers(job_of(streams))] == named
    # A rank 30 ms slower stands out however busy the machine.
    assert [s.label for s in stragglers(_ddp(slow=1, extra_s=0.030, ranks=2))] == ["rank 1"]


def test_no_straggler_when_all_ranks_spend_the_same_time_outside_the_collective() -> None:
    assert stragglers(_ddp(slow=None, extra_s=0.030)) == []
    assert job_findings(_ddp(slow=None, extra_s=0.030)) == []


def test_a_rank_just_under_the_threshold_is_not_named_and_just_over_is() -> None:
    # outside time 4 ms for the others: the threshold is a relative excess of STRAGGLER_THRESHOLD
    below = 0.004 * STRAGGLER_THRESHOLD * 0.9
    above = 0.004 * STRAGGLER_THRESHOLD * 1.1
    assert stragglers(_ddp(slow=2, extra_s=below)) == []
    assert [s.rank for s in stragglers(_ddp(slow=2, extra_s=above))] == [2]


def test_data_wait_straggler_is_told_apart_from_compute() -> None:
    job = _ddp(slow=3, extra_s=0.020, extra_wait=0.018)
    (s,) = stragglers(job)
    assert s.rank == 3 and s.cause == "data wait"
    assert s.extra_data_s == pytest.approx(0.018) and s.extra_compute_s == pytest.approx(0.002)


def test_without_windows_a_synchronised_data_straggler_is_found_by_its_data_wait() -> None:
    # equal walls (DDP equalises them) but rank 1 waits 15 ms for data, the others 1 ms
    job = job_of({r: [*steps(60, 0.030, wait=0.015 if r == 1 else 0.001), end()] for r in range(3)})
    (s,) = stragglers(job)
    assert s.rank == 1 and s.basis == "data-wait" and s.cause == "data wait"


@pytest.mark.parametrize(("framework", "says"), [
    ("transformers", "TrainingArguments(..., dataloader_num_workers=8, dataloader_pin_memory=True"),
    ("keras", "PyDataset whose __init__ calls super().__init__(workers=8, use_multiprocessing=True)"),
    ("lightning", "in your LightningDataModule's (or LightningModule's) train_dataloader()"),
    ("", "DataLoader(..., num_workers=8, pin_memory=True, persistent_workers=True)"),
])
def test_a_data_wait_straggler_s_fix_names_the_setting_of_what_built_its_loader(framework: str, says: str) -> None:
    # rank 1 waits 15 ms for batches from a loader HF Trainer (or Keras, Lightning, the script) built
    loader = DataLoaderInfo(t=1000.5, id=7, num_workers=0, batch_size=32, pin_memory=False, persistent_workers=False,
                            prefetch_factor=None, framework=framework)
    job = job_of({r: [loader, *(dataclasses.replace(s, loader=7) for s in steps(60, 0.030, wait=0.015 if r == 1
                                                                                    else 0.001)), end()]
                  for r in range(3)})
    (f,) = [f for f in job_findings(job) if f.rule == "straggler"]
    assert f.title == "rank 1 is a straggler (data wait)"
    assert says in f.fix
    # and the headless job block prints it, as the rank findings print theirs
    job_block = summary_text([run for _, run in job.ranks()]).split("pitstop summary: train.py rank 0", 1)[0]
    assert "     fix:  # give that rank's DataLoader more workers or faster storage, e.g." in job_block
    assert says in job_block
    # a framework's loader is never given a bare DataLoader(...) line: the script builds none to edit
    bare = [line for line in f.fix.splitlines() if line.startswith("DataLoader(") and "#" not in line]
    assert bare == ([] if framework else [says])


def test_without_windows_equal_walls_name_nobody() -> None:
    job = job_of({r: [*steps(60, 0.030, wait=0.001), end()] for r in range(3)})
    assert stragglers(job) == []


def test_one_slow_spike_is_not_persistent() -> None:
    # rank 1's steps 40..44 take 10x longer: a median over the last 50 steps ignores them
    spiky = steps(60, 0.030)
    spiky[40:45] = [Step(t=s.t, step=s.step, wall=0.3, data_wait=0.0, samples=32) for s in spiky[40:45]]
    job = job_of({0: [*steps(60, 0.030), end()], 1: [*spiky, end()]})
    assert stragglers(job) == []


def test_only_the_recent_steps_count() -> None:
    # rank 1 was 3x slower long ago, then kept pace for the last 60 steps
    old = steps(100, 0.09)
    recent = [Step(t=2000.0 + i, step=100 + i, wall=0.03, data_wait=0.0, samples=32) for i in range(60)]
    job = job_of({0: [*steps(160, 0.03), end()], 1: [*old, *recent, end()]})
    assert stragglers(job) == []


def test_a_gone_rank_and_a_rank_with_too_few_steps_are_not_compared() -> None:
    job = job_of({0: [*steps(60, 0.03), end()], 1: steps(60, 0.2)})  # rank 1 gone
    assert stragglers(job) == []
    job = job_of({0: [*steps(60, 0.03), end()], 1: [*steps(8, 0.2), end()]})  # 5 measured steps
    assert stragglers(job) == []


def test_headless_summary_has_a_job_block_first_for_several_ranks() -> None:
    job = _ddp(slow=1, extra_s=0.030, ranks=2)
    runs = [run for _, run in job.ranks()]
    text = summary_text(runs)
    job_block, rest = text.split("pitstop summary: train.py rank 0", 1)
    assert job_block.startswith("pitstop job summary: train.py (session job-1)")
    assert "straggler   rank 1: 34.0 ms per step outside collectives" in job_block
    assert "2 seen of world size 4 (2 finished)" in job_block
    assert "pitstop summary: train.py rank 1" in rest


def test_headless_summary_names_a_killed_rank_as_gone() -> None:
    r0, r1 = RunState(), RunState()
    r0.add_all([hello(0), *steps(40, 0.05), end()])
    r1.add_all([hello(1), *steps(12, 0.05)])
    text = summary_text([r0, r1])
    assert "gone        rank 1 (pid 101): stream ended without an End event" in text
    assert "last step 11" in text


def test_headless_summary_of_one_process_has_no_job_block() -> None:
    run = RunState()
    run.add_all([hello(0), *steps(20, 0.05), end()])
    assert "pitstop job summary" not in summary_text([run])


def test_records_of_unrelated_runs_are_summarized_apart_and_said_to_be_different_runs() -> None:
    # Issue 10: a folder of unrelated records became a 14-rank job with stragglers.
    runs = []
    for i, wall in enumerate((0.01, 0.05, 0.2)):
        run = RunState()
        other = Hello(schema=1, pitstop_version="0", session=f"2026-run-{i}", pid=200 + i, ppid=1, host="h",
                      argv=["python", f"t{i}.py"], cwd="/", started=1000.0 + i, python="3.12", script=f"t{i}.py")
        run.add_all([other, *steps(30, wall), end()])
        runs.append(run)
    text = summary_text(runs)
    assert text.splitlines()[0] == ("pitstop: these records belong to 3 different runs (2026-run-0, 2026-run-1, "
                                    "2026-run-2); each is summarized on its own")
    assert "pitstop job summary" not in text and "straggler" not in text
    assert "== run 2026-run-1: t1.py, 1 process(es) ==" in text
    assert text.count("pitstop summary: t") == 3


def test_the_front_s_exit_code_is_given_to_the_process_it_started() -> None:
    run = RunState()
    run.add_all([hello(0, pid=4242), *steps(20, 0.05), end(code=0)])
    assert "end         exited (exit code 3)" in summary_text([run], pid=4242, exit_code=3)
    assert "end         exited (exit code 0)" in summary_text([run], pid=999, exit_code=3)  # a launcher's code


def anatomy_steps(n: int, forward: float, backward: float, optimizer: float, other: float = 0.0007,
                  wait: float = 0.0, jitter: float = 0.0, seed: int = 0) -> list[Step]:
    """Steps with their anatomy; `jitter` spreads each phase uniformly by +-that fraction (seeded)."""
    rng = random.Random(seed)

    def j(x: float) -> float:
        return x * (1 + rng.uniform(-jitter, jitter))

    out = []
    for i in range(n):
        f, b, o, r, d = j(forward), j(backward), j(optimizer), j(other), j(wait)
        wall = f + b + o + r + d
        out.append(Step(t=1001.0 + (i + 1) * wall, step=i, wall=wall, data_wait=d, samples=32,
                        forward_s=f, backward_s=b, optimizer_s=o, other_s=r, phase_clock="host"))
    return out


def _mild(ranks: int, slow: int | None, wait_in: str = "backward", jitter: float = 0.0) -> JobState:
    """A DDP job of 44 ms steps where `slow`'s optimizer takes 19.9 ms against the others' 6.6 ms
    (+13.3 ms, the step +30% over the 30.9 ms it would be): the others wait 13.3 ms in `wait_in`."""
    streams: dict[int, list[Event]] = {}
    for r in range(ranks):
        phases = {"forward": 0.005, "backward": 0.0184, "optimizer": 0.0066, "other": 0.0007}
        if slow is not None and r == slow:
            phases["optimizer"] += 0.0133
        elif slow is not None:
            phases[wait_in] += 0.0133
        streams[r] = [*anatomy_steps(60, **phases, jitter=jitter, seed=r), end()]
    return job_of(streams)


@pytest.mark.parametrize("ranks", [2, 8])
def test_a_mild_straggler_is_found_by_its_phase_and_the_phase_is_named(ranks: int) -> None:
    job = _mild(ranks, slow=1)
    (s,) = stragglers(job)
    assert s.rank == 1 and s.basis == "phase" and s.where == "optimizer"
    assert s.extra_s == pytest.approx(0.0133)
    assert s.text.startswith("rank 1: optimizer +13.3 ms per step (19.9 ms vs median 6.6 ms of the other ranks)")
    (f,) = job_findings(job)
    assert f.title == "rank 1 is a straggler (compute)" and "optimizer" in f.fix


def test_the_rank_that_waits_is_not_named_whichever_phase_it_waits_in() -> None:
    # DDP's buffer broadcast puts the wait in the next forward, a logged loss all-reduce in "other"
    for wait_in in ("forward", "other"):
        assert [s.label for s in stragglers(_mild(2, slow=1, wait_in=wait_in))] == ["rank 1"]


@pytest.mark.parametrize("ranks", [2, 8])
def test_balanced_or_noisy_ranks_name_nobody(ranks: int) -> None:
    assert stragglers(_mild(ranks, slow=None)) == []
    assert stragglers(_mild(ranks, slow=None, jitter=0.3)) == []  # each phase of each step +-30%
    assert [s.rank for s in stragglers(_mild(ranks, slow=1, jitter=0.3))] == [1]


def test_a_windowed_straggler_says_the_phase_its_extra_time_is_in() -> None:
    job = _ddp(slow=1, extra_s=0.030)
    plain = stragglers(job)[0]
    assert plain.where == "" and "compute +30.0 ms); over the latest 3" in plain.text  # no anatomy: no phase to name
    streams: dict[int, list[Event]] = {}
    for r in range(2):
        mine = 0.030 if r == 1 else 0.0
        step_wall = 0.035
        wins = [window(s, step_wall, step_wall - 0.004 - mine) for s in (10, 30, 50)]
        steps_ = anatomy_steps(60, forward=0.002, backward=0.031 - mine, optimizer=0.001 + mine, other=0.001)
        streams[r] = [*steps_, *wins, end()]
    (s,) = stragglers(job_of(streams))
    assert s.basis == "outside-collective" and s.where == "optimizer"
    assert s.text.endswith("in optimizer +30.0 ms per step; over the latest 3 profiler windows, "
                           "slower in 3 of the run's 3 profiler windows")


def test_the_headless_job_block_names_the_phase() -> None:
    text = summary_text([run for _, run in _mild(2, slow=1).ranks()])
    assert "straggler   rank 1: optimizer +13.3 ms per step" in text


def test_a_rank_that_waits_in_collectives_is_no_straggler_for_its_data_wait() -> None:
    # As on the balanced gloo job: rank 1's spawned loader worker makes it wait 5.5 ms for data against
    # rank 0's 1.8 ms, but the profiler windows show it spends less time outside collectives than rank 0.
    streams: dict[int, list[Event]] = {}
    for r, (wait, outside) in enumerate([(0.0018, 0.009), (0.0055, 0.007)]):
        steps_ = anatomy_steps(60, forward=0.002, backward=0.006, optimizer=0.001, other=0.001, wait=wait)
        wall = steps_[0].wall
        streams[r] = [*steps_, *(window(s, wall, wall - outside) for s in (10, 30, 50)), end()]
    assert stragglers(job_of(streams)) == []
    streams = {r: [e for e in events if not isinstance(e, ProfileWindow)] for r, events in streams.items()}
    assert [s.where for s in stragglers(job_of(streams))] == ["data wait"]  # without windows nothing says otherwise


def _optimizer_slow_in(lo: int, hi: int, n: int = 400, ranks: int = 2) -> JobState:
    """A balanced DDP job of 44 ms steps in which rank 1's optimizer is +13.3 ms in steps lo..hi-1 only
    (the others wait as long in backward then): a passing slowdown, as a loaded machine made one."""
    streams: dict[int, list[Event]] = {}
    for r in range(ranks):
        base = anatomy_steps(n, forward=0.005, backward=0.0184, optimizer=0.0066, other=0.0007, seed=r)
        out = []
        for s in base:
            if lo <= s.step < hi:
                extra = 0.0133
                if r == 1:
                    s = dataclasses.replace(s, optimizer_s=(s.optimizer_s or 0.0) + extra, wall=s.wall + extra)
                else:
                    s = dataclasses.replace(s, backward_s=(s.backward_s or 0.0) + extra, wall=s.wall + extra)
            out.append(s)
        streams[r] = [*out, end()]
    return job_of(streams)


def test_a_slowdown_that_passed_before_the_end_is_not_a_straggler() -> None:
    # As on the loaded 2-core box: rank 1's optimizer p50 in 25-step spans 6.6 ... 19.9 19.9 19.9 6.6 ms.
    # The last 50 steps (350-399) hold 30 slow ones and name it; the run says it kept pace but for a while.
    assert stragglers(_optimizer_slow_in(300, 380)) == []
    assert job_findings(_optimizer_slow_in(300, 380)) == []


def test_an_excess_of_the_latest_steps_only_is_said_to_be_recent() -> None:
    job = _optimizer_slow_in(340, 400)
    (s,) = stragglers(job)
    assert s.rank == 1 and s.recent and s.persistence is not None and s.persistence.latest
    assert "(the excess is recent)" in s.text and "over its last 50 steps" in s.text
    (f,) = job_findings(job)
    assert f.title == "rank 1 is slower lately (compute)" and f.severity == "low"
    assert "kept pace" in f.cause


def test_a_straggler_over_the_whole_run_is_named_with_what_it_rests_on() -> None:
    job = _optimizer_slow_in(0, 400)
    (s,) = stragglers(job)
    assert not s.recent
    assert s.text.endswith("over its last 50 steps, slower in 16 of the run's 16 spans of 25 steps")
    (f,) = job_findings(job)
    assert f.title == "rank 1 is a straggler (compute)"
    assert "p50s over its last 50 steps; the rank table's p50s are over every measured step" in f.evidence[1]
    text = summary_text([run for _, run in job.ranks()])
    assert "(p50s over each rank's measured steps, all but its warm-up)" in text


def test_a_rank_whose_threads_waited_for_a_core_is_said_so() -> None:
    streams: dict[int, list[Event]] = {}
    for r in range(2):
        phases = {"forward": 0.005, "backward": 0.0184, "optimizer": 0.0066, "other": 0.0007}
        phases["optimizer" if r == 1 else "backward"] += 0.0133
        readings = [Sample(t=1001.0 + 0.2 * k, procs=[], cpu_wait=1.2 if r == 1 else 0.4) for k in range(1, 80)]
        streams[r] = [*anatomy_steps(400, **phases, seed=r), *readings, end()]
    job = job_of(streams)
    (s,) = stragglers(job)
    assert "its threads waited 1.2 cores' worth for a CPU (the others 0.4)" in s.text
    (f,) = job_findings(job)
    assert "waited 1.2 cores' worth for a CPU meanwhile" in f.cause


def test_a_rank_whose_loader_workers_waited_for_a_core_is_said_so_and_not_sent_to_add_workers() -> None:
    # The balanced 2-rank gloo job beside two CPU hogs: rank 0 read +4.0 ms of data wait a step, in 3 of the
    # run's 4 spans, while its main process's threads waited under a quarter of a core: its worker waited.
    from pitstop.events import Proc

    def streams_with(worker_wait: float) -> dict[int, list[Event]]:
        out: dict[int, list[Event]] = {}
        for r in range(2):
            procs = [Proc(pid=200 + r, role="worker", cpu=60.0, rss=1, loader=1,
                          cpu_wait=worker_wait if r == 0 else 0.1)]
            readings = [Sample(t=1001.0 + 0.2 * k, procs=procs, cpu_wait=0.1) for k in range(1, 40)]
            out[r] = [*steps(100, 0.030, wait=0.010 if r == 0 else 0.002), *readings, end()]
        return out

    (s,) = stragglers(job_of(streams_with(0.7)))
    assert s.cause == "data wait" and not s.threads_waited
    assert "its DataLoader workers waited 0.7 cores' worth for a CPU (the others' 0.1)" in s.text
    (f,) = job_findings(job_of(streams_with(0.7)))
    assert "Its DataLoader workers waited 0.7 cores' worth for a CPU meanwhile" in f.cause
    assert f.fix.startswith("# its DataLoader workers wait for a CPU: first free that machine's cores")
    # Workers that got their cores: the data-wait straggler and its fix as before, no word of waiting.
    (f,) = job_findings(job_of(streams_with(0.05)))
    assert "waited" not in f.cause + f.evidence[0]
    assert f.fix.startswith("# give that rank's DataLoader more workers")


def test_a_phase_is_never_given_more_extra_time_than_the_whole_it_is_part_of() -> None:
    # The profiler windows show rank 1 +20 ms outside collectives; its unprofiled steps' optimizer +30 ms.
    streams: dict[int, list[Event]] = {}
    for r in range(2):
        step_wall = 0.035
        wins = [window(s, step_wall, step_wall - 0.004 - (0.020 if r == 1 else 0.0)) for s in (10, 30, 50)]
        mine = 0.030 if r == 1 else 0.0
        streams[r] = [*anatomy_steps(60, forward=0.002, backward=0.031 - mine, optimizer=0.001 + mine,
                                     other=0.001), *wins, end()]
    (s,) = stragglers(job_of(streams))
    assert "compute +20.0 ms), in optimizer;" in s.text and "+30.0 ms" not in s.text


def test_one_profiler_window_alone_names_no_straggler_where_the_steps_show_nothing() -> None:
    # The balanced gloo job beside a CPU hog: one window put rank 0 at 42.0 ms outside collectives against
    # rank 1's 20.7 ms; its steps' compared phases were even (the extra time, if any, in backward).
    streams: dict[int, list[Event]] = {}
    for r in range(2):
        step_wall = 0.070
        wins = [window(30, step_wall, step_wall - (0.042 if r == 0 else 0.0207))]
        steps_ = anatomy_steps(60, forward=0.01, backward=0.05, optimizer=0.005, other=0.001, seed=r)
        streams[r] = [*steps_, *wins, end()]
    assert stragglers(job_of(streams)) == []
    # ...and where the steps show it too (its optimizer), the same window names it.
    for r in range(2):
        mine = 0.020 if r == 0 else 0.0
        wins = [window(30, 0.070, 0.070 - (0.042 if r == 0 else 0.0207))]
        steps_ = anatomy_steps(60, forward=0.01, backward=0.05 - mine, optimizer=0.005 + mine, other=0.001, seed=r)
        streams[r] = [*steps_, *wins, end()]
    (s,) = stragglers(job_of(streams))
    assert s.label == "rank 0" and s.where == "optimizer"


def test_a_windowed_straggler_s_share_is_of_the_job_s_step_in_the_same_windows() -> None:
    # Steps of 20 ms, but 40 ms inside the profiler windows (profiled, or the run slower then): rank 1's
    # 30 ms excess there was taken of the 20 ms step, "up to 150% shorter job steps".
    streams: dict[int, list[Event]] = {}
    for r in range(3):
        walls = [0.040 if any(s <= i < s + 5 for s in (10, 30, 50)) else 0.020 for i in range(60)]
        t, out = 1001.0, []
        for i, wall in enumerate(walls):
            t += wall
            out.append(Step(t=t, step=i, wall=wall, data_wait=0.001, samples=32))
        outside = 0.034 if r == 1 else 0.004
        streams[r] = [*out, *(window(s, 0.040, 0.040 - outside) for s in (10, 30, 50)), end()]
    (s,) = stragglers(job_of(streams))
    assert s.basis == "outside-collective" and s.extra_s == pytest.approx(0.030)
    assert s.job_step_s == pytest.approx(0.040) and s.share == pytest.approx(0.75)
    (f,) = job_findings(job_of(streams))
    assert f.gain == "up to 75% shorter job steps if rank 1 kept pace"
