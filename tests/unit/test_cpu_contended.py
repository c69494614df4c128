"""Tests the cpu-contended finding on built runs, and the threads key of a tuned config."""

from __future__ import annotations

from pathlib import Path

from pitstop.analysis import Finding, RunState, advise
from pitstop.config import load_config, save_config
from pitstop.events import Proc, Runtime, Sample, Step
from pitstop.tuning.evidence import suggested
from pitstop.tuning.results import Candidate


def hogged_run(other_pct: float, swing: bool, threads: int = 2, cores: int = 2,
               cpu_wait: float | None = None, waits: list[float] | None = None) -> RunState:
    """A 2-core CPU run: the main process uses 0.9 cores; the machine is busy by `other_pct` more percent."""
    run = RunState()
    run.add(Runtime(t=0.5, torch_version="2.13", cuda_version=None, device_type="cpu", cpu_count=cores,
                    usable_cpus=cores, torch_threads=threads))
    t = 1.0
    for i in range(60):
        wall = 0.9 if swing and i % 10 == 9 else 0.3  # a step in ten waits for a core
        t += wall
        run.add(Step(t=t, step=i, wall=wall, data_wait=0.0, samples=8))
    for i in range(20):
        wait = cpu_wait if waits is None else (waits[i] if i < len(waits) else None)
        run.add(Sample(t=1.0 + i * 1.0, system_cpu=45.0 + other_pct,
                       procs=[Proc(pid=1, role="main", cpu=90.0, rss=1)], cpu_wait=wait))
    return run


def contended(run: RunState) -> Finding | None:
    advice = advise(run)
    assert advice.failures == ()
    return next((f for f in advice.findings if f.rule == "cpu-contended"), None)


def test_cpu_contended_fires_with_other_load_beyond_the_cores_and_swinging_steps() -> None:
    f = contended(hogged_run(other_pct=50.0, swing=True))  # other processes: one of 2 cores
    assert f is not None and f.knob == "threads"
    assert f.evidence[0] == ("torch runs 2 intra-op threads, no DataLoader workers, and other processes kept "
                             "1.00 cores busy: 3.0 cores wanted, 2 on the machine")
    assert f.evidence[1].startswith("step time p95 900.0 ms is 3.0x the p50 300.0 ms")
    assert "torch.set_num_threads(1)" in f.fix and "OMP_NUM_THREADS=1" in f.fix
    assert suggested("threads", f.fix) == 1  # the value the tuner tries first


def test_cpu_contended_quiet_on_an_idle_machine_steady_steps_or_one_thread() -> None:
    assert contended(hogged_run(other_pct=0.0, swing=True)) is None  # nobody else on the cores
    assert contended(hogged_run(other_pct=50.0, swing=False)) is None  # steps do not swing
    assert contended(hogged_run(other_pct=50.0, swing=True, threads=1)) is None  # nothing left to give back


def test_cpu_contended_fires_on_steady_steps_whose_threads_wait_for_a_core() -> None:
    # A hog from the first step to the last: no swing, but the run queue says it.
    f = contended(hogged_run(other_pct=50.0, swing=False, cpu_wait=0.6))
    assert f is not None and f.knob == "threads"
    assert "waited for a free core 0.60 cores' worth of the time" in f.evidence[2]
    assert contended(hogged_run(other_pct=50.0, swing=False, cpu_wait=0.05)) is None  # it got its cores
    assert contended(hogged_run(other_pct=0.0, swing=False, cpu_wait=0.6)) is None  # nobody else: its own


def test_the_threads_knob_is_written_to_the_config_and_read_back(tmp_path: Path) -> None:
    cfg = Candidate.of({"threads": 1, "num_workers": 1}).to_config()
    path = save_config(cfg, tmp_path / "pitstop.toml")
    text = path.read_text()
    assert "threads = 1" in text and "torch.set_num_threads" in text
    assert load_config(path).compute_settings() == {"threads": 1}
    assert Candidate.from_config(load_config(path)) == Candidate.of({"threads": 1, "num_workers": 1})


def test_the_gain_of_fewer_threads_is_bounded_by_the_share_its_threads_waited() -> None:
    # Calibration's threads-hog (2 threads beside one hog on 2 cores) measured x1.60 with 1 thread, and the
    # finding stated no gain. A step stalls at most while a thread waits: 0.6 cores' worth bounds it at 2.50x.
    f = contended(hogged_run(other_pct=50.0, swing=False, cpu_wait=0.6))
    assert f is not None
    assert f.gain.startswith("at most 2.50x (")
    assert "a bound, not a prediction" in f.gain
    # A whole core's worth of waiting bounds nothing: no figure is stated, the tuner measures it.
    f = contended(hogged_run(other_pct=50.0, swing=True, cpu_wait=1.2))
    assert f is not None and "at most" not in f.gain and "too near a whole core's worth for anything to bound it" in f.gain


def test_the_bound_allows_for_how_the_readings_swing_and_wants_three_of_them() -> None:
    # Calibration's threads-hog read 0.34-0.78 cores a second; a quick run's mean of 0.39 from its few
    # readings stated "at most 1.65x" where 1 thread measured 1.95x. Steady readings bound as before.
    steady = contended(hogged_run(other_pct=50.0, swing=False, cpu_wait=0.6))
    assert steady is not None and steady.gain.startswith("at most 2.50x (")
    assert "mean of 19 readings; 0.60 allowing for how they swing" in steady.gain
    # Readings that swing 0.2-0.6 (mean 0.41 over the 19 from the first measured step, as the low
    # quick run): the bound is taken above the mean.
    swinging = contended(hogged_run(other_pct=50.0, swing=False, waits=[0.2, 0.6] * 10))
    assert swinging is not None
    assert "waited for a core 0.41 cores' worth of the time (mean of 19 readings; 0.50 allowing" in swinging.gain
    assert swinging.gain.startswith("at most 2.02x (")  # 1 / (1 - 0.50), not 1 / (1 - 0.41) = 1.69x
    # Two readings cannot say how far one swings: no figure.
    few = contended(hogged_run(other_pct=50.0, swing=False, waits=[0.6, 0.6, 0.6]))  # the first before the measured steps
    assert few is not None and "at most" not in few.gain
    assert "read 2 times while the steps ran, too few to bound the gain" in few.gain
