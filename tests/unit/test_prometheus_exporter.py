"""The Prometheus exporter on hand-made events: raw counters and gauges only, loopback by default, no analysis."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from types import SimpleNamespace
from typing import Any

import pytest

from pitstop.errors import UsageError
from pitstop.events import DataLoaderInfo, Gpu, Hello, Proc, Sample, Step
from pitstop.profiling.launch import parse_prometheus
from pitstop.profiling.prometheus import Exporter, start_exporter

parser = pytest.importorskip("prometheus_client.parser")
from prometheus_client import generate_latest  # noqa: E402


def _hello(**kw: Any) -> Hello:
    base: dict[str, Any] = dict(schema=1, pitstop_version="0.1.0", session="job-9", pid=1, ppid=0, host="node7",
                                argv=[], cwd="/", started=0.0, python="3.12", script="train.py")
    return Hello(**{**base, **kw})


def _families(text: str) -> dict[str, Any]:
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def _scraped(exporter: Exporter) -> dict[str, Any]:
    """What a scrape of this exporter's registry returns, parsed as Prometheus parses it."""
    return _families(generate_latest(exporter.registry).decode())


def _one(m: dict[str, Any], family: str, sample: str, **labels: str) -> float:
    values = [s.value for s in m[family].samples
              if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(values) == 1, (family, sample, labels, m.get(family))
    return float(values[0])


def _absent(m: dict[str, Any], family: str) -> bool:
    """No series (a family with no sample is only its HELP line)."""
    return family not in m or not m[family].samples


def test_a_rank_of_a_job_over_nodes_carries_its_job_rank_and_node() -> None:
    """One Prometheus reads a cluster's job: every series says which job, rank and node it is."""
    hello = _hello(rank=9, local_rank=1, world_size=16, job="slurm:4242.0", launcher="slurm", node="gpu-b",
                   node_rank=1)
    exporter = Exporter(hello)
    exporter.tap([Step(t=time.time(), step=0, wall=0.02, data_wait=0.0, samples=8)])
    labels = _scraped(exporter)["pitstop_steps"].samples[0].labels
    assert (labels["job"], labels["rank"], labels["node"], labels["host"]) == ("slurm:4242.0", "9", "gpu-b", "node7")


def test_steps_are_counted_raw_and_marked_steps_stay_out_of_the_training_counters() -> None:
    exporter = Exporter(_hello(rank=3, local_rank=1, world_size=8), dropped=lambda: 2)
    now = time.time()
    steps = [Step(t=now - 1 + i * 0.01, step=i, wall=0.02, data_wait=0.005, samples=64,
                  mem_allocated=(5 + i) * 2**30, host_rss=2**30) for i in range(20)]
    marked = [Step(t=now, step=20, wall=3.0, data_wait=1.0, samples=64, mark="eval"),
              Step(t=now, step=21, wall=2.0, data_wait=0.0, samples=64, mark="profiled")]
    exporter.tap(steps[:10])
    exporter.tap(steps[10:] + marked)
    m = _scraped(exporter)
    labels = {"session": "job-9", "job": "job-9", "rank": "3", "local_rank": "1", "node": "node7", "host": "node7",
              "script": "train.py"}
    assert m["pitstop_steps"].type == "counter"
    assert m["pitstop_steps"].samples[0].labels == labels
    assert _one(m, "pitstop_steps", "pitstop_steps_total") == 22  # every step
    assert _one(m, "pitstop_step_seconds", "pitstop_step_seconds_count") == 20  # training steps only
    assert _one(m, "pitstop_step_seconds", "pitstop_step_seconds_sum") == pytest.approx(0.4)
    assert _one(m, "pitstop_step_seconds", "pitstop_step_seconds_bucket", le="0.01") == 0
    assert _one(m, "pitstop_step_seconds", "pitstop_step_seconds_bucket", le="0.025") == 20
    assert _one(m, "pitstop_data_wait_seconds", "pitstop_data_wait_seconds_total") == pytest.approx(0.1)
    assert _one(m, "pitstop_samples", "pitstop_samples_total") == 20 * 64
    assert _one(m, "pitstop_unsized_steps", "pitstop_unsized_steps_total") == 0
    assert _one(m, "pitstop_marked_steps", "pitstop_marked_steps_total", mark="eval") == 1
    assert _one(m, "pitstop_marked_steps", "pitstop_marked_steps_total", mark="profiled") == 1
    assert _one(m, "pitstop_memory_allocated_bytes", "pitstop_memory_allocated_bytes") == 24 * 2**30
    assert _one(m, "pitstop_host_rss_bytes", "pitstop_host_rss_bytes") == 2**30
    assert _one(m, "pitstop_events_dropped", "pitstop_events_dropped_total") == 2
    info = m["pitstop_run_info"].samples[0].labels
    assert (info["world_size"], info["pitstop_version"]) == ("8", "0.1.0")
    # Raw figures only: no recent-window rates, quantiles or advice in the process (issue 13)
    derived = {"pitstop_steps_per_second", "pitstop_samples_per_second", "pitstop_data_wait_ratio", "pitstop_findings"}
    assert not derived & set(m)
    assert not any(s.labels.get("quantile") for f in m.values() for s in f.samples)


def test_steps_without_a_batch_size_are_counted_apart_from_the_samples() -> None:
    exporter = Exporter(_hello())
    exporter.tap([Step(t=1.0, step=0, wall=0.1, data_wait=0.0, samples=None),  # before the model was found
                  Step(t=2.0, step=1, wall=0.1, data_wait=0.0, samples=8),
                  Step(t=3.0, step=2, wall=0.1, data_wait=0.0, samples=8)])
    m = _scraped(exporter)
    assert _one(m, "pitstop_samples", "pitstop_samples_total") == 16
    assert _one(m, "pitstop_unsized_steps", "pitstop_unsized_steps_total") == 1
    assert _one(m, "pitstop_steps", "pitstop_steps_total") == 3


def test_gpu_figures_are_exported_per_gpu_and_unavailable_ones_are_absent() -> None:
    exporter = Exporter(_hello())
    now = time.time()
    exporter.tap([Sample(t=now, gpus=[Gpu(index=0, name="H100", util=87.0, power_w=512.0, mem_total=80 * 2**30),
                                      Gpu(index=1, name="H100", util=None, power_w=300.0,
                                          unavailable={"util": "not supported"})],
                         alloc_retries=4, ooms=0)])
    m = _scraped(exporter)
    util = {s.labels["gpu"]: s.value for s in m["pitstop_gpu_utilization_ratio"].samples}
    assert util == {"0": pytest.approx(0.87)}  # GPU 1's util is unavailable: no series, not 0
    power = {s.labels["gpu"]: s.value for s in m["pitstop_gpu_power_watts"].samples}
    assert power == {"0": 512.0, "1": 300.0}
    assert _absent(m, "pitstop_gpu_temperature_celsius")
    assert _one(m, "pitstop_cuda_alloc_retries", "pitstop_cuda_alloc_retries_total") == 4
    assert _absent(m, "pitstop_memory_allocated_bytes")  # no step with CUDA memory: absent, never 0
    # A reading older than 10 s: the sampler stopped, so the GPU series go rather than freeze
    exporter.tap([Sample(t=now - 60, gpus=[Gpu(index=0, name="H100", util=50.0)])])
    assert _absent(_scraped(exporter), "pitstop_gpu_utilization_ratio")


def test_gpm_figures_are_ratios_per_gpu_and_absent_where_a_gpu_has_none() -> None:
    """Issue 15: an H100 says how busy its SMs, tensor pipes and DRAM were; an A100 has no such series."""
    exporter = Exporter(_hello())
    exporter.tap([Sample(t=time.time(), gpus=[
        Gpu(index=0, name="H100", util=100.0, sm_active=91.0, sm_occupancy=38.0, tensor_active=7.0,
            dram_bw_util=44.0),
        Gpu(index=1, name="A100", util=100.0, unavailable={"gpm": "GPM needs Hopper or newer"})])])
    m = _scraped(exporter)
    for family, value in (("pitstop_gpu_sm_active_ratio", 0.91), ("pitstop_gpu_sm_occupancy_ratio", 0.38),
                          ("pitstop_gpu_tensor_active_ratio", 0.07), ("pitstop_gpu_dram_bandwidth_ratio", 0.44)):
        assert {s.labels["gpu"]: s.value for s in m[family].samples} == {"0": pytest.approx(value)}, family


def test_workers_of_the_training_and_an_eval_loader_are_separate_cpu_series() -> None:
    exporter = Exporter(_hello())
    now = time.time()
    exporter.tap([DataLoaderInfo(t=now - 2, id=i, num_workers=2, batch_size=8, pin_memory=False,
                                 persistent_workers=False, prefetch_factor=2) for i in (1, 2)])
    exporter.tap([Step(t=now - 1 + i * 0.01, step=i, wall=0.01, data_wait=0.0, samples=8, loader=1)
                  for i in range(10)])
    exporter.tap([Sample(t=now, procs=[Proc(pid=1, role="main", cpu=93.0, rss=1),
                                       Proc(pid=2, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=3, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=4, role="worker", cpu=10.0, rss=1, loader=2)])])
    m = _scraped(exporter)
    cpu = {(s.labels["role"], s.labels["loader"], s.labels["loader_role"]): s.value
           for s in m["pitstop_cpu_utilization_ratio"].samples}
    assert cpu == {("main", "", ""): pytest.approx(0.93), ("workers", "1", "train"): pytest.approx(1.6),
                   ("workers", "2", "eval"): pytest.approx(0.1)}


def _agent(host: str | None) -> SimpleNamespace:
    notes: list[tuple[str, str, str]] = []
    return SimpleNamespace(hello=_hello(), dropped=0, taps=[], notes=notes,
                           settings=SimpleNamespace(prometheus_host=host),
                           note=lambda level, source, message: notes.append((level, source, message)))


@pytest.mark.parametrize(("host", "bound"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_the_endpoint_listens_on_loopback_unless_a_host_is_given(host: str | None, bound: str) -> None:
    agent = _agent(host)
    exporter = start_exporter(agent, 0)  # 0: any free port
    try:
        addr, port = exporter.server.server_address[:2]
        assert addr == bound
        assert agent.notes == [("info", "prometheus", f"serving metrics on http://{bound}:0/metrics")]
        for tap in agent.taps:  # what the agent's writer thread does with each batch
            tap([Step(t=1.0, step=i, wall=0.05, data_wait=0.01, samples=4) for i in range(7)])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as resp:
            m = _families(resp.read().decode())
        assert _one(m, "pitstop_steps", "pitstop_steps_total") == 7
        assert _one(m, "pitstop_samples", "pitstop_samples_total") == 28
    finally:
        exporter.server.shutdown()
        exporter.server.server_close()


def test_the_exporter_imports_no_analysis_into_the_training_process() -> None:
    """Advice rules and derived figures belong to the viewers: the agent side must not even import them."""
    code = ("import json, sys; import pitstop.profiling.prometheus; "
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith('pitstop'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = json.loads(out)
    assert "pitstop.profiling.prometheus" in loaded
    assert [m for m in loaded if m.startswith("pitstop.analysis")] == []


@pytest.mark.parametrize(("text", "want"), [
    ("9400", ("127.0.0.1", 9400)), ("0.0.0.0:9400", ("0.0.0.0", 9400)), ("[::1]:9401", ("::1", 9401)),
])
def test_a_prometheus_address_is_loopback_unless_a_host_is_given(text: str, want: tuple[str, int]) -> None:
    assert parse_prometheus(text) == want


@pytest.mark.parametrize(("text", "error"), [
    ("0.0.0.0:99999", "--prometheus '0.0.0.0:99999': give a TCP port from 1 to 65535"),
    ("nosuch.invalid:9400", "--prometheus 'nosuch.invalid:9400': unknown host 'nosuch.invalid'"),
])
def test_a_bad_prometheus_address_is_one_line(text: str, error: str) -> None:
    with pytest.raises(UsageError) as err:
        parse_prometheus(text)
    assert str(err.value).startswith(error) and "\n" not in str(err.value)


def _fed_exporter() -> Exporter:
    """An exporter that has seen every kind of event it exports something for (a CUDA rank with a window)."""
    from pitstop.events import ProfileWindow, Runtime

    exporter = Exporter(_hello(rank=0, local_rank=0, world_size=2), dropped=lambda: 0)
    now = time.time()
    exporter.tap([Runtime(t=now - 5, torch_version="2.5", cuda_version="12.4", device_type="cuda")])
    exporter.tap([Step(t=now - 1, step=i, wall=0.1, data_wait=0.01, samples=32, loader=1, mem_allocated=2**30,
                       mem_reserved=2**31, mem_peak=2**31, host_rss=2**30) for i in range(5)])
    exporter.tap([ProfileWindow(t=now, step_start=2, step_end=4, device="cuda", collective_ms=12.0),
                  Sample(t=now, gpus=[Gpu(index=0, name="H100", util=90.0, power_w=400.0, mem_used=2**33,
                                          mem_total=2**36, temp_c=60.0, sm_clock_mhz=1980.0)],
                         procs=[Proc(pid=1, role="main", cpu=100.0, rss=1),
                                Proc(pid=2, role="worker", cpu=50.0, rss=1, loader=1)],
                         alloc_retries=0, ooms=0)])
    return exporter


def test_every_series_the_grafana_dashboard_queries_is_one_the_agent_exports() -> None:
    """The dashboard rates raw counters; a panel over a metric nobody exports is an empty panel."""
    import re

    from pitstop import docs

    dashboard = json.loads(docs.read(docs.find("grafana-dashboard")))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    exported = {s.name for f in _scraped(_fed_exporter()).values() for s in f.samples}
    queried = {name for e in exprs for name in re.findall(r"\bpitstop_[a-z_]+", e)}
    assert queried and queried <= exported, sorted(queried - exported)
    # a counter is only ever read through a rate: its raw value is "since the process started"
    for e in exprs:
        for name in re.findall(r"\bpitstop_[a-z_]+_(?:total|sum|count|bucket)\b", e):
            assert re.search(rf"rate\({name}\{{", e), (name, e)
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert all("$session" in e for e in exprs) and "session" in variables


def test_seconds_since_the_last_step_grow_and_a_stall_is_a_gauge() -> None:
    from pitstop.events import Stall

    exporter = Exporter(_hello())
    exporter.tap([Step(t=time.time() - 90.0, step=19, wall=0.01, data_wait=0.0)])
    m = _scraped(exporter)
    assert _one(m, "pitstop_seconds_since_last_step", "pitstop_seconds_since_last_step") >= 90.0
    assert _one(m, "pitstop_stalled", "pitstop_stalled") == 0.0
    exporter.tap([Stall(t=time.time(), phase="start", step=19, since_s=80.0, threshold_s=60.0)])
    assert _one(_scraped(exporter), "pitstop_stalled", "pitstop_stalled") == 1.0
    exporter.tap([Stall(t=time.time(), phase="end", step=19, since_s=95.0, threshold_s=60.0, lasted_s=95.0)])
    assert _one(_scraped(exporter), "pitstop_stalled", "pitstop_stalled") == 0.0
