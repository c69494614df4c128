"""Tests of the issue-14 findings: memory creep, epoch-boundary stall, evaluation share, CPU oversubscription,
moderate data wait. Each fires on a hand-built run that shows it and stays quiet on one that does not."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from pitstop.analysis import RULE_IDS, Finding, RunState, advise, findings
from pitstop.events import DataLoaderInfo, Gpu, Proc, Runtime, Sample, Step

MiB = 1 << 20
GiB = 1 << 30


@dataclass(frozen=True)
class RuntimeWithMemory(Runtime):
    """A Runtime as it will be once the agent records the memory the process may use (proposed `host_mem_total`)."""

    host_mem_total: int | None = None


def rule(run: RunState, rule_id: str) -> Finding | None:
    assert rule_id in RULE_IDS
    advice = advise(run)
    assert advice.failures == ()
    return next((f for f in advice.findings if f.rule == rule_id), None)


def cpu_runtime(usable: int = 8, torch_threads: int | None = None, host_mem_total: int | None = None) -> Runtime:
    if host_mem_total is not None:
        return RuntimeWithMemory(t=0.5, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=usable,
                                 usable_cpus=usable, shm_bytes=8 * GiB, torch_threads=torch_threads,
                                 host_mem_total=host_mem_total)
    return Runtime(t=0.5, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=usable,
                   usable_cpus=usable, shm_bytes=8 * GiB, torch_threads=torch_threads)


def loader(workers: int = 2, persistent: bool = False, dataset_len: int | None = 640, batch: int = 32,
           ident: int = 1) -> DataLoaderInfo:
    return DataLoaderInfo(t=0.6, id=ident, num_workers=workers, batch_size=batch, pin_memory=False,
                          persistent_workers=persistent, prefetch_factor=2 if workers else None,
                          dataset_len=dataset_len, dataset="Images")


# -- memory creep ---------------------------------------------------------------
def creeping_run(per_step: float, steps: int = 600, plateau_at: int | None = None, field: str = "host_rss",
                 host_mem_total: int | None = None) -> RunState:
    run = RunState()
    run.add(cpu_runtime(host_mem_total=host_mem_total))
    t = 1.0
    base = 500 * MiB
    for i in range(steps):
        t += 0.05
        grown = per_step * (min(i, plateau_at) if plateau_at is not None else i)
        reading = int(base + grown) // (1 * MiB) * MiB  # RSS is read every ~0.5 s: readings repeat
        run.add(Step(t=t, step=i, wall=0.05, data_wait=0.0, samples=32, **{field: reading}))
    return run


def test_memory_creep_fires_with_rate_and_time_to_the_limit() -> None:
    run = creeping_run(per_step=1 * MiB, host_mem_total=16 * GiB)  # 1 MiB a step, as `history.append(out)` does
    f = rule(run, "memory-creep")
    assert f is not None and f.title == "Host RSS creeps up every step"
    assert "1000 MiB per 1,000 steps" in f.evidence[0] or "1.0 GiB per 1,000 steps" in f.evidence[0], f.evidence
    assert "reaches the memory this process may use (16 GiB) in" in f.evidence[2]
    # (16 GiB - ~1.1 GiB) / 1 MiB a step * 0.05 s = ~13.0 min: urgent
    assert "13 min" in f.evidence[2] and f.severity == "high"
    assert "loss.item()" in f.fix and "detach" in f.fix


def test_memory_creep_without_the_limit_in_the_record_says_so() -> None:
    f = rule(creeping_run(per_step=1 * MiB), "memory-creep")
    assert f is not None and f.severity == "medium"
    assert "time to the limit: unknown (the record does not carry the machine's memory size)" in f.evidence


def test_memory_creep_on_cuda_allocated() -> None:
    run = creeping_run(per_step=2 * MiB, field="mem_allocated")
    run.add(Sample(t=40.0, gpus=[Gpu(index=0, name="A100", util=90.0, mem_used=3 * GiB, mem_total=40 * GiB)]))
    f = rule(run, "memory-creep")
    assert f is not None and f.title.startswith("CUDA allocated memory creeps") and "GPU's memory (40 GiB)" in f.evidence[2]


def test_memory_that_grows_then_levels_off_is_not_a_creep() -> None:
    # The demo: RSS rises through warm-up and its first profiler window, then stays flat.
    assert rule(creeping_run(per_step=2 * MiB, plateau_at=250), "memory-creep") is None


def test_small_or_short_growth_is_not_a_creep() -> None:
    assert rule(creeping_run(per_step=0.05 * MiB), "memory-creep") is None  # 30 MiB over 600 steps
    assert rule(creeping_run(per_step=1 * MiB, steps=150), "memory-creep") is None  # too few steps to tell


# -- epoch-boundary stall -------------------------------------------------------
def epoch_run(persistent: bool = False, spike: float = 0.5, epochs: int = 6, workers: int = 2) -> RunState:
    run = RunState()
    run.add(cpu_runtime())
    run.add(loader(workers=workers, persistent=persistent, dataset_len=640, batch=32))  # 20 steps an epoch
    t = 1.0
    for i in range(20 * epochs):
        wait = 0.002 + (spike if i % 20 == 0 else 0.0)
        wall = 0.05 + wait
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=wait, samples=32, loader=1))
    return run


def test_epoch_stall_fires_with_spike_share_and_fix() -> None:
    f = rule(epoch_run(), "epoch-stall")
    assert f is not None and f.knob == "num_workers"
    assert f.evidence[0].startswith("the first 2 steps of each epoch wait 500.0 ms more for data than usual")
    assert "steps 20, 40, 60, 80, 100" in f.evidence[0]
    assert "640 samples / batch_size=32 = 20 steps per epoch" in f.evidence[2]
    # 5 x 0.5 s of 6 s of steps (3 warm-up steps in the first epoch out)
    assert f.severity == "medium" and "persistent_workers=True" in f.fix


def test_epoch_stall_quiet_with_persistent_workers_no_workers_or_no_spike() -> None:
    assert rule(epoch_run(persistent=True), "epoch-stall") is None
    assert rule(epoch_run(workers=0), "epoch-stall") is None
    assert rule(epoch_run(spike=0.0), "epoch-stall") is None
    assert rule(epoch_run(epochs=2), "epoch-stall") is None  # one boundary: not yet a pattern


def test_epoch_stall_counts_an_eval_marked_first_step() -> None:
    run = epoch_run()
    # the step holding an evaluation is the new epoch's first: marked, its data_wait still the training loader's
    steps = list(run.steps)
    fresh = RunState()
    fresh.add(cpu_runtime())
    fresh.add(loader())
    for s in steps:
        fresh.add(dataclasses.replace(s, mark="eval", eval_s=0.3) if s.step % 20 == 0 and s.step else s)
    assert rule(fresh, "epoch-stall") is not None


# -- evaluation share -----------------------------------------------------------
def eval_run(passes: int, eval_s: float, mark: str = "eval", each: int | None = None) -> RunState:
    """100 steps, `passes` of them holding `eval_s` of evaluation (or of `mark`), `each` passes in each (None:
    a record made before steps counted their passes)."""
    run = RunState()
    run.add(cpu_runtime())
    run.add(loader(workers=0, ident=1))
    run.add(loader(workers=0, ident=2, batch=100))
    t = 1.0
    for i in range(100):
        holds = passes and i % (100 // passes) == 99 // passes
        wall = 0.05 + (eval_s if holds else 0.0)
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=32, loader=1,
                     mark=mark if holds else None, eval_s=eval_s if holds else 0.0, passes=each if holds else None))
    return run


def test_eval_share_fires_with_its_share_and_the_eval_loader() -> None:
    f = rule(eval_run(passes=4, eval_s=1.0), "eval-share")  # 4 s of 9.0 s (from the first step's start on)
    assert f is not None and f.severity == "medium"
    assert f.evidence[0].startswith("4 evaluation passes took 4.0 s, 44% of the training's 9 s (1.00 s each)")
    assert "evaluation DataLoader (Images, batch_size=100, num_workers=0)" in f.evidence[2]
    assert "num_workers=2" in f.fix and "inference_mode" in f.fix


def test_eval_share_is_of_the_training_not_of_the_set_up_before_it() -> None:
    # calibration's frequent-eval spent 18 s of a 31 s run before its first step: its evaluation, about half
    # of its training loop, read 19% of the run, and "evaluate half as often" promised a tenth of what it gave.
    run = eval_run(passes=4, eval_s=0.3)  # 1.2 s of evaluation in 6.2 s of training: 19%
    run.add(Sample(t=-29.0, procs=[], system_cpu=10.0))  # 30 s of set-up (imports, the dataset) before it
    f = rule(run, "eval-share")
    assert f is not None and "19% of the training's 6 s" in f.evidence[0]
    assert "gives back ~10% of the training time" in f.gain


def test_eval_share_quiet_for_a_small_share_or_a_single_pass() -> None:
    assert rule(eval_run(passes=4, eval_s=0.05), "eval-share") is None  # ~4%
    assert rule(eval_run(passes=1, eval_s=5.0), "eval-share") is None  # a final evaluation
    assert rule(eval_run(passes=0, eval_s=0.0), "eval-share") is None


def test_eval_share_counts_each_pass_of_a_step_and_never_a_rollout() -> None:
    # ignite's evaluator over the training loader, then the validation loader: 2 passes a step
    f = rule(eval_run(passes=4, eval_s=1.0, each=2), "eval-share")
    assert f is not None and f.evidence[0].startswith("8 evaluation passes took 4.0 s, 44% of the training's 9 s (500.0 ms each)")
    # stable-baselines3's PPO: its rollouts are the data it trains on, not an evaluation to run less often
    run = eval_run(passes=4, eval_s=1.0, mark="rollout", each=1)
    assert rule(run, "eval-share") is None
    assert (run.rollouts, run.rollout_s, run.eval_passes) == (4, 4.0, 0)


# -- CPU oversubscription -------------------------------------------------------
def threads_run(threads: int | None, worker_cpu: float, busy: float = 97.0, usable: int = 4) -> RunState:
    run = RunState()
    run.add(cpu_runtime(usable=usable, torch_threads=threads))
    run.add(loader(workers=2))
    t = 1.0
    for i in range(30):
        t += 0.05
        run.add(Step(t=t, step=i, wall=0.05, data_wait=0.0, samples=32, loader=1))
    for i in range(10):
        run.add(Sample(t=1.0 + i * 0.2, system_cpu=busy, procs=[
            Proc(pid=1, role="main", cpu=250.0, rss=1), Proc(pid=2, role="worker", cpu=worker_cpu, rss=1, loader=1),
            Proc(pid=3, role="worker", cpu=worker_cpu, rss=1, loader=1)]))
    return run


def test_cpu_oversubscribed_fires_when_threads_and_busy_workers_exceed_the_cores() -> None:
    f = rule(threads_run(threads=4, worker_cpu=60.0), "cpu-oversubscribed")
    assert f is not None
    assert f.evidence[0] == ("torch runs 4 intra-op threads and the DataLoader workers use 1.20 cores: "
                             "5.2 cores wanted, 4 usable")
    assert "torch.set_num_threads(2)" in f.fix and "OMP_NUM_THREADS=2" in f.fix


def test_cpu_oversubscribed_quiet_without_the_thread_count_idle_workers_or_idle_cpus() -> None:
    assert rule(threads_run(threads=None, worker_cpu=60.0), "cpu-oversubscribed") is None  # older records
    assert rule(threads_run(threads=4, worker_cpu=5.0), "cpu-oversubscribed") is None  # workers mostly idle
    assert rule(threads_run(threads=4, worker_cpu=60.0, busy=50.0), "cpu-oversubscribed") is None
    assert rule(threads_run(threads=2, worker_cpu=60.0), "cpu-oversubscribed") is None  # 3.2 of 4


# -- moderate data wait ---------------------------------------------------------
def waiting_run(frac: float, workers: int = 0) -> RunState:
    run = RunState()
    run.add(cpu_runtime(usable=4))
    run.add(loader(workers=workers))
    t = 1.0
    for i in range(40):
        t += 0.1
        run.add(Step(t=t, step=i, wall=0.1, data_wait=0.1 * frac, samples=32, loader=1))
    return run


def test_data_wait_moderate_grades_a_wait_under_the_threshold() -> None:
    f = rule(waiting_run(0.19), "data-wait-moderate")
    assert f is not None and f.severity == "low"
    assert f.evidence[0].startswith("data wait: 19% (19.0 ms of 100.0 ms) of the mean step, over 37 steps")
    assert "worth up to 1.23x" in f.evidence[0]
    # No CPU reading: a bound; taking each batch from a worker (~0.3 ms) is in it.
    assert "num_workers=1" in f.fix and f.gain.startswith("at most 1.23x (100.0 ms to ~81.3 ms) in the mean step")
    assert "num_workers=3" in rule(waiting_run(0.19, workers=2), "data-wait-moderate").fix  # type: ignore[union-attr]
    # 12%: at most 1.14x if hidden entirely, under what workers' own costs eat: no worker count.
    small = rule(waiting_run(0.12, workers=2), "data-wait-moderate")
    assert small is not None and "num_workers=" not in small.fix and small.knob is None
    # More workers than free cores (minGPT's adder: 4 on 2 cores): never more, as workers-oversubscribed says.
    crowded = rule(waiting_run(0.12, workers=6), "data-wait-moderate")
    assert crowded is not None and "num_workers=6" not in crowded.fix


def test_data_wait_moderate_never_beside_data_wait_and_quiet_below_ten_percent() -> None:
    high = findings(waiting_run(0.4))
    assert "data-wait" in [f.rule for f in high] and "data-wait-moderate" not in [f.rule for f in high]
    assert rule(waiting_run(0.05), "data-wait-moderate") is None


def test_cpu_oversubscribed_reads_the_cpu_while_steps_ran_not_at_start_up() -> None:
    run = threads_run(threads=4, worker_cpu=60.0)
    quiet = RunState()
    quiet.add(cpu_runtime(usable=4, torch_threads=4))
    quiet.add(loader(workers=2))
    for i in range(20):  # imports and set-up: the CPUs idle before the first step
        quiet.add(Sample(t=0.1 + i * 0.04, system_cpu=5.0))
    for event in list(run.steps) + list(run.samples):
        quiet.add(event)
    assert rule(quiet, "cpu-oversubscribed") is not None
