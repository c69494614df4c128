"""Provides the per-rank Prometheus endpoint: raw counters and gauges of this process (names in docs/prometheus.md).

Runs inside the training process, so it only counts: no advice rule, no
recent-window rate, no import of `pitstop.analysis` (every rule ran
on the scrape thread of the user's process, a second time beside the viewers).
Rates, quantiles and ratios are PromQL over these counters (`rate()`,
`histogram_quantile()`), as in docs/prometheus.md and the Grafana dashboard.

Events reach it through `agent.taps` on the agent's writer thread (every
~0.5 s, a batch at a time); the training thread is never touched. Counters and
the step histogram are prometheus_client's own thread-safe objects; the last
sampler reading and profiler window are one reference each, read whole by a
scrape. Its own CollectorRegistry is used, so the user's own metrics on the
global registry (if any) are neither polluted nor exported twice.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from pitstop.events import Event, Gpu, Hello, ProfileWindow, Runtime, Sample, Stall, Step

# Loopback unless the person asks for more (`--prometheus HOST:PORT`): the
# endpoint has no authentication (it bound 0.0.0.0 before).
LOOPBACK = "127.0.0.1"
# Step wall time spans 1 ms (a small model on a GPU) to minutes (a large one
# with gradient accumulation); 15 buckets keep each rank's series count small.
STEP_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# A GPU or process reading older than 10 s (5-20 sampler periods) is stale:
# the sampler stopped, so the series disappears rather than freezing.
SAMPLE_MAX_AGE_S = 10.0

# `job` is the job across nodes (Hello.job: Slurm's job, torchrun's run and store, Ray's run; the session
# outside those), so one Prometheus reads a cluster's job. Prometheus sets `job` on every scraped series
# itself (the scrape config's name) and renames a target's own to `exported_job` unless the scrape config
# says `honor_labels: true` (docs/prometheus.md); `session` stays, one per node's `pitstop run`.
LABELS = ("session", "job", "rank", "local_rank", "node", "host", "script")
# Step field -> (gauge name, help): the latest value the agent stamped.
MEMORY = {
    "mem_allocated": ("pitstop_memory_allocated_bytes",
                      "torch CUDA memory allocated as last read (at most ~0.1 s before the latest step)."),
    "mem_reserved": ("pitstop_memory_reserved_bytes", "torch CUDA memory reserved (latest reading)."),
    "mem_peak": ("pitstop_memory_peak_bytes", "torch CUDA peak memory allocated since start (latest reading)."),
    "host_rss": ("pitstop_host_rss_bytes", "Resident memory of the training process (latest reading)."),
}
# Gauge name -> (help, NVML reading of one GPU; None when unavailable).
PER_GPU: dict[str, tuple[str, Callable[[Gpu], float | None]]] = {
    "pitstop_gpu_utilization_ratio": ("GPU utilisation (NVML), 0..1.", lambda g: None if g.util is None else g.util / 100.0),
    "pitstop_gpu_power_watts": ("GPU power draw (NVML).", lambda g: g.power_w),
    "pitstop_gpu_memory_used_bytes": ("GPU memory used, all processes (NVML).", lambda g: g.mem_used),
    "pitstop_gpu_memory_total_bytes": ("GPU memory size (NVML).", lambda g: g.mem_total),
    "pitstop_gpu_temperature_celsius": ("GPU temperature (NVML).", lambda g: g.temp_c),
    "pitstop_gpu_sm_clock_hertz": ("GPU SM clock (NVML).", lambda g: None if g.sm_clock_mhz is None else g.sm_clock_mhz * 1e6),
    # GPM (Hopper and newer): absent where the GPU, driver or nvidia-ml-py has none.
    "pitstop_gpu_sm_active_ratio": ("Share of SMs busy over the last sampler interval (NVML GPM), 0..1.",
                                    lambda g: _ratio(g.sm_active)),
    "pitstop_gpu_sm_occupancy_ratio": ("Warps resident of the SMs' maximum over the last sampler interval "
                                       "(NVML GPM), 0..1.", lambda g: _ratio(g.sm_occupancy)),
    "pitstop_gpu_tensor_active_ratio": ("Share of time the tensor pipes were active, any precision, over the "
                                        "last sampler interval (NVML GPM), 0..1.", lambda g: _ratio(g.tensor_active)),
    "pitstop_gpu_dram_bandwidth_ratio": ("DRAM bandwidth used of the peak over the last sampler interval "
                                         "(NVML GPM), 0..1.", lambda g: _ratio(g.dram_bw_util)),
}


def _ratio(percent: float | None) -> float | None:
    return None if percent is None else percent / 100.0


def hello_labels(hello: Hello) -> dict[str, str]:
    """The labels on every series of this process."""
    return {
        "session": hello.session,
        "job": hello.job or hello.session,
        # Empty outside a launcher: an empty label is an absent one in Prometheus.
        "rank": "" if hello.rank is None else str(hello.rank),
        "local_rank": "" if hello.local_rank is None else str(hello.local_rank),
        "node": hello.node or hello.host,
        "host": hello.host,
        "script": hello.script,
    }


class Exporter:
    """This rank's metrics: updated from event batches (`tap`), read by prometheus_client on scrape."""

    def __init__(self, hello: Hello, dropped: Callable[[], int | None] = lambda: None) -> None:
        self.hello = hello
        self.labels = hello_labels(hello)
        self._values = [self.labels[k] for k in LABELS]
        self._dropped = dropped
        self.registry = CollectorRegistry(auto_describe=True)
        keys, reg = list(LABELS), self.registry
        self._info = Info("pitstop_run", "What this process is.", keys, registry=reg)
        self._set_info(device="")
        self._steps = Counter("pitstop_steps", "Steps completed (every step, marked ones included).",
                              keys, registry=reg).labels(*self._values)
        self._marked = Counter("pitstop_marked_steps", "Steps kept out of training figures, by Step.mark "
                               "(eval, profiled, after-profile).", [*keys, "mark"], registry=reg)
        self._step_seconds = Histogram("pitstop_step_seconds", "Wall time of training steps (marked steps left out).",
                                       keys, buckets=STEP_BUCKETS, registry=reg).labels(*self._values)
        self._data_wait = Counter("pitstop_data_wait_seconds", "Seconds training steps were blocked on the DataLoader.",
                                  keys, registry=reg).labels(*self._values)
        self._samples = Counter("pitstop_samples", "Samples (batch rows) consumed by training steps that "
                                "reported a batch size.", keys, registry=reg).labels(*self._values)
        # The first step often has no batch size (the model is found at its backward):
        # counted apart, so a window where sizes are missing is seen, not an undercount.
        self._unsized = Counter("pitstop_unsized_steps", "Training steps whose batch size is unknown "
                                "(their samples are not in pitstop_samples_total).", keys, registry=reg).labels(*self._values)
        self._memory = {f: Gauge(name, doc, keys, registry=reg) for f, (name, doc) in MEMORY.items()}
        # Written by the writer thread, read by a scrape: single references, replaced whole.
        self.sample: Sample | None = None
        self.window: ProfileWindow | None = None
        self.train_loader: int | None = None  # Step.loader: the loader whose batches fed the latest step
        self.last_step_t: float | None = None  # Step.t of the latest step: seconds since it, at scrape time
        self.stalled = False  # a Stall began and has not ended (profiling/_stallwatch.py)
        reg.register(_Latest(self))  # type: ignore[arg-type]
        self.server: Any = None

    def _set_info(self, device: str) -> None:
        ws = self.hello.world_size
        self._info.labels(*self._values).info(
            {"device": device, "world_size": "" if ws is None else str(ws), "pitstop_version": self.hello.pitstop_version}
        )

    def tap(self, events: list[Event]) -> None:
        """Called by the agent's writer thread with each batch of events."""
        steps = [e for e in events if isinstance(e, Step)]
        if steps:
            self._add_steps(steps)
            self.last_step_t = steps[-1].t
        for event in events:
            if isinstance(event, Stall):
                self.stalled = event.phase in ("start", "update")
            elif isinstance(event, Sample):
                self.sample = event
            elif isinstance(event, ProfileWindow):
                self.window = event
            elif isinstance(event, Runtime):
                self._set_info(event.device_type)

    def _add_steps(self, steps: list[Step]) -> None:
        # Summed per batch, one inc() per counter: one inc() and label lookup per step
        # cost 7-8 us a step on the writer thread, 1.2 us now (2000 steps in batches
        # of 50, 2-core VM); the histogram still sees every step.
        wait = samples = 0.0
        unsized = 0
        marked: dict[str, int] = {}
        observe = self._step_seconds.observe
        for s in steps:
            if s.mark is not None:  # DESIGN rule 7: an eval pass or a profiler window is not training time
                marked[s.mark] = marked.get(s.mark, 0) + 1
                continue
            observe(s.wall)
            wait += s.data_wait
            if s.samples is None:
                unsized += 1
            else:
                samples += s.samples
        self._steps.inc(len(steps))
        self._data_wait.inc(wait)
        self._samples.inc(samples)
        if unsized:
            self._unsized.inc(unsized)
        for mark, n in marked.items():
            self._marked.labels(*self._values, mark).inc(n)
        loaders = [s.loader for s in steps if s.loader is not None]
        if loaders:
            self.train_loader = loaders[-1]
        for field, gauge in self._memory.items():  # the latest reading of each
            value = next((v for s in reversed(steps) if (v := getattr(s, field)) is not None), None)
            if value is not None:
                gauge.labels(*self._values).set(value)

    def close_in_child(self) -> None:
        """After a fork (a DataLoader worker): let go of the inherited listening socket."""
        try:
            if self.server is not None:
                self.server.socket.close()
        except Exception:
            pass


