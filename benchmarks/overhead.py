"""Prints the step-time cost of pitstop's agent and of its default profiler windows, and RSS over 200 windows.

    python benchmarks/overhead.py [--pairs 160] [--fast-pairs 400] [--periods 30] [--window-every 100]
                                  [--rounds 3] [--steps 500] [--rss-windows 200]

Two workloads: ~10 ms CPU steps (an MLP, a DataLoader, SGD; `_workload_10ms.py`)
and ~1 ms steps (the same loop, smaller; `_workload_1ms.py`), the pace of a
small model on a GPU, where the agent's fixed cost per step weighs most. The
agent's cost is printed as a ratio and in microseconds per step (mean step on
minus mean step off, with a bootstrap 90% interval over the pairs of blocks):
the microseconds are what the training thread pays whatever the step's length.

Part 1, the targets (agent <= 1.005, with default windows <= 1.015),
measured in ONE process under `pitstop run` (`_overhead_ab.py`): the agent is
on, or off with its hot-path patches taken out (the training thread as without
pitstop: `_patchswitch.py`), in alternating 25-step blocks, ABBA, so the drift
of a shared machine cancels pair by pair. Printed: the ratio of median step times
(on / off) with a bootstrap 90% interval over the pairs, and the ratio of mean
step times. Then schedule periods with windows on: the time each window adds
(its 5 profiled steps, profiler start and stop, the tables built on a thread)
is the excess of the 40 steps from its start over the mean of the rest of its
period; windows ratio = agent ratio x (1 + added time per window / the time of
a default 500-step period at the same pace). The windows are opened every 100
steps here, five times as densely as by default, to measure 30 of them in the
time 6 default periods took: with 6, two runs on the busy shared VM gave -29
and +0.5 ms per window (single windows from -455 to +354 ms; windows then cost
~50 ms). Windows do not interact: a window's disturbance ends within
~12 steps (docs/internals.md, "Profiler windows"), so each window's cost is
the same at either density. Every step counts, as the workload timed it: the
agent marks the steps a window disturbs ("profiled", "after-profile") and keeps
them out of its step statistics, but the training still took that long. The
marks are printed after it, read from the record: how many per window, and how
the unmarked steps among the 40 compare with the rest of their period (~1.0
when the marks cover what a window disturbs).

The ~1 ms workload runs part 1's plain / agent blocks only (`--fast-pairs`
pairs, no windowed periods): a window's cost is measured on the 10 ms steps.

Part 2 runs whole processes instead, alternating: the plain script,
`pitstop run --profile off`, `pitstop run` (default windows). It is the literal
"plain vs instrumented" comparison, with process start, import and memory
layout in it; on a small shared VM whole processes differ by several percent
on their own (printed as the noise floor), which is why part 1 carries the targets.

Part 3 runs `profiler_rss.py`: host RSS over 200 back-to-back windows, with its slope.
Figures only: nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKLOAD = HERE / "_workload_10ms.py"
AB = HERE / "_overhead_ab.py"
WARMUP = 20  # steps dropped from each whole-process run
REACH = 40  # steps from a window's start that carry its cost (5 profiled, then ~5 marked "after-profile")
DEFAULT_EVERY = 500  # pitstop's default schedule: a window of 5 steps every 500 (`--profile 500:5:50`)
ENV = dict(os.environ, PITSTOP_STATUS_INTERVAL="3600")


def pitstop(*args: str) -> list[str]:
    return [sys.executable, "-m", "pitstop.cli", "run", "--headless", *args]


def bootstrap(plain: list[list[float]], agent: list[list[float]], rounds: int = 400,
              figure: Callable[[list[float], list[float]], float] | None = None) -> tuple[float, float]:
    """A 90% interval for `figure(agent steps, plain steps)` over pooled blocks, resampling pairs of blocks;
    by default the ratio of pooled medians."""
    figure = figure or (lambda a, p: statistics.median(a) / statistics.median(p))
    rng = random.Random(0)
    n = len(plain)
    values = []
    for _ in range(rounds):
        idx = [rng.randrange(n) for _ in range(n)]
        values.append(figure([t for i in idx for t in agent[i]], [t for i in idx for t in plain[i]]))
    values.sort()
    return values[int(0.05 * rounds)], values[int(0.95 * rounds) - 1]


def added_us(agent: list[float], plain: list[float]) -> float:
    """The agent's cost per step in microseconds: mean step on minus mean step off."""
    return (statistics.fmean(agent) - statistics.fmean(plain)) * 1e6


