"""Provides the per-rank Prometheus endpoint: `start_exporter(agent, port)` (names in docs/prometheus.md).

Runs inside the training process. Events reach it through `agent.taps` on the
agent's writer thread (every ~0.5 s, a batch at a time); the training thread is
never touched. A scrape runs on prometheus_client's HTTP thread and reads a
small, bounded RunState under a lock. Its own CollectorRegistry is used, so the
user's own metrics on the global registry (if any) are neither polluted nor
exported twice.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from typing import Any

from pitstop.analysis import RunState, findings, percentile
from pitstop.analysis._context import WARMUP
from pitstop.analysis._cpu import training_loader_id
from pitstop.events import Event, Sample

ADDR_ENV = "PITSTOP_PROMETHEUS_ADDR"
# 0.0.0.0: Prometheus scrapes from another host; set PITSTOP_PROMETHEUS_ADDR=127.0.0.1
# to keep the endpoint on the machine (then scrape through an SSH tunnel).
DEFAULT_ADDR = "0.0.0.0"
# Rates, p50/p95 and the data-wait ratio are over the last 50 measured training
# steps (warm-up and marked steps dropped), as the headless status line: a few
# seconds of fast steps, a minute of slow ones.
RECENT_STEPS = 50
# 2000 steps (~600 KB) is plenty for the rules' medians and keeps the copy the
# exporter holds in the training process small (the viewers keep 20000).
KEPT_STEPS = 2_000
# Findings walk every kept step; one evaluation per 10 s is enough for a gauge
# scraped every 15-60 s, and caps the cost when several scrapers poll.
FINDINGS_TTL_S = 10.0
# A GPU or process reading older than 10 s (5-20 sampler periods) is stale:
# the sampler stopped, so the series disappears rather than freezing.
SAMPLE_MAX_AGE_S = 10.0

LABELS = ("job", "rank", "local_rank", "host", "script")


class Exporter:
    """Bounded state fed by the agent's writer thread, read by prometheus_client on scrape."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent
        self._lock = threading.Lock()
        self.run = RunState(max_steps=KEPT_STEPS)
        # The agent writes Hello straight to the record and socket, not through
        # the queue the taps see, so it is taken from the agent here.
        self.run.add(agent.hello)
        hello = agent.hello
        self.labels = {
            "job": hello.session,
            # Empty outside a launcher: an empty label is an absent one in Prometheus.
            "rank": "" if hello.rank is None else str(hello.rank),
            "local_rank": "" if hello.local_rank is None else str(hello.local_rank),
            "host": hello.host,
            "script": hello.script,
        }
        self._findings: dict[str, int] | None = None
        self._findings_t = 0.0
        self.server: Any = None

    def tap(self, events: list[Event]) -> None:
        """Called by the agent's writer thread with each batch of events."""
        with self._lock:
            self.run.add_all(events)

    def collect(self) -> Iterator[Any]:
        """prometheus_client's Collector protocol: the metric families of this rank now."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

        keys = list(LABELS)
        values = [self.labels[k] for k in keys]
        with self._lock:
            run = self.run
            # The steps the summary and the status line measure (warm-up and marked
            # steps dropped): one definition of the rates on every front.
            recent = run.measured_steps(WARMUP)[-RECENT_STEPS:]
            last = run.steps[-1] if run.steps else None
            sample = run.samples[-1] if run.samples else None
            total_steps, total_wall, total_wait = run.total_steps, run.total_wall, run.total_data_wait
            train_steps = run.train_steps  # total_wall, total_data_wait and total_samples cover these
            total_samples, with_samples = run.total_samples, run.steps_with_samples
            train_loader = training_loader_id(run)
            window = run.profiles[-1] if run.profiles else None
            counts = self._finding_counts()
            device = run.device_type
        dropped = getattr(self._agent, "dropped", None)

        info = GaugeMetricFamily("pitstop_run_info", "Always 1; what this process is.",
                                 labels=[*keys, "device", "world_size", "pitstop_version"])
        hello = run.hello
        info.add_metric([*values, device or "", "" if hello is None or hello.world_size is None
                         else str(hello.world_size), hello.pitstop_version if hello else ""], 1.0)
        yield info

        steps = CounterMetricFamily("pitstop_steps", "Training steps completed.", labels=keys)
        steps.add_metric(values, float(total_steps))
        yield steps
        # Every training step reported its batch size: otherwise the total would be an undercount.
        if train_steps and with_samples == train_steps:
            samples = CounterMetricFamily("pitstop_samples", "Samples (batch rows) consumed.", labels=keys)
            samples.add_metric(values, float(total_samples))
            yield samples
        wait = CounterMetricFamily("pitstop_data_wait_seconds", "Seconds blocked waiting for the DataLoader.",
                                   labels=keys)
        wait.add_metric(values, total_wait)
        yield wait

        if recent:
            walls = [s.wall for s in recent]
            summary = Metric("pitstop_step_seconds", "Training step wall time: quantiles over the last 50 "
                             "measured steps; sum and count over the run's training steps.", "summary")
            for q in (0.5, 0.95):
                summary.add_sample("pitstop_step_seconds", {**self.labels, "quantile": str(q)},
                                   percentile(walls, q * 100))
            summary.add_sample("pitstop_step_seconds_sum", dict(self.labels), total_wall)
            summary.add_sample("pitstop_step_seconds_count", dict(self.labels), float(train_steps))
            yield summary
            wall = sum(walls)
            if wall > 0:
                ratio = GaugeMetricFamily("pitstop_data_wait_ratio",
                                          "Fraction of step time waiting for data, last 50 steps.", labels=keys)
                ratio.add_metric(values, sum(s.data_wait for s in recent) / wall)
                yield ratio
                rate = GaugeMetricFamily("pitstop_steps_per_second", "Steps per second, last 50 steps.",
                                         labels=keys)
                rate.add_metric(values, len(recent) / wall)
                yield rate
                if all(s.samples is not None for s in recent):
                    sps = GaugeMetricFamily("pitstop_samples_per_second",
                                            "Samples per second of this rank, last 50 steps.", labels=keys)
                    sps.add_metric(values, sum(s.samples or 0 for s in recent) / wall)
                    yield sps

        if last is not None and last.mem_allocated is not None:
            mem = GaugeMetricFamily("pitstop_memory_allocated_bytes", "torch CUDA memory allocated at the last step.",
                                    labels=keys)
            mem.add_metric(values, float(last.mem_allocated))
            yield mem
        if last is not None and last.mem_reserved is not None:
            res = GaugeMetricFamily("pitstop_memory_reserved_bytes", "torch CUDA memory reserved at the last step.",
                                    labels=keys)
            res.add_metric(values, float(last.mem_reserved))
            yield res
        if last is not None and last.host_rss is not None:
            rss = GaugeMetricFamily("pitstop_host_rss_bytes", "Resident memory of the training process.",
                                    labels=keys)
            rss.add_metric(values, float(last.host_rss))
            yield rss

        if sample is not None and time.time() - sample.t <= SAMPLE_MAX_AGE_S:
            yield from self._sample_metrics(sample, keys, values, train_loader)

        if window is not None and window.collective_ms is not None:
            coll = GaugeMetricFamily("pitstop_collective_seconds",
                                     "Collective (NCCL/gloo) time per step, latest profiler window.", labels=keys)
            coll.add_metric(values, window.collective_ms / 1e3)
            yield coll

        if counts is not None:
            found = GaugeMetricFamily("pitstop_findings", "Advice findings on this rank now, by severity.",
                                      labels=[*keys, "severity"])
            for severity in ("high", "medium", "low"):
                found.add_metric([*values, severity], float(counts.get(severity, 0)))
            yield found

        if isinstance(dropped, int):
            drops = CounterMetricFamily("pitstop_events_dropped", "Events the agent's bounded queue dropped.",
                                        labels=keys)
            drops.add_metric(values, float(dropped))
            yield drops

    def _sample_metrics(self, sample: Sample, keys: list[str], values: list[str],
                        train: int | None) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        gpu_keys = [*keys, "gpu", "gpu_name"]
        per_gpu = {
            "pitstop_gpu_utilization_ratio": ("GPU utilisation (NVML), 0..1.", lambda g: None if g.util is None else g.util / 100.0),
            "pitstop_gpu_power_watts": ("GPU power draw (NVML).", lambda g: g.power_w),
            "pitstop_gpu_memory_used_bytes": ("GPU memory used, all processes (NVML).", lambda g: g.mem_used),
            "pitstop_gpu_temperature_celsius": ("GPU temperature (NVML).", lambda g: g.temp_c),
        }
        for name, (doc, get) in per_gpu.items():
            family = GaugeMetricFamily(name, doc, labels=gpu_keys)
            for g in sample.gpus:
                value = get(g)
                if value is not None:
                    family.add_metric([*values, str(g.index), g.name], float(value))
            if family.samples:  # an unavailable reading is absent, never 0
                yield family
        # Workers of different DataLoaders (a training and an eval loader) are never
        # summed into one series: each loader's get their own (`loader`, `loader_role`).
        cpu = GaugeMetricFamily("pitstop_cpu_utilization_ratio",
                                "CPU use of the training process tree in cores (1.0 = one core busy).",
                                labels=[*keys, "role", "loader", "loader_role"])
        main = [p.cpu for p in sample.procs if p.role == "main" and p.cpu is not None]
        if main:
            cpu.add_metric([*values, "main", "", ""], sum(main) / 100.0)
        groups: dict[int | None, list[float]] = {}
        for p in sample.procs:
            if p.role == "worker" and p.cpu is not None:
                groups.setdefault(p.loader, []).append(p.cpu)
        for loader, cpus in sorted(groups.items(), key=lambda kv: -1 if kv[0] is None else kv[0]):
            role = "" if loader is None or train is None else "train" if loader == train else "eval"
            cpu.add_metric([*values, "workers", "" if loader is None else str(loader), role], sum(cpus) / 100.0)
        if cpu.samples:
            yield cpu

    def _finding_counts(self) -> dict[str, int] | None:
        """Findings by severity, re-evaluated at most every FINDINGS_TTL_S; None before any step."""
        if self.run.total_steps == 0:
            return None
        now = time.monotonic()
        if self._findings is None or now - self._findings_t >= FINDINGS_TTL_S:
            counts: dict[str, int] = {}
            for f in findings(self.run):
                counts[f.severity] = counts.get(f.severity, 0) + 1
            self._findings, self._findings_t = counts, now
        return self._findings

    def close_in_child(self) -> None:
        """After a fork (a DataLoader worker): let go of the inherited listening socket."""
        try:
            if self.server is not None:
                self.server.socket.close()
        except Exception:
            pass


def start_exporter(agent: Any, port: int) -> Exporter:
    """Serve this rank's metrics on http://ADDR:port/metrics and feed them from `agent.taps`.

    Raises OSError (with the address) when the port cannot be bound; the agent
    notes it and trains on without metrics.
    """
    from prometheus_client import CollectorRegistry, start_http_server

    addr = os.environ.get(ADDR_ENV, "").strip() or DEFAULT_ADDR
    exporter = Exporter(agent)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)  # type: ignore[arg-type]
    try:
        server, thread = start_http_server(port, addr=addr, registry=registry)
    except OSError as err:
        raise OSError(f"cannot serve metrics on {addr}:{port}: {err.strerror or err}") from err
    thread.name = "pitstop-prometheus"
    exporter.server = server
    os.register_at_fork(after_in_child=exporter.close_in_child)
    agent.taps.append(exporter.tap)
    return exporter