class _Latest:
    """The collector of what is read at scrape time: the sampler's latest reading, the latest window, drops."""

    def __init__(self, exporter: Exporter) -> None:
        self._exp = exporter

    def collect(self) -> Iterator[Metric]:
        exp, keys, values = self._exp, list(LABELS), self._exp._values
        sample, window, dropped = exp.sample, exp.window, exp._dropped()
        if sample is not None and time.time() - sample.t <= SAMPLE_MAX_AGE_S:
            yield from _gpu_gauges(sample, keys, values)
            yield from _sample_counters(sample, keys, values)
            cpu = _cpu_gauge(sample, keys, values, exp.train_loader)
            if cpu.samples:
                yield cpu
        if window is not None and window.collective_ms is not None:
            coll = GaugeMetricFamily("pitstop_collective_seconds",
                                     "Collective (NCCL/gloo) time per step, latest profiler window.", labels=keys)
            coll.add_metric(values, window.collective_ms / 1e3)
            yield coll
        if exp.last_step_t is not None:
            since = GaugeMetricFamily("pitstop_seconds_since_last_step",
                                      "Seconds since the latest step ended (grows while the run is stuck).", labels=keys)
            since.add_metric(values, max(0.0, time.time() - exp.last_step_t))
            yield since
            stalled = GaugeMetricFamily("pitstop_stalled", "1 while the run is stuck (a stall detected and not "
                                        "ended: no progress for longer than the stall threshold), else 0.", labels=keys)
            stalled.add_metric(values, 1.0 if exp.stalled else 0.0)
            yield stalled
        if isinstance(dropped, int):
            drops = CounterMetricFamily("pitstop_events_dropped", "Events the agent's bounded queue dropped.",
                                        labels=keys)
            drops.add_metric(values, float(dropped))
            yield drops


