"""Measures the viewer under load: event-to-screen lag (p95), CPU use and memory growth.

Feeds PitstopApp 1,000 events/s (Step events plus a Sample every 0.5 s) from a
synthetic live source for N seconds, headless, on the Overview screen (the
busiest: a plotext chart, three panels and the findings).

How lag is measured: every event carries t = time.time() when the source made
it. When the app applies a batch, the batch's stamps wait in a list; when the
app next refreshes the screen, `call_after_refresh` stamps the moment the
compositor has painted that refresh, and lag = paint time - t for each event
painted. Headless mode skips only the final write to the terminal, not the
layout and rendering of the widgets.

CPU is time.process_time() over the run divided by wall time (the source's
thread included, so the figure is an upper bound for the viewer itself).
Memory is the process RSS (psutil) at each quarter of the run: it must level off.

Run: python benchmarks/viewer.py [--seconds 60] [--rate 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
from collections.abc import Iterator

import psutil

from pitstop.analysis import StreamBatch, percentile
from pitstop.events import Gpu, Hello, Proc, Runtime, Sample, Step
from pitstop.tui.app import PitstopApp

STREAM = "pid:1@bench"
TARGET_LAG_S = 0.5
TARGET_CPU = 20.0


class SyntheticSource:
    """A live source making `rate` events/s in batches every 10 ms (an agent's writer cadence)."""

    live = True
    label = "benchmark (synthetic)"

    def __init__(self, rate: int, seconds: float) -> None:
        self.rate = rate
        self.seconds = seconds
        self.sent = 0
        self._stop = threading.Event()

    def batches(self) -> Iterator[StreamBatch]:
        now = time.time()
        yield StreamBatch(STREAM, [
            Hello(schema=1, pitstop_version="bench", session="bench", pid=1, ppid=0, host="bench",
                  argv=["bench.py"], cwd=".", started=now, python="3", script="bench.py"),
            Runtime(t=now, torch_version="2", cuda_version="12", device_type="cuda", device_names=["bench GPU"]),
        ])
        tick = 0.01
        per_tick = self.rate * tick
        start = time.monotonic()
        next_t = start
        step = 0
        owed = 0.0
        last_sample = 0.0
        while not self._stop.is_set() and time.monotonic() - start < self.seconds:
            next_t += tick
            delay = next_t - time.monotonic()
            if delay > 0 and self._stop.wait(delay):
                break
            owed += per_tick
            t = time.time()
            events: list = []
            if t - last_sample >= 0.5:
                last_sample = t
                events.append(Sample(t=t, gpus=[Gpu(0, "bench GPU", util=80.0, mem_used=8 << 30, mem_total=40 << 30,
                                                    power_w=250.0)],
                                     procs=[Proc(1, "main", 100.0, 2 << 30), Proc(2, "worker", 50.0, 1 << 28)]))
                owed -= 1
            while owed >= 1:
                events.append(Step(t=t, step=step, wall=1.0 / self.rate, data_wait=0.2 / self.rate, samples=32,
                                   mem_allocated=4 << 30, mem_reserved=6 << 30, mem_peak=5 << 30, host_rss=2 << 30))
                step += 1
                owed -= 1
            self.sent += len(events)
            yield StreamBatch(STREAM, events)

    def command(self, name: str) -> str:
        return f"benchmark: {name} ignored"

    def close(self) -> None:
        self._stop.set()


class MeasuredApp(PitstopApp):
    """PitstopApp that stamps when each applied event reaches a painted screen."""

    def __init__(self, source: SyntheticSource) -> None:
        super().__init__(source)
        self.pending: list[float] = []
        self.lags: list[float] = []
        self.refreshes = 0

    def on_batches_arrived(self, message) -> None:  # type: ignore[no-untyped-def]
        batches = self._inbox.drain()
        for batch in batches:
            self.job.add(batch)
            self.pending.extend(getattr(e, "t", 0.0) for e in batch.events if hasattr(e, "t"))
        if batches:
            self.request_refresh()

    def refresh_views(self) -> None:
        super().refresh_views()
        shown, self.pending = self.pending, []
        if shown:
            self.call_after_refresh(self._painted, shown)

    def _painted(self, stamps: list[float]) -> None:
        now = time.time()
        self.refreshes += 1
        self.lags.extend(now - t for t in stamps)


async def measure(seconds: float, rate: int) -> None:
    proc = psutil.Process()
    source = SyntheticSource(rate, seconds)
    app = MeasuredApp(source)
    rss: list[tuple[str, int]] = [("start", proc.memory_info().rss)]
    async with app.run_test(size=(120, 40)) as pilot:
        cpu0, wall0 = time.process_time(), time.monotonic()
        for quarter in range(1, 5):
            while time.monotonic() - wall0 < seconds * quarter / 4:
                await pilot.pause(0.2)
            rss.append((f"{25 * quarter}%", proc.memory_info().rss))
        cpu = 100 * (time.process_time() - cpu0) / (time.monotonic() - wall0)
        await pilot.pause(0.5)
    lags = app.lags
    p50 = percentile(lags, 50) if lags else float("nan")
    p95 = percentile(lags, 95) if lags else float("nan")
    print(f"viewer benchmark: {source.sent} events in {seconds:.0f} s ({source.sent / seconds:.0f} events/s), "
          f"{app.refreshes} screen refreshes ({app.refreshes / seconds:.1f}/s)")
    print(f"  lag event->screen: p50 {p50 * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, max {max(lags) * 1000:.0f} ms "
          f"over {len(lags)} events (target p95 < {TARGET_LAG_S * 1000:.0f} ms): "
          f"{'OK' if p95 < TARGET_LAG_S else 'MISSED'}")
    print(f"  cpu: {cpu:.1f}% of one core, source thread included (target < {TARGET_CPU:.0f}%): "
          f"{'OK' if cpu < TARGET_CPU else 'MISSED'}")
    print("  rss: " + ", ".join(f"{label} {value / 2**20:.0f} MiB" for label, value in rss))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rate", type=int, default=1000, help="events per second")
    args = parser.parse_args()
    asyncio.run(measure(args.seconds, args.rate))


if __name__ == "__main__":
    main()