def median_us(agent: list[float], plain: list[float]) -> float:
    """The agent's cost on a typical step in microseconds: median step on minus median step off.

    The agent's cost is the same at every step (its stamps are held; the writer takes them),
    so it moves the median whole; a step the shared machine preempted for milliseconds moves
    a block's mean, not the median. On the ~1 ms steps of a steady machine its interval is
    narrower (15.7..18.8 us where the mean's was 10.2..25.0); where the machine's pace changed
    during the run, both are wide (12.6..43.1 and 6.4..28.7).
    """
    return (statistics.median(agent) - statistics.median(plain)) * 1e6


@dataclass(frozen=True)
class AbFigures:
    """What one `_overhead_ab.py` run measured: the agent's ratio, and what its windows add."""

    plain_s: float  # median step, agent off
    agent_s: float  # median step, agent on
    median_ratio: float
    mean_ratio: float
    low: float  # 90% bootstrap interval of the ratio of medians
    high: float
    added_us: float  # the agent's cost per step: mean step on minus mean step off, microseconds
    us_low: float  # its 90% bootstrap interval
    us_high: float
    median_us: float  # median step on minus median step off, microseconds
    median_us_low: float  # its 90% bootstrap interval
    median_us_high: float
    added_s: list[float]  # seconds each window added to its period
    period_s: float  # mean length of a default (500-step) period at this pace
    share: float  # time the windows add, as a share of a default period
    windows: int
    skipped: int
    every: int
    active: int

    @property
    def windows_ratio(self) -> float:
        """Agent + default windows: the agent's ratio of medians x (1 + the windows' share)."""
        return self.median_ratio * (1 + self.share)

    @property
    def windows_mean_ratio(self) -> float:
        return self.mean_ratio * (1 + self.share)


