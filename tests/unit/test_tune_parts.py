"""Tests the tuner's parts without processes: measurement, classification, space, journal, budget."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from pitstop.errors import TuneError, UsageError
from pitstop.events import SCHEMA_VERSION, DataLoaderInfo, End, Event, Hello, Loss, Step
from pitstop.profiling.record import RecordWriter
from pitstop.tuning.command import add_arguments, parse_budget
from pitstop.tuning.journal import Journal, JournaledEvaluator
from pitstop.tuning.measure import measure
from pitstop.tuning.results import ALIASES, KNOBS, Candidate, Facts, TrialResult
from pitstop.tuning.runner import classify, error_line
from pitstop.tuning.space import build_space, parse_knobs, worker_values


def hello() -> Hello:
    return Hello(schema=SCHEMA_VERSION, pitstop_version="0", session="s", pid=1, ppid=0, host="h",
                 argv=[], cwd="/", started=0.0, python="3", mode="trial")


def steps(walls: list[float], samples: int | None = 8, wait: float = 0.0) -> list[Event]:
    t = 100.0
    out: list[Event] = []
    for i, wall in enumerate(walls):
        t += wall
        out.append(Step(t=t, step=i, wall=wall, data_wait=wait * wall, samples=samples))
    return out


def write(path: Path, events: list[Event]) -> Path:
    writer = RecordWriter(path)
    for e in events:
        writer.write(e)
    writer.close()
    return path


def test_warmup_is_dropped_and_the_median_window_reported() -> None:
    walls = [5.0, 5.0] + [0.1] * 20  # two slow warm-up steps must not count
    m = measure([hello(), *steps(walls)], warmup=2)
    assert m.measured_steps == 20
    assert m.throughput == pytest.approx(80.0)
    assert m.spread == pytest.approx(0.0)
    assert m.unit == "samples/s"


def test_steps_per_second_when_samples_are_unknown() -> None:
    m = measure([hello(), *steps([0.5] * 12, samples=None)], warmup=2)
    assert m.unit == "steps/s" and m.throughput == pytest.approx(2.0)


def test_compute_throughput_leaves_out_data_wait() -> None:
    m = measure([hello(), *steps([0.1] * 20, wait=0.75)], warmup=0)
    assert m.throughput == pytest.approx(80.0)
    assert m.compute_throughput == pytest.approx(320.0)


def test_round_robin_bursts_of_two_workers_are_not_jitter() -> None:
    loader = DataLoaderInfo(t=0, id=1, num_workers=2, batch_size=8, pin_memory=False,
                            persistent_workers=False, prefetch_factor=2)
    walls = [0.002, 0.05] * 15  # a pair arrives together: fast, slow, fast, slow...
    m = measure([hello(), loader, *steps(walls)], warmup=0)
    assert m.spread is not None and m.spread < 0.01
    assert m.jitter is not None and m.jitter < 0.01


def test_classify_reads_oom_nan_crash_hang_and_rejections(tmp_path: Path) -> None:
    c = Candidate.of({"num_workers": 2})
    good = [hello(), *steps([0.1] * 20), End(t=200, steps=20, dropped=0, reason="trial-complete")]
    rec = write(tmp_path / "a.jsonl", good)
    ok = classify(c, 15, "workers", 0, False, 60, rec, "", 5, None)
    assert ok.status == "ok" and ok.throughput == pytest.approx(80.0) and not ok.notes

    log = "Traceback (most recent call last):\n  File x\ntorch.OutOfMemoryError: CUDA out of memory. Tried\n"
    assert classify(c, 15, "batch", 1, False, 60, rec, log, 5, None).status == "oom"
    hang = classify(c, 15, "w", None, True, 60, rec, "", 5, None)
    assert hang.status == "hang" and "60 s trial limit" in hang.reason
    nan = write(tmp_path / "n.jsonl", [hello(), *steps([0.1] * 20),
                                       Loss(t=1, steps=[7], values=[None], nonfinite=[7])])
    assert classify(c, 15, "w", 0, False, 60, nan, "", 5, None).reason == "loss was NaN/inf at step 7"
    skipped = write(tmp_path / "s.jsonl", [hello(), DataLoaderInfo(
        t=0, id=1, num_workers=0, batch_size=8, pin_memory=False, persistent_workers=True,
        prefetch_factor=None, skipped={"num_workers": "persistent_workers=True needs num_workers > 0"}),
        *steps([0.1] * 20)])
    rejected = classify(c, 15, "w", 0, False, 60, skipped, "", 5, None)
    assert rejected.status == "rejected" and "persistent_workers" in rejected.reason
    missing = classify(c, 15, "w", 0, False, 60, tmp_path / "none.jsonl", "", 5, None)
    assert missing.status == "crash" and "agent did not start" in missing.reason
    short = classify(c, 15, "w", 0, False, 60, write(tmp_path / "t.jsonl", [hello(), *steps([0.1] * 8)]), "", 5, None)
    assert short.status == "short"


def test_amp_divergence_is_judged_only_against_losses_that_repeat(tmp_path: Path) -> None:
    events = [hello(), *steps([0.1] * 20), Loss(t=1, steps=list(range(5, 20)), values=[2.0] * 15)]
    path = write(tmp_path / "r.jsonl", events)
    bf16 = Candidate.of({"amp": "bf16"})

    def judged(references: list[list[float]]) -> TrialResult:
        return classify(bf16, 15, "compute", 0, False, 60, path, "", 5, references)

    once = judged([[1.0] * 10])  # one run of the script's own settings: whether it repeats is unknown
    assert once.status == "ok" and once.loss_check == "pending"
    agree = judged([[1.0] * 10, [1.02] * 10])
    assert agree.status == "diverged" and "baseline 1" in agree.reason
    # A script that draws its own seed: its own two runs already disagree (a GAN: 0.29 vs 0.37).
    seeds = judged([[1.0] * 10, [1.5] * 10])
    assert seeds.status == "ok" and seeds.loss_check == "unjudged"
    assert any("AMP stability could not be judged" in n and "its own seed?" in n for n in seeds.notes)
    workers = classify(Candidate.of({"num_workers": 1}), 15, "w", 0, False, 60, path, "", 5, [[1.0] * 10])
    assert workers.status == "ok" and not workers.loss_check  # only AMP changes the maths


def test_short_trials_say_what_can_help_and_count_what_they_measured(tmp_path: Path) -> None:
    c = Candidate.of({"num_workers": 2})
    none = classify(c, 15, "w", 0, False, 60, write(tmp_path / "z.jsonl", [hello()]), "", 5, None)
    assert none.status == "short" and "before its first training step" in none.reason
    assert "--steps" not in none.reason  # fewer steps cannot help a script that never steps
    few = classify(c, 15, "w", 0, False, 60, write(tmp_path / "f.jsonl", [hello(), *steps([0.1] * 12)]), "", 5, None)
    assert few.status == "short" and "after 12 steps" in few.reason and "--warmup" in few.reason
    ended = classify(c, 30, "w", 0, False, 60, write(tmp_path / "e.jsonl", [hello(), *steps([0.1] * 25)]), "", 5, None)
    assert ended.ok and ended.script_ended and ended.measured_steps == 20 and ended.steps == 30
    assert any("20 measured of 30 planned" in n for n in ended.notes)


def test_error_line_is_the_workers_original_exception() -> None:
    log = ("Traceback (most recent call last):\n  File \"t.py\"\nValueError: Caught ValueError in DataLoader "
           "worker process 0.\nOriginal Traceback (most recent call last):\n  File \"d.py\"\n"
           "ValueError: cannot load\n")
    assert error_line(log) == "ValueError: cannot load"
    assert error_line("just a line\n") == "just a line"


def test_space_respects_the_machine_and_says_why_knobs_are_skipped() -> None:
    facts = Facts(device_type="cpu", usable_cpus=8, shm_bytes=64 << 20, has_dataloader=True,
                  loader={"num_workers": 0, "batch_size": 32, "persistent_workers": False})
    space = build_space(facts, tune_batch=False, ranks=2)
    assert space.workers == [0, 1, 2]  # 8 CPUs / 2 ranks = 4, capped at 2 by a 64 MiB /dev/shm
    assert any("/dev/shm is 64 MiB" in n for n in space.notes)
    assert "no CUDA" in space.skipped["cudnn_benchmark"] and "no CUDA" in space.skipped["pin_memory"]
    assert "--batch-size" in space.skipped["batch_size"] and not space.batch
    assert space.compute == {"amp": ["bf16"]}
    big = build_space(Facts(usable_cpus=6, shm_bytes=8 << 30, has_dataloader=True,
                            loader={"num_workers": 0, "batch_size": 32}), tune_batch=True, ranks=1)
    assert big.workers == [0, 1, 2, 4, 6] and big.batch[:3] == [64, 128, 256]
    none = build_space(Facts(has_dataloader=False), tune_batch=True)
    assert none.skipped["num_workers"] == "the script builds no torch DataLoader" and not none.workers
    sampler = build_space(Facts(has_dataloader=True, batch_sampler=True, loader={"batch_size": None}), tune_batch=True)
    assert "batch_sampler" in sampler.skipped["batch_size"]


def test_knobs_and_worker_values_and_budget_parsing() -> None:
    assert parse_knobs("workers, pin,amp") == {"num_workers", "pin_memory", "amp"}
    with pytest.raises(UsageError, match="unknown knob 'wrokers'"):
        parse_knobs("wrokers")
    assert worker_values(6, 0) == [0, 1, 2, 4, 6] and worker_values(2, 3) == [0, 1, 2, 3]
    assert parse_budget("20").trials == 20
    assert parse_budget("90s").seconds == 90 and parse_budget("10m").seconds == 600
    assert parse_budget("1.5h").seconds == 5400
    with pytest.raises(UsageError):
        parse_budget("ten minutes")


def test_journal_replays_in_order_and_tolerates_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "j.jsonl"
    header = {"target": "python t.py"}
    runs: list[tuple[Candidate, int]] = []

    def evaluate(c: Candidate, n: int, stage: str) -> TrialResult:
        runs.append((c, n))
        return TrialResult(c, n, stage, "ok", throughput=float(len(runs)), duration=1.0)

    ev = JournaledEvaluator(Journal(path, header), evaluate)
    a = Candidate.of({"num_workers": 2})
    ev(Candidate(), 10, "baseline"), ev(a, 10, "workers"), ev(a, 10, "confirm")
    with open(path, "a") as handle:
        handle.write('{"kind":"trial","key":"amp=')  # a write cut by Ctrl+C
    with pytest.raises(TuneError, match="--resume"):
        Journal(path, header)
    with pytest.raises(TuneError, match="differs in: target"):
        Journal(path, {"target": "python other.py"}, resume=True)
    journal = Journal(path, header, resume=True)
    replay = JournaledEvaluator(journal, evaluate)
    results = [replay(Candidate(), 10, "baseline"), replay(a, 10, "workers"), replay(a, 10, "confirm")]
    assert [r.throughput for r in results] == [1.0, 2.0, 3.0] and len(runs) == 3
    assert all(r.from_journal for r in results)
    assert replay(a, 10, "confirm").throughput == 4.0 and len(runs) == 4  # a fresh, 3rd run of a
    fresh = Journal(path, header, force=True)
    assert fresh.entries == {}


def test_a_knob_applied_to_the_training_loader_is_not_rejected_for_skipping_an_eval_loader(tmp_path: Path) -> None:
    train = DataLoaderInfo(t=0, id=1, num_workers=2, batch_size=8, pin_memory=False, persistent_workers=False,
                           prefetch_factor=2, overrides={"num_workers": 2})
    evaluation = DataLoaderInfo(t=0, id=2, num_workers=0, batch_size=8, pin_memory=False, persistent_workers=False,
                                prefetch_factor=None, skipped={"num_workers": "an evaluation DataLoader ..."})
    path = write(tmp_path / "r.jsonl", [hello(), train, evaluation, *steps([0.1] * 30)])
    res = classify(Candidate.of({"num_workers": 2}), 15, "workers", 0, False, 60, path, "", 5, None)
    assert res.status == "ok", res.reason


def test_tune_help_lists_every_knob() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    text = " ".join(parser.format_help().split())
    listed = text.split("only these knobs, comma-separated: ", 1)[1].split(" --trial-timeout")[0].split(", ")
    names = [item.split(" (")[0] for item in listed]
    assert {ALIASES[k] for k in names} == set(KNOBS)
    assert "threads" in names  # cpu-contended findings print --knobs threads
    # the names findings print are the ones listed, and batch_size says it needs --batch-size to be tried
    assert "workers (num_workers)" in listed and "batch_size (with --batch-size)" in listed


def test_a_gans_trial_compares_the_steps_losses_and_stops_at_either_optimizers_nan() -> None:
    # dcgan's D and G losses come as two Loss events a batch: a trial's curve mixed G's 11.7 into D's 0.2.
    d = Loss(t=1, steps=[5, 6, 7], values=[0.21, 0.2, 0.19])
    g = Loss(t=1, steps=[5, 6, 7], values=[11.7, None, 11.5], nonfinite=[6], optimizer=2)
    m = measure([hello(), *steps([0.1] * 20), d, g], warmup=0)
    assert m.losses == [(5, 0.21), (6, 0.2), (7, 0.19)]
    assert m.nonfinite == [6]
