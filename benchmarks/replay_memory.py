"""Measures replay of a long record: the viewer's peak RSS and the time of its seeks (issue 13).

Writes a synthetic record of `--hours` of training (24 by default: 8.64 M steps
at 10 ms, a Loss line every 32 steps as the agent batches them, a Sample at
2 Hz with one GPU and the main process plus 4 DataLoader workers, a profiler
window every 500 steps as the default schedule takes them, with its 5 marked
steps and the one after) into a temporary directory, deleted at the end.
Lines are formatted directly (encoding 8.6 M Steps through pitstop.events
would take minutes); the first line of each kind is checked to decode to the
event pitstop.events builds, so the shapes follow the schema.

Then, each in a fresh process (peak RSS: `resource.getrusage`'s ru_maxrss):
- viewer: PitstopApp on a RecordSource, headless at 120x40, as `pitstop view`
  runs it; time to open (the indexing pass), then seeks to the start, the
  middle, the end and random points, each timed as `_seek` does it (the
  timeline's seek, then the screen's figures and widgets);
- summary: `pitstop view --summary`'s path (load_runs, summary_text), then the
  text charts `--plot` draws after it (`pitstop.charts.job_plot` at 120 columns,
  plain ASCII as in a CI log): their render time, with plotext's import timed apart
  (a process pays it once).

Each is measured twice: the first reader indexes the record and saves its
index beside it (`rank0.jsonl.index`), the second opens from that index. Then
the same for a copy of the record cut mid-line at 95% (a run killed with
SIGKILL): read whole, then from its own index.

Targets: viewer RSS < 300 MiB, any seek < 1 s; from the index: first screen < 3 s, summary < 2 s;
the charts < 100 ms. Each seek also prints its CPU
time, and the load average is printed: on a shared machine the wall time of a
seek is its CPU time stretched by the other processes.

Run: python benchmarks/replay_memory.py [--hours 24] [--seeks 4] [--keep DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pitstop.events import (
    SCHEMA_VERSION,
    Copies,
    DataLoaderInfo,
    End,
    Gpu,
    Hello,
    KernelStat,
    Loss,
    Model,
    OpStat,
    Proc,
    ProfileWindow,
    Runtime,
    Sample,
    Step,
    decode,
    encode,
)

TARGET_RSS_MIB = 300.0
TARGET_SEEK_S = 1.0
TARGET_CHARTS_S = 0.1
CHART_COLUMNS = 120
# The charts are drawn 5 times: the first is what the end of a run pays. On the shared 2-core VM
# at load 4 one draw of the same charts took 41 to 221 ms of wall time, about twice its CPU time,
# so the target is held against the best CPU time of the 5: the charts' own cost.
CHART_DRAWS = 5
STEP_S = 0.010
SAMPLE_S = 0.5
LOSS_EVERY = 32
PROFILE_EVERY, PROFILE_FIRST, PROFILE_ACTIVE = 500, 50, 5  # the CLI's default schedule
T0 = 1_700_000_000.0
GIB = 1 << 30


def _step_line(t: float, i: int, wall: float, wait: float, mark: str | None, alloc: int, rss: int) -> str:
    mark_json = "null" if mark is None else f'"{mark}"'
    return (f'{{"kind":"step","t":{t!r},"step":{i},"wall":{wall!r},"data_wait":{wait!r},"samples":64,'
            f'"source":"optimizer","mem_allocated":{alloc},"mem_reserved":{6 * GIB},"mem_peak":{5 * GIB},'
            f'"host_rss":{rss},"mark":{mark_json},"eval_s":0.0,"loader":0}}')


def _sample(t: float, k: int) -> Sample:
    gpu = Gpu(index=0, name="NVIDIA H100 80GB HBM3", util=90.0 + k % 10, mem_used=40 * GIB + k % 7 * 1000,
              mem_total=80 * GIB, power_w=500.0 + k % 50, power_limit_w=700.0, temp_c=60.0 + k % 5,
              sm_clock_mhz=1980.0, pcie_tx_kbs=1200.0, pcie_rx_kbs=5300.0 + k % 100)
    procs = [Proc(pid=1000, role="main", cpu=99.0 + k % 3, rss=3 * GIB + k % 11 * 4096)]
    procs += [Proc(pid=1001 + w, role="worker", cpu=40.0 + (k + w) % 20, rss=GIB, loader=0) for w in range(4)]
    return Sample(t=t, gpus=[gpu], procs=procs, system_cpu=35.0 + k % 9, alloc_retries=0, ooms=0)


def _profile(t: float, start: int) -> ProfileWindow:
    ops = [OpStat(name=f"aten::op_{n}", calls=20 * (n + 1), self_us=1000.0 / (n + 1), total_us=2000.0 / (n + 1),
                  device_self_us=900.0 / (n + 1)) for n in range(20)]
    kernels = [KernelStat(name=f"sm90_xmma_gemm_kernel_{n}", calls=10 * (n + 1), total_us=800.0 / (n + 1),
                          mean_us=80.0 / (n + 1) ** 2) for n in range(20)]
    return ProfileWindow(t=t, step_start=start, step_end=start + PROFILE_ACTIVE, device="cuda", duration_s=0.06,
                         ops=ops, kernels=kernels, copies=Copies(h2d_bytes=64 << 20, h2d_us=3000.0, h2d_count=10),
                         syncs_per_step={"aten::item": 1.0},
                         phases_ms={"data": 0.3, "forward": 3.1, "backward": 5.2, "optimizer": 1.1})


def generate(path: Path, hours: float) -> tuple[int, float]:
    """Write the record; returns (lines, seconds taken)."""
    began = time.perf_counter()
    n_steps = int(hours * 3600 / STEP_S)
    rng = random.Random(13)
    hello = Hello(schema=SCHEMA_VERSION, pitstop_version="0.1.0", session="bench-24h", pid=1000, ppid=1,
                  host="bench", argv=["python", "train.py"], cwd="/tmp", started=T0, python="3.11",
                  script="train.py", record=str(path))
    head = [hello,
            Runtime(t=T0 + 0.1, torch_version="2.5.0", cuda_version="12.4", device_type="cuda",
                    device_names=["NVIDIA H100 80GB HBM3"], cpu_count=32, usable_cpus=32),
            DataLoaderInfo(t=T0 + 0.2, id=0, num_workers=4, batch_size=64, pin_memory=True,
                           persistent_workers=True, prefetch_factor=2, dataset_len=1_281_167, dataset="ImageNet"),
            Model(t=T0 + 0.3, conv2d=53, optimizers=1, autocast=True, cudnn_benchmark=True)]
    lines = 0
    checked: set[str] = set()
    with open(path, "w", buffering=1 << 20) as out:
        for event in head:
            out.write(encode(event) + "\n")
            lines += 1
        t = T0 + 1.0
        next_sample = t + SAMPLE_S
        k = 0
        losses: list[int] = []
        window_end = -1
        chunk: list[str] = []
        for i in range(n_steps):
            wall = STEP_S * (0.9 + 0.2 * rng.random())
            t += wall
            mark = None
            if i >= PROFILE_FIRST and (i - PROFILE_FIRST) % PROFILE_EVERY == 0:
                window_end = i + PROFILE_ACTIVE
            if i < window_end:
                mark = "profiled"
            elif i == window_end:
                mark = "after-profile"
                chunk.append(encode(_profile(t - 0.001, i - PROFILE_ACTIVE)))
            line = _step_line(round(t, 6), i, round(wall, 6), round(wall * 0.05, 6), mark,
                              4 * GIB + (i % 97) * 4096, 3 * GIB + (i % 89) * 4096)
            if "step" not in checked:
                _check(line, Step(t=round(t, 6), step=i, wall=round(wall, 6), data_wait=round(wall * 0.05, 6),
                                  samples=64, mem_allocated=4 * GIB, mem_reserved=6 * GIB, mem_peak=5 * GIB,
                                  host_rss=3 * GIB, mark=mark, loader=0))
                checked.add("step")
            chunk.append(line)
            losses.append(i)
            if len(losses) == LOSS_EVERY:
                values = [round(2.5 * 0.9999 ** s, 6) for s in losses]
                chunk.append(encode(Loss(t=round(t, 6), steps=losses, values=values)))
                losses = []
            if t >= next_sample:
                chunk.append(encode(_sample(round(t, 6), k)))
                k += 1
                next_sample += SAMPLE_S
            if len(chunk) >= 10_000:
                out.write("\n".join(chunk) + "\n")
                lines += len(chunk)
                chunk = []
        chunk.append(encode(End(t=t + 0.1, steps=n_steps, dropped=0, exit_code=0)))
        out.write("\n".join(chunk) + "\n")
        lines += len(chunk)
    return lines, time.perf_counter() - began


def _check(line: str, expected: Step) -> None:
    got = decode(line)
    if got != expected:
        raise SystemExit(f"the synthetic step line does not decode to the schema's Step:\n{got}\n{expected}")


# -- the measured processes (run as `replay_memory.py --viewer|--summary PATH`) ---------
def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


async def _viewer(path: Path, seeks: int) -> dict[str, object]:
    from pitstop.profiling.sources import RecordSource
    from pitstop.tui.app import PitstopApp

    began = time.perf_counter()
    app = PitstopApp(RecordSource(path))
    out: dict[str, object] = {}
    async with app.run_test(size=(120, 40)) as pilot:
        while app.timeline is None and app.failed is None:
            await pilot.pause(0.05)
        if app.failed is not None:
            raise SystemExit(f"viewer failed: {app.failed}")
        tl = app.timeline
        assert tl is not None
        out["open_s"] = time.perf_counter() - began
        out["events"] = len(tl)
        out["rss_open_mib"] = _peak_rss_mib()
        rng = random.Random(7)
        targets = [("start", tl.start), ("middle", (tl.start + tl.end) / 2), ("end", tl.end)]
        targets += [(f"random{n + 1}", rng.uniform(tl.start, tl.end)) for n in range(seeks)]
        times = []
        for name, cursor in targets:
            c0, t0 = time.process_time(), time.perf_counter()
            app.job = tl.seek(cursor)  # what PitstopApp._seek does, timed in two parts
            t1 = time.perf_counter()
            app.refresh_views()
            c2, t2 = time.process_time(), time.perf_counter()
            await pilot.pause()
            run = app.job.primary()
            times.append({"to": name, "at_s": round(cursor - tl.start, 1), "seek_s": t1 - t0, "total_s": t2 - t0,
                          "cpu_s": c2 - c0, "step": run.last_step if run is not None else None})
        out["seeks"] = times
    out["peak_rss_mib"] = _peak_rss_mib()
    return out


def _summary(path: Path) -> dict[str, object]:
    from pitstop.charts import job_plot
    from pitstop.headless import summary_text
    from pitstop.recorded import load_runs

    began = time.perf_counter()
    runs, notes = load_runs(path)
    text = summary_text(runs, notes)
    seconds = time.perf_counter() - began
    t0 = time.perf_counter()
    import plotext  # noqa: F401 - timed apart from the drawing

    imported = time.perf_counter() - t0
    draws = []
    for _ in range(CHART_DRAWS):
        t1, c1 = time.perf_counter(), time.process_time()
        charts = job_plot(runs, CHART_COLUMNS, color=False)
        draws.append((time.perf_counter() - t1, time.process_time() - c1))
    return {"seconds": seconds, "peak_rss_mib": _peak_rss_mib(), "chars": len(text), "import_plotext_s": imported,
            "chart_draws": draws, "chart_rows": len(charts.splitlines())}


def _measure(mode: str, path: Path, seeks: int) -> dict[str, object]:
    cmd = [sys.executable, __file__, mode, str(path), "--seeks", str(seeks)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{mode} process failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hours", type=float, default=24.0, help="length of the synthetic run (default 24)")
    parser.add_argument("--seeks", type=int, default=4, help="random seeks after start, middle and end")
    parser.add_argument("--keep", type=Path, help="write the record here and keep it (default: a temp dir, deleted)")
    parser.add_argument("--viewer", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--summary", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.hours <= 0:
        parser.error(f"--hours must be positive, got {args.hours}")
    if args.viewer is not None:
        print(json.dumps(asyncio.run(_viewer(args.viewer, args.seeks))))
        return
    if args.summary is not None:
        print(json.dumps(_summary(args.summary)))
        return

    directory = args.keep or Path(tempfile.mkdtemp(prefix="pitstop-replay-bench-"))
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "rank0.jsonl"
    try:
        if path.exists():
            raise SystemExit(f"{path} exists: give --keep an empty directory")
        print(f"load average at start: {_load()}")
        lines, took = generate(path, args.hours)
        size = os.path.getsize(path)
        print(f"record: {args.hours:g} h synthetic, {lines:,} lines, {size / (1 << 20):,.0f} MiB "
              f"({size / args.hours / (1 << 20):,.0f} MiB per process-hour), written in {took:.0f} s")
        _report(path, args.seeks, "no index yet", fresh=True)
        index = path.with_name(path.name + ".index")
        print(f"index: {os.path.getsize(index) / (1 << 20):.1f} MiB beside the record")
        _report(path, args.seeks, "from its index")
        killed = directory / "killed" / "rank0.jsonl"
        killed.parent.mkdir()
        with open(path, "rb") as src, open(killed, "wb") as dst:
            dst.write(src.read(int(size * 0.95)))  # cut mid-line, as SIGKILL leaves it
        for how in ("cut by SIGKILL, no index", "cut by SIGKILL, from its index"):
            summary = _measure("--summary", killed, args.seeks)
            print(f"[{how}] view --summary: {summary['seconds']:.1f} s, peak RSS {summary['peak_rss_mib']:.0f} MiB")
            _say_charts(summary)
        print(f"load average at end: {_load()} ({os.cpu_count()} CPUs)")
    finally:
        if args.keep is None:
            shutil.rmtree(directory, ignore_errors=True)


def _report(path: Path, seeks: int, how: str, fresh: bool = False) -> None:
    """The viewer's and the summary's figures for one reading of the record (`fresh`: each without an index)."""
    index = path.with_name(path.name + ".index")
    if fresh:
        index.unlink(missing_ok=True)
    viewer = _measure("--viewer", path, seeks)
    print(f"[{how}]")
    print(f"viewer: opened (over {viewer['events']:,} events) in {viewer['open_s']:.1f} s")
    worst = 0.0
    for s in viewer["seeks"]:  # type: ignore[union-attr]
        worst = max(worst, s["total_s"])
        print(f"  seek to {s['to']:<8} (+{s['at_s']:>9.1f} s, step {s['step']}): "
              f"{s['total_s'] * 1000:6.0f} ms (timeline {s['seek_s'] * 1000:.0f} ms, figures and screen "
              f"{(s['total_s'] - s['seek_s']) * 1000:.0f} ms; CPU {s['cpu_s'] * 1000:.0f} ms)")
    rss = float(viewer["peak_rss_mib"])  # type: ignore[arg-type]
    print(f"viewer peak RSS: {rss:.0f} MiB (after opening: {viewer['rss_open_mib']:.0f} MiB); "
          f"target < {TARGET_RSS_MIB:.0f} MiB: {_verdict(rss < TARGET_RSS_MIB)}")
    print(f"slowest seek: {worst * 1000:.0f} ms; target < {TARGET_SEEK_S * 1000:.0f} ms: "
          f"{_verdict(worst < TARGET_SEEK_S)}")
    if fresh:
        index.unlink(missing_ok=True)
    summary = _measure("--summary", path, seeks)
    print(f"view --summary: {summary['seconds']:.1f} s, peak RSS {summary['peak_rss_mib']:.0f} MiB")
    _say_charts(summary)


def _say_charts(summary: dict[str, object]) -> None:
    """The render time of `--plot`'s charts after the summary (first, best and median draw), against its target."""
    draws = summary["chart_draws"]
    imported = summary["import_plotext_s"]
    assert isinstance(draws, list) and isinstance(imported, float)
    first, first_cpu = draws[0]
    wall = min(w for w, _ in draws)
    cpu = min(c for _, c in draws)
    print(f"--plot charts ({summary['chart_rows']} rows at {CHART_COLUMNS} columns): first draw "
          f"{first * 1000:.0f} ms (CPU {first_cpu * 1000:.0f} ms), best of {len(draws)} {wall * 1000:.0f} ms "
          f"(CPU {cpu * 1000:.0f} ms); plotext's import {imported * 1000:.0f} ms apart; "
          f"target < {TARGET_CHARTS_S * 1000:.0f} ms of CPU (best): {_verdict(cpu < TARGET_CHARTS_S)}")


if __name__ == "__main__":
    main()