def run_ab(pairs: int, periods: int, window_every: int, tmp: Path, env: dict[str, str] | None = None,
           timeout: float | None = None, name: str = "ab") -> dict:
    """Run `_overhead_ab.py` under `pitstop run` (record `tmp/NAME.jsonl`); its JSON."""
    out = tmp / f"{name}.json"
    # Its own process group: past `timeout` the training process under `pitstop run` goes too.
    proc = subprocess.Popen(pitstop("--profile", f"{window_every}:5:50", "--record", str(tmp / f"{name}.jsonl"), str(AB),
                                    str(pairs), str(periods), str(out)),
                            env=env or ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=HERE,
                            start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    if code != 0:
        raise subprocess.CalledProcessError(code, proc.args)
    return json.loads(out.read_text())


def ab_figures(data: dict) -> AbFigures:
    """The ratios of one `_overhead_ab.py` run (its JSON)."""
    plain, agent = data["blocks"]["plain"], data["blocks"]["agent"]
    p = [t for b in plain for t in b]
    a = [t for b in agent for t in b]
    low, high = bootstrap(plain, agent)
    us_low, us_high = bootstrap(plain, agent, figure=added_us)
    median_low, median_high = bootstrap(plain, agent, figure=median_us)
    every, timed = data["every"], data["windowed"]
    added, period_time = [], []
    for start in range(0, len(timed) - every + 1, every):
        period = timed[start:start + every]
        rest = statistics.fmean(period[REACH:])
        added.append(sum(period[:REACH]) - REACH * rest)
        period_time.append(DEFAULT_EVERY * rest)  # the default schedule's period, at this stretch's pace
    # A window's cost lands on a few steps and barely moves a median: it is added as a share of time.
    share = statistics.fmean(added) / statistics.fmean(period_time) if added else 0.0
    return AbFigures(plain_s=statistics.median(p), agent_s=statistics.median(a),
                     median_ratio=statistics.median(a) / statistics.median(p),
                     mean_ratio=statistics.fmean(a) / statistics.fmean(p), low=low, high=high,
                     added_us=added_us(a, p), us_low=us_low, us_high=us_high,
                     median_us=median_us(a, p), median_us_low=median_low, median_us_high=median_high,
                     added_s=added,
                     period_s=statistics.fmean(period_time) if period_time else 0.0, share=share,
                     windows=data["windows"], skipped=data["skipped"], every=every, active=data["active"])


def agent_lines(f: AbFigures) -> None:
    print(f"  median step: off {f.plain_s * 1e3:.3f} ms, on {f.agent_s * 1e3:.3f} ms")
    print(f"  always-on agent: ratio of medians {f.median_ratio:.4f} (90% interval {f.low:.4f}..{f.high:.4f}), "
          f"ratio of means {f.mean_ratio:.4f}   target <= 1.005")
    print(f"  always-on agent: {f.added_us:.1f} us per step (mean on - mean off; 90% interval "
          f"{f.us_low:.1f}..{f.us_high:.1f})   target <= 10")
    print(f"  always-on agent: {f.median_us:.1f} us on a typical step (median on - median off; 90% interval "
          f"{f.median_us_low:.1f}..{f.median_us_high:.1f})")


def in_process(pairs: int, fast_pairs: int, periods: int, window_every: int, tmp: Path) -> None:
    if fast_pairs:
        env = dict(ENV, PITSTOP_AB_WORKLOAD="_workload_1ms")
        fast = ab_figures(run_ab(fast_pairs, 0, window_every, tmp, env=env, name="ab1ms"))
        print(f"part 1, in one process, ~1 ms steps (_workload_1ms.py): {fast_pairs} pairs of 25-step blocks, "
              "without pitstop's hooks / agent on (ABBA)", flush=True)
        agent_lines(fast)
    data = run_ab(pairs, periods, window_every, tmp)
    f = ab_figures(data)
    print(f"part 1, in one process, ~10 ms steps (_workload_10ms.py): {pairs} pairs of "
          f"{len(data['blocks']['plain'][0])}-step blocks, without pitstop's hooks / agent on (ABBA)")
    agent_lines(f)
    density = (f"{DEFAULT_EVERY / f.every:g}x as dense as the default {DEFAULT_EVERY}, to measure more of them"
               if f.every != DEFAULT_EVERY else "the default schedule")
    added = f.added_s
    print(f"  windows of {f.active} steps, one every {f.every} steps ({density}): {f.windows} windows "
          f"({f.skipped} skipped); each "
          f"adds {statistics.fmean(added) * 1e3:.1f} ms (median {statistics.median(added) * 1e3:.1f}, min "
          f"{min(added) * 1e3:.1f}, max {max(added) * 1e3:.1f}) to a {f.period_s:.2f} s "
          f"default period")
    print(f"  agent + default windows: {f.windows_ratio:.4f} (the agent's ratio of medians x "
          f"(1 + {f.share:.4f})), {f.windows_mean_ratio:.4f} (its ratio of means x the same)   target <= 1.015")
    marks_line(tmp / "ab.jsonl", data)


def marks_line(record: Path, data: dict) -> None:
    """How many steps the agent marked per window, and whether the unmarked ones near a window ran
    like the rest of their period: the marks must cover what a window disturbs."""
    from pitstop.events import Step
    from pitstop.profiling.record import iter_record

    first, every, timed = data["first_step"], data["every"], data["windowed"]
    marks = {ev.step - first: ev.mark for ev in iter_record(record)
             if isinstance(ev, Step) and 0 <= ev.step - first < len(timed)}
    if len(marks) < len(timed):
        print(f"  marks: {len(timed) - len(marks)} of {len(timed)} timed steps missing from the record")
    periods = len(timed) // every
    counts: dict[str, int] = {}
    near, rest = [], []
    following: list[list[float]] = [[] for _ in range(5)]  # the 5 steps after a window's last marked one
    for start in range(0, periods * every, every):
        period_rest = statistics.median(timed[start + REACH:start + every])
        last = None
        for i in range(start, start + every):
            mark = marks.get(i)
            if mark is not None:
                counts[mark] = counts.get(mark, 0) + 1
                last = i if i < start + REACH else last
            elif i < start + REACH:
                near.append(timed[i])
            else:
                rest.append(timed[i])
        if last is not None:
            for k, after in enumerate(following, 1):
                after.append(timed[last + k] / period_rest)
    per_window = ", ".join(f"{n / periods:.1f} {m}" for m, n in sorted(counts.items())) or "none"
    print(f"  marks per window: {per_window}; unmarked steps among the {REACH} from a window's start: "
          f"median {statistics.median(near) / statistics.median(rest):.3f}, mean "
          f"{statistics.fmean(near) / statistics.fmean(rest):.3f} x the rest of their periods")
    if following[0]:
        print("  the 5 steps after a window's last marked step, each over its period's median (median of "
              f"{len(following[0])} windows): " + ", ".join(f"{statistics.median(v):.3f}" for v in following))


def whole_process(rounds: int, steps: int, tmp: Path) -> None:
    modes = {"plain": None, "agent": "off", "windows": None}
    medians: dict[str, list[float]] = {m: [] for m in modes}
    means: dict[str, list[float]] = {m: [] for m in modes}
    for i in range(rounds):
        for mode in modes:
            out = tmp / f"{mode}-{i}.json"
            cmd = [sys.executable, str(WORKLOAD), str(steps), str(out)]
            if mode != "plain":
                profile = ["--profile", "off"] if mode == "agent" else []
                cmd = pitstop(*profile, "--record", str(tmp / f"{mode}-{i}.jsonl"), *cmd[1:])
            subprocess.run(cmd, check=True, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp)
            times = json.loads(out.read_text())[WARMUP:]
            medians[mode].append(statistics.median(times))
            means[mode].append(statistics.fmean(times))
    plain = statistics.median(medians["plain"])
    spread = (max(medians["plain"]) - min(medians["plain"])) / plain
    print(f"part 2, whole processes: {rounds} rounds of plain, agent, agent + windows; {steps} steps each")
    print(f"  median step of each plain run: {', '.join(f'{m * 1e3:.3f}' for m in medians['plain'])} ms "
          f"(noise floor: they differ by {spread:.1%})")
    for mode in ("agent", "windows"):
        ratio = statistics.median(medians[mode]) / plain
        mean = statistics.median(means[mode]) / statistics.median(means["plain"])
        label = "agent (--profile off)" if mode == "agent" else "agent + default windows"
        print(f"  {label:24s} ratio of medians {ratio:.4f}, of means {mean:.4f}")


def stall_watch_cost(ticks: int) -> None:
    """Part 4: the stall watch's thread (once a second): its tick with 2,000 step times kept (the slowdown
    median), and a slowdown capture's own cost beside its profiler window (part 1's per-window cost): the
    training thread's stack read in-process. Off the training thread; the figures are a share of one core."""
    import time as _time

    from pitstop.profiling import waits
    from pitstop.profiling._slowwatch import KEEP, SlowdownDetector
    from pitstop.profiling._stallwatch import StallDetector

    stall, slow = StallDetector(), SlowdownDetector()
    for i in range(KEEP):
        stall.step(i, 0.01, True)
        slow.step(0.01)
    tick_s = []
    for i in range(ticks):
        for _ in range(100):  # 100 steps a second: the slowdown check sorts the kept times each tick
            slow.step(0.01)
        t0 = _time.perf_counter()
        stall.check((i,), float(i))
        slow.check(float(i))
        tick_s.append(_time.perf_counter() - t0)
    read_s: list[float] = []

    def reads() -> None:  # from another thread, as the watch's: this one is the training thread it reads
        for _ in range(ticks // 10 or 1):
            t0 = _time.perf_counter()
            waits.in_process()
            read_s.append(_time.perf_counter() - t0)

    import threading

    reader = threading.Thread(target=reads)
    reader.start()
    reader.join()
    tick = statistics.median(tick_s)
    print(f"part 4, the stall watch (its own thread, 1 tick a second; {ticks} ticks, {KEEP} step times kept):")
    print(f"  tick: median {tick * 1e6:.0f} us ({tick * 100:.3f}% of one core at 1 Hz)")
    print(f"  slowdown capture, besides its profiler window: the stack read in-process, median "
          f"{statistics.median(read_s) * 1e6:.0f} us, at most once every 10 minutes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=160, help="part 1: pairs of 25-step blocks")
    parser.add_argument("--fast-pairs", type=int, default=400,
                        help="part 1: pairs of 25-step blocks of the ~1 ms workload (0: skip)")
    parser.add_argument("--periods", type=int, default=30, help="part 1: windows measured (one per period)")
    parser.add_argument("--window-every", type=int, default=100,
                        help=f"part 1: steps per period (>= {REACH + 20}); each window is costed against the "
                             f"default {DEFAULT_EVERY}-step period")
    parser.add_argument("--rounds", type=int, default=3, help="part 2: rounds of whole processes (0: skip)")
    parser.add_argument("--steps", type=int, default=500, help="part 2: steps per process")
    parser.add_argument("--rss-windows", type=int, default=200, help="part 3: windows (0: skip)")
    parser.add_argument("--stall-ticks", type=int, default=2000, help="part 4: stall watch ticks (0: skip)")
    args = parser.parse_args()
    if args.window_every < REACH + 20:
        parser.error(f"--window-every must leave at least 20 steps after the {REACH} a window's cost lands on")
    print(f"command: python benchmarks/overhead.py --pairs {args.pairs} --fast-pairs {args.fast_pairs} "
          f"--periods {args.periods} --window-every {args.window_every} --rounds {args.rounds} --steps {args.steps} "
          f"--rss-windows {args.rss_windows} --stall-ticks {args.stall_ticks}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        in_process(args.pairs, args.fast_pairs, args.periods, args.window_every, Path(tmp))
        if args.rounds:
            whole_process(args.rounds, args.steps, Path(tmp))
    if args.stall_ticks:
        stall_watch_cost(args.stall_ticks)
    if args.rss_windows:
        print(f"part 3, host RSS over {args.rss_windows} profiler windows (profiler_rss.py):", flush=True)
        subprocess.run([sys.executable, str(HERE / "profiler_rss.py"), "--windows", str(args.rss_windows),
                        "--blocks", "0"], check=True)


if __name__ == "__main__":
    main()
