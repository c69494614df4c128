"""Provides the front's own Prometheus endpoint: what `pitstop run` knows of each process it watches, served
from its own process, so that a scrape still answers while a training thread holds the GIL.

Each rank's endpoint (`prometheus.py`) is a thread of the training process. A
training thread that holds the GIL in native code stops it with every other
thread there: measured with tests/integration/scripts/stall_native_gil.py (a
`ctypes.PyDLL` call) under `pitstop run --prometheus`, scrapes answered in
12-130 ms before the hold and every one during it timed out (`curl -m 5`:
no answer in 5 s), so Prometheus reads the target as down (`up` 0) and
`pitstop_seconds_since_last_step` has no sample while the run is stuck. No
collector inside that process can answer then. `pitstop run` is another
process: it hears every agent's stream (`_silence.SilenceWatch`), so it serves
`--prometheus-front [HOST:]PORT` with, per process it watches on this host,
the seconds since it last heard from it and since its last step, and whether
the process is stuck (its agent's stall, or the front's own read from
outside). Read at scrape time from the watch's state, under its lock; nothing
runs in the training process.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from pitstop.profiling._silence import SilenceWatch
from pitstop.profiling.prometheus import LABELS, endpoint_url, hello_labels


class FrontCollector:
    """The gauges of every live stream the silence watch follows, at scrape time."""

    def __init__(self, watch: SilenceWatch) -> None:
        self.watch = watch

    def collect(self) -> Iterator[Metric]:
        keys = list(LABELS)
        heard = GaugeMetricFamily("pitstop_front_seconds_since_heard",
                                  "Seconds since pitstop run last heard from the process's agent (the sampler "
                                  "alone sends an event a second): grows while a thread holds the GIL.", labels=keys)
        stepped = GaugeMetricFamily("pitstop_front_seconds_since_last_step",
                                    "Seconds since the process's latest step ended, as pitstop run heard it.",
                                    labels=keys)
        stalled = GaugeMetricFamily("pitstop_front_stalled",
                                    "1 while the process is stuck (its agent's stall, or pitstop run's own read of "
                                    "a silent process), else 0.", labels=keys)
        now, wall = self.watch.clock(), time.time()
        for row in self.watch.rows():
            values = [hello_labels(row.hello)[k] for k in keys]
            heard.add_metric(values, max(0.0, now - row.heard_at))
            if row.last_step_t is not None:
                stepped.add_metric(values, max(0.0, wall - row.last_step_t))
            stalled.add_metric(values, 1.0 if row.stalled else 0.0)
        yield heard
        yield stepped
        yield stalled


def start_front_metrics(watch: SilenceWatch, host: str, port: int) -> Any:
    """Serve the front's gauges on http://HOST:PORT/metrics from a thread of this process (pitstop run's);
    raises OSError with the address where the port cannot be bound."""
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(FrontCollector(watch))  # type: ignore[arg-type]
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as err:
        raise OSError(f"cannot serve the front's metrics on {host}:{port}: {err.strerror or err}") from err
    thread.name = "pitstop-front-metrics"
    return server


def say_front_metrics(watch: SilenceWatch, metrics: tuple[str, int] | None, say: Any) -> Any:
    """--prometheus-front: start it and say where, or say why not (the run goes on either way)."""
    if metrics is None:
        return None
    host, port = metrics
    try:
        server = start_front_metrics(watch, host, port)
    except OSError as err:
        say(f"pitstop: warning: {err}; the run goes on without them")
        return None
    say(f"pitstop: the front's metrics on {endpoint_url(host, port)} (served by pitstop run itself: they answer "
        "while a training thread holds the GIL)")
    return server