def _gpu_gauges(sample: Sample, keys: list[str], values: list[str]) -> Iterator[Metric]:
    for name, (doc, get) in PER_GPU.items():
        family = GaugeMetricFamily(name, doc, labels=[*keys, "gpu", "gpu_name"])
        for g in sample.gpus:
            value = get(g)
            if value is not None:
                family.add_metric([*values, str(g.index), g.name], float(value))
        if family.samples:  # an unavailable reading is absent, never 0
            yield family


def _sample_counters(sample: Sample, keys: list[str], values: list[str]) -> Iterator[Metric]:
    for name, doc, value in (
        ("pitstop_cuda_alloc_retries", "torch CUDA allocator retries (cudaMalloc retried after freeing the cache).",
         sample.alloc_retries),
        ("pitstop_cuda_ooms", "torch CUDA out-of-memory errors.", sample.ooms),
    ):
        if value is not None:
            family = CounterMetricFamily(name, doc, labels=keys)
            family.add_metric(values, float(value))
            yield family


def _cpu_gauge(sample: Sample, keys: list[str], values: list[str], train: int | None) -> GaugeMetricFamily:
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
    return cpu


def endpoint_url(host: str, port: int) -> str:
    """http://HOST:PORT/metrics, an IPv6 host in brackets."""
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/metrics"


def start_exporter(agent: Any, port: int) -> Exporter:
    """Serve this rank's metrics on http://HOST:port/metrics (HOST: the session's, loopback by default).

    Raises OSError (with the address) when the port cannot be bound; the agent
    notes it and trains on without metrics.
    """
    from prometheus_client import start_http_server

    host = getattr(agent.settings, "prometheus_host", None) or LOOPBACK
    exporter = Exporter(agent.hello, dropped=lambda: getattr(agent, "dropped", None))
    try:
        server, thread = start_http_server(port, addr=host, registry=exporter.registry)
    except OSError as err:
        raise OSError(f"cannot serve metrics on {host}:{port}: {err.strerror or err}") from err
    thread.name = "pitstop-prometheus"
    exporter.server = server
    os.register_at_fork(after_in_child=exporter.close_in_child)
    agent.taps.append(exporter.tap)
    agent.note("info", "prometheus", f"serving metrics on {endpoint_url(host, port)}")
    return exporter
