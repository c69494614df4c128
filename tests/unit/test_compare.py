"""Tests of `pitstop compare`: the statistics, the verdict, the gate, comparability and the text."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import pytest

from pitstop.analysis._compare import (
    MIN_BLOCK,
    MIN_BLOCKS,
    block_means,
    choose_block,
    compare_steps,
    hodges_lehmann,
    lag1,
    slower_beyond,
)
from pitstop.cli import main
from pitstop.compare import EXIT_OK, EXIT_SLOWER, EXIT_TOO_SHORT, compare_paths, gate, script_key, to_json
from pitstop.compare._text import distribution_plot, verdict_text
from pitstop.events import DataLoaderInfo, End, Hello, OpStat, ProfileWindow, Runtime, Step, encode


def walls(n: int, median: float, spread: float = 0.1, seed: int = 0) -> list[float]:
    rng = random.Random(seed)
    return [median * rng.lognormvariate(0.0, spread) for _ in range(n)]


# -- statistics ---------------------------------------------------------------
def test_hodges_lehmann_matches_the_brute_force_median_and_interval() -> None:
    rng = random.Random(3)
    a = [rng.gauss(0, 1) for _ in range(23)]
    b = [rng.gauss(0.8, 1) for _ in range(31)]
    diffs = sorted(y - x for x in a for y in b)
    shift = hodges_lehmann(a, b)
    n = len(diffs)
    assert shift.estimate == pytest.approx((diffs[(n - 1) // 2] + diffs[n // 2]) / 2, abs=1e-9)
    # k = floor(nm/2 - 1.96 sqrt(nm(n+m+1)/12)) for n=23, m=31
    k = math.floor(n / 2 - 1.959964 * math.sqrt(n * (23 + 31 + 1) / 12))
    assert shift.low == pytest.approx(diffs[k - 1], abs=1e-9)
    assert shift.high == pytest.approx(diffs[n - k], abs=1e-9)
    assert shift.superiority == pytest.approx(sum(d < 0 for d in diffs) / n)


def test_block_means_and_lag1() -> None:
    assert block_means([1, 2, 3, 4, 5, 6, 7], 3) == [2.0, 5.0]  # the partial block is left out
    assert lag1([1.0, 1.0, 1.0]) == 0.0
    assert lag1([float(i) for i in range(50)]) > 0.9  # a drift correlates neighbours


def test_blocks_grow_while_neighbours_correlate() -> None:
    flat = walls(400, 0.1)
    assert choose_block(flat, flat) == MIN_BLOCK
    drift = [0.1 * (1 + i / 100) for i in range(400)]  # the machine slowly gets busier
    assert choose_block(drift, flat) > MIN_BLOCK


def test_a_faster_run_is_faster_and_the_interval_holds_the_true_ratio() -> None:
    a, b = walls(300, 0.100, seed=1), walls(200, 0.070, seed=2)  # B's steps take 30% less time
    c = compare_steps(a, b)
    assert c.verdict == "faster" and c.low is not None and c.high is not None
    assert c.low < 0.7 < c.high and c.high < 1.0
    assert c.b_faster is not None and c.b_faster > 0.95
    reverse = compare_steps(b, a)
    assert reverse.verdict == "slower" and reverse.ratio == pytest.approx(1 / c.ratio, rel=0.02)


def test_a_run_against_itself_is_no_difference() -> None:
    a = walls(200, 0.05, spread=0.3)
    c = compare_steps(a, a)
    assert c.verdict == "no difference" and c.ratio == pytest.approx(1.0)
    assert c.low is not None and c.high is not None and c.low < 1.0 < c.high and c.b_faster == 0.5


def test_same_distribution_twice_is_no_difference() -> None:
    c = compare_steps(walls(200, 0.05, seed=5), walls(150, 0.05, seed=6))
    assert c.verdict == "no difference", c


def test_a_tiny_but_certain_difference_is_not_called_slower() -> None:
    a = [0.100 + 1e-6 * (i % 7) for i in range(400)]
    b = [v * 1.01 for v in a]  # 1% slower, no noise at all: certain, and under MIN_EFFECT
    c = compare_steps(a, b)
    assert c.low is not None and c.low > 1.0
    assert c.verdict == "no difference" and "under 2%" in c.reason


def test_too_short_says_which_run_and_how_many_steps_are_needed() -> None:
    c = compare_steps(walls(12, 0.1), walls(300, 0.05))
    assert c.verdict == "too short" and c.low is None
    assert c.reason.startswith("A has 12 training steps") and str(MIN_BLOCK * MIN_BLOCKS) in c.reason
    assert c.ratio is not None and c.ratio < 0.7  # the estimate is still given, without a claim
    assert slower_beyond(c, 5) is None


def test_slower_beyond_needs_the_whole_interval_above_the_allowance() -> None:
    a = walls(300, 0.100, seed=1)
    c = compare_steps(a, walls(300, 0.120, seed=2))  # 20% slower
    assert slower_beyond(c, 10) is True and slower_beyond(c, 30) is False


def test_runs_of_very_different_lengths_are_fast_to_compare() -> None:
    import time

    start = time.perf_counter()
    c = compare_steps(walls(20_000, 0.1, seed=1), walls(100, 0.1, seed=2))
    assert time.perf_counter() - start < 5.0  # bisection, not 4000 x 20 differences sorted... nor 20000 x 100
    assert c.verdict in ("no difference", "faster", "slower") and c.blocks_a > c.blocks_b


# -- records, comparability, gate, text ------------------------------------------
def write_record(path: Path, step_walls: list[float], script: str = "train.py", workers: int = 0,
                 session: str = "s1", ops: dict[str, float] | None = None, rank: int | None = None,
                 batch: int = 32) -> Path:
    events: list[object] = [
        Hello(schema=1, pitstop_version="0.1.0", session=session, pid=100 + (rank or 0), ppid=1, host="h",
              argv=["python", script], cwd="/", started=1000.0, python="3.11.7", script=script, rank=rank,
              world_size=None if rank is None else 2),
        Runtime(t=1000.1, torch_version="2.13.0", cuda_version=None, device_type="cpu", cpu_count=2, usable_cpus=2),
        DataLoaderInfo(t=1000.2, id=1, num_workers=workers, batch_size=32, pin_memory=False,
                       persistent_workers=False, prefetch_factor=2 if workers else None),
    ]
    t = 1001.0
    for i, w in enumerate(step_walls):
        t += w
        events.append(Step(t=t, step=i, wall=w, data_wait=w * 0.5 if workers == 0 else 0.0, samples=batch, loader=1))
    if ops is not None:
        events.append(ProfileWindow(t=t, step_start=10, step_end=15, device="cpu",
                                    ops=[OpStat(name=k, calls=5, self_us=v * 5, total_us=v * 5) for k, v in ops.items()],
                                    phases_ms={"forward": 3.0, "backward": 5.0}))
    events.append(End(t=t + 0.1, steps=len(step_walls), dropped=0, reason="exit", exit_code=0))
    path.write_text("".join(encode(e) + "\n" for e in events))  # type: ignore[arg-type]
    return path


def test_compare_paths_finds_the_faster_run_and_what_changed(tmp_path: Path) -> None:
    a = write_record(tmp_path / "a.jsonl", walls(120, 0.10, seed=1), workers=0, ops={"aten::conv": 900.0})
    b = write_record(tmp_path / "b.jsonl", walls(120, 0.05, seed=2), workers=2, session="s2",
                     ops={"aten::conv": 400.0, "aten::new": 50.0})
    c = compare_paths(a, b)
    assert c.steps.verdict == "faster"
    assert {s.name: (s.a, s.b) for s in c.settings}["DataLoader num_workers"] == ("0", "2")
    assert [f.rule for f in c.gone] == ["data-wait"] and not c.appeared
    conv = next(m for m in c.ops if m.name == "aten::conv")
    assert conv.a == pytest.approx(900.0) and conv.b == pytest.approx(400.0)
    assert {m.name for m in c.phases} == {"forward", "backward"}
    assert gate(c, 5) == EXIT_OK
    data = json.loads(to_json(c, 5, EXIT_OK))
    assert data["verdict"] == "faster" and data["fail_if_slower"] == {"pct": 5, "exit_code": 0}
    assert "walls" not in data["a"] and data["steps"]["change"] < -0.4


def test_a_larger_batch_that_gives_more_samples_a_second_is_faster_though_its_steps_are_longer(tmp_path: Path) -> None:
    # HF Trainer at batch 16 against its tuned 64: "B is slower: 0.31x the throughput of A" for +25% samples/s.
    a = write_record(tmp_path / "a.jsonl", walls(120, 0.10, seed=1), batch=16)
    b = write_record(tmp_path / "b.jsonl", walls(120, 0.32, seed=2), batch=64, session="s2")
    c = compare_paths(a, b)
    assert (c.steps.verdict, c.steps.per) == ("faster", "sample")
    assert c.steps.ratio == pytest.approx(0.32 / 4 / 0.10, rel=0.05)
    text = verdict_text(c.steps)
    assert text.startswith("B is faster: 1.2") and "time per sample" in text, text
    assert any("the batch size differs (A 16, B 64" in n for n in c.notes)


def test_cli_compare_exit_codes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fast = write_record(tmp_path / "fast.jsonl", walls(100, 0.05, seed=1))
    slow = write_record(tmp_path / "slow.jsonl", walls(100, 0.08, seed=2), session="s2")
    short = write_record(tmp_path / "short.jsonl", walls(15, 0.08, seed=3), session="s3")
    other = write_record(tmp_path / "other.jsonl", walls(100, 0.05, seed=4), script="eval.py", session="s4")
    assert main(["compare", str(fast), str(slow), "--fail-if-slower", "10"]) == EXIT_SLOWER
    assert "failed" in capsys.readouterr().err
    assert main(["compare", str(slow), str(fast), "--fail-if-slower", "10"]) == EXIT_OK
    assert main(["compare", str(fast), str(fast), "--fail-if-slower", "0"]) == EXIT_OK
    out = capsys.readouterr().out
    assert "no difference beyond the noise" in out
    assert main(["compare", str(fast), str(short), "--fail-if-slower", "10"]) == EXIT_TOO_SHORT
    assert "too short" in capsys.readouterr().out
    assert main(["compare", str(fast), str(other)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "not the same script" in err and "--force" in err
    assert main(["compare", str(fast), str(other), "--force"]) == EXIT_OK
    assert "compared with --force" in capsys.readouterr().out
    assert main(["compare", str(fast), str(slow), "--fail-if-slower", "-1"]) == 2


def test_a_directory_holding_two_runs_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    both = tmp_path / "both"
    both.mkdir()
    write_record(both / "rank0.jsonl", walls(50, 0.05), session="s1")
    write_record(both / "rank0-2.jsonl", walls(50, 0.05), session="s2")
    single = write_record(tmp_path / "one.jsonl", walls(50, 0.05))
    assert main(["compare", str(both), str(single)]) == 2
    assert "2 different runs" in capsys.readouterr().err


def test_script_key_keeps_modules_and_file_names() -> None:
    assert script_key("/home/me/a/train.py") == script_key("train.py") == "train.py"
    assert script_key("-m pkg.train") != script_key("-m pkg.eval")


def test_distribution_plot_shows_both_runs_on_shared_bins() -> None:
    lines = distribution_plot([0.1] * 50 + [0.4] * 50, [0.1] * 100, ascii_only=True)
    assert lines[0].split() == ["A", "(100", "steps)", "B", "(100", "steps)"]
    first, last = lines[1], lines[-1]
    assert first.count("#") > last.count("#") > 0  # A splits in two; B is all in the first bin
    assert distribution_plot([], [0.1]) == []


def test_a_busier_machine_during_one_run_is_said_under_the_verdict(tmp_path: Path) -> None:
    from pitstop.events import Proc, Sample

    def with_load(path: Path, system_cpu: float, session: str) -> Path:
        write_record(path, walls(60, 0.05, seed=1), session=session)
        lines = path.read_text().splitlines()
        samples = [encode(Sample(t=1001.0 + i, system_cpu=system_cpu, procs=[Proc(pid=100, role="main", cpu=90.0,
                                                                                   rss=1)])) for i in range(5)]
        path.write_text("\n".join(lines[:3] + samples + lines[3:]) + "\n")
        return path

    quiet = with_load(tmp_path / "quiet.jsonl", 50.0, "s1")  # 1.0 core busy of 2: 0.1 by others
    busy = with_load(tmp_path / "busy.jsonl", 100.0, "s2")  # 2.0 busy: 1.1 by others
    c = compare_paths(quiet, busy)
    assert any(n.startswith("the machine was busier during B: other processes used 1.10 cores on average "
                            "against 0.10 (of 2)") for n in c.notes), c.notes
    row = next(m for m in c.metrics if m.name == "cpu of other processes")
    assert (round(row.a, 2), round(row.b, 2)) == (0.1, 1.1)  # type: ignore[arg-type]
    assert not any("busier" in n for n in compare_paths(quiet, quiet).notes)


def test_jobs_of_two_ranks_compare_by_rank_0_and_sum_their_throughput(tmp_path: Path) -> None:
    dirs = []
    for name, median in (("a", 0.10), ("b", 0.05)):
        d = tmp_path / name
        d.mkdir()
        for rank in (0, 1):
            write_record(d / f"rank{rank}.jsonl", walls(80, median, seed=rank), session=name, rank=rank, workers=2)
        dirs.append(d)
    single = write_record(tmp_path / "one.jsonl", walls(80, 0.05), workers=2)
    c = compare_paths(dirs[0], dirs[1])
    assert c.a.processes == 2 and c.steps.verdict == "faster"
    through = next(m for m in c.metrics if m.name == "throughput")
    assert through.a is not None and through.b is not None and through.b / through.a > 1.8  # both ranks' samples
    mixed = compare_paths(dirs[1], single)
    assert any("A has 2 process(es), B 1" in n for n in mixed.notes)
