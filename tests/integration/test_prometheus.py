"""`pitstop run --prometheus PORT`: each rank serves its metrics, scraped over loopback and parsed."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from pitstop.events import Hello

from .conftest import SCRIPTS, events_of, wait_for

parser = pytest.importorskip("prometheus_client.parser")


def _free_ports(n: int) -> int:
    """A base port with `n` consecutive free ports on the loopback (rank r serves base + r)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + n > 65535:
            continue
        try:
            for p in range(base, base + n):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
    raise AssertionError("no free consecutive ports")


def _scrape(port: int) -> dict[str, Any] | None:
    """{family name: family} from http://127.0.0.1:port/metrics, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            text = resp.read().decode()
    except OSError:
        return None
    return {f.name: f for f in parser.text_string_to_metric_families(text)}


def _value(families: dict[str, Any] | None, name: str, sample: str | None = None) -> float | None:
    if not families or name not in families:
        return None
    for s in families[name].samples:
        if s.name == (sample or name):
            return float(s.value)
    return None


def _hello(record: Path) -> Hello | None:
    try:
        first = events_of(record)[:1]
    except Exception:
        return None
    return first[0] if first and isinstance(first[0], Hello) else None


@pytest.mark.slow
def test_one_process_serves_its_metrics_and_the_step_counter_rises(tmp_path: Path, env: dict[str, str]) -> None:
    port = _free_ports(1)
    env["PITSTOP_PROMETHEUS_ADDR"] = "127.0.0.1"
    record = tmp_path / "live.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--prometheus", str(port), "--record", str(record),
         str(SCRIPTS / "loop_forever.py")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    try:
        seen: dict[str, Any] = {}

        def steps_at_least(n: int) -> bool:
            seen["m"] = _scrape(port)
            return (_value(seen["m"], "pitstop_steps", "pitstop_steps_total") or 0) >= n

        wait_for(lambda: steps_at_least(5), timeout=90, what="pitstop_steps_total >= 5 on the endpoint")
        first = _value(seen["m"], "pitstop_steps", "pitstop_steps_total") or 0
        wait_for(lambda: steps_at_least(first + 5), timeout=60, what="pitstop_steps_total to rise")
        m = seen["m"]
        hello = _hello(record)
        assert hello is not None
        labels = m["pitstop_steps"].samples[0].labels
        assert labels["job"] == hello.session and labels["host"] == socket.gethostname()
        assert labels["script"].endswith("loop_forever.py")
        assert labels.get("rank", "") == ""  # not under a launcher: no rank label
        assert m["pitstop_steps"].type == "counter"
        # loop_forever sleeps 10 ms a step: the recent p50 is at least that
        p50 = next(s.value for s in m["pitstop_step_seconds"].samples if s.labels.get("quantile") == "0.5")
        assert 0.01 <= p50 < 1.0
        assert 1.0 < (_value(m, "pitstop_steps_per_second") or 0.0) <= 100.0
        assert (_value(m, "pitstop_host_rss_bytes") or 0.0) > 10 * 2**20
        # loop_forever builds its batches without a DataLoader: the batch size is read
        # from the leading dimension of the model's input (16 rows)
        sps, rate = _value(m, "pitstop_samples_per_second"), _value(m, "pitstop_steps_per_second")
        assert sps is not None and rate is not None and sps == pytest.approx(16 * rate)
        assert 0.0 <= (_value(m, "pitstop_data_wait_ratio") or 0.0) <= 1.0
        # CPU only: unavailable figures are absent, never 0
        assert "pitstop_memory_allocated_bytes" not in m
        assert "pitstop_gpu_utilization_ratio" not in m and "pitstop_gpu_power_watts" not in m
        severities = {s.labels["severity"] for s in m["pitstop_findings"].samples}
        assert severities == {"high", "medium", "low"}
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


@pytest.mark.slow
def test_each_rank_of_a_torchrun_job_serves_on_base_port_plus_local_rank(tmp_path: Path, env: dict[str, str]) -> None:
    port = _free_ports(2)
    env["PITSTOP_PROMETHEUS_ADDR"] = "127.0.0.1"
    stop = tmp_path / "stop"
    env["STOP_FILE"] = str(stop)
    records = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--prometheus", str(port),
         "--record", str(records), "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node", "2", str(SCRIPTS / "ddp_until_stop.py"), "3000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        got: dict[int, dict[str, Any]] = {}

        def both_counting() -> bool:
            for r in (0, 1):
                m = _scrape(port + r)
                if m is not None and (_value(m, "pitstop_steps", "pitstop_steps_total") or 0) >= 5:
                    got[r] = m
            return len(got) == 2

        wait_for(both_counting, timeout=120, what="both ranks' endpoints counting steps")
        sessions = set()
        for r in (0, 1):
            labels = got[r]["pitstop_steps"].samples[0].labels
            assert (labels["rank"], labels["local_rank"]) == (str(r), str(r))
            assert labels["script"].endswith("ddp_until_stop.py")
            sessions.add(labels["job"])
            info = got[r]["pitstop_run_info"].samples[0].labels
            assert info["world_size"] == "2" and info["device"] == "cpu"
        hellos = {h.rank: h for f in records.glob("rank*.jsonl") if (h := _hello(f)) is not None}
        assert sessions == {hellos[0].session} and len(sessions) == 1  # one job label for every rank
        stop.write_text("")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert out.count("done after") == 2
    finally:
        stop.write_text("")
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
    assert _scrape(port) is None and _scrape(port + 1) is None


def test_gpu_figures_are_exported_per_gpu_and_unavailable_ones_are_absent() -> None:
    """The collector on hand-made events (no subprocess): what a CUDA rank exports."""
    import time as _time
    from types import SimpleNamespace

    from pitstop.events import Gpu, Sample, Step
    from pitstop.profiling.prometheus import Exporter

    hello = Hello(schema=1, pitstop_version="0.1.0", session="job-9", pid=1, ppid=0, host="node7", argv=[],
                  cwd="/", started=0.0, python="3.12", rank=3, local_rank=1, world_size=8, script="train.py")
    agent = SimpleNamespace(hello=hello, dropped=2, taps=[])
    exporter = Exporter(agent)
    now = _time.time()
    exporter.tap([Step(t=now - 1 + i * 0.01, step=i, wall=0.01, data_wait=0.002, samples=64,
                       mem_allocated=5 * 2**30, host_rss=2**30) for i in range(20)])
    exporter.tap([Sample(t=now, gpus=[Gpu(index=0, name="H100", util=87.0, power_w=512.0),
                                      Gpu(index=1, name="H100", util=None, power_w=300.0,
                                          unavailable={"util": "not supported"})])])
    m = {f.name: f for f in exporter.collect()}
    util = {s.labels["gpu"]: s.value for s in m["pitstop_gpu_utilization_ratio"].samples}
    assert util == {"0": pytest.approx(0.87)}  # GPU 1's util is unavailable: no series, not 0
    power = {s.labels["gpu"]: s.value for s in m["pitstop_gpu_power_watts"].samples}
    assert power == {"0": 512.0, "1": 300.0}
    assert "pitstop_gpu_temperature_celsius" not in m
    labels = m["pitstop_steps"].samples[0].labels
    assert labels == {"job": "job-9", "rank": "3", "local_rank": "1", "host": "node7", "script": "train.py"}
    assert m["pitstop_samples_per_second"].samples[0].value == pytest.approx(6400.0)
    assert m["pitstop_data_wait_ratio"].samples[0].value == pytest.approx(0.2)
    assert m["pitstop_memory_allocated_bytes"].samples[0].value == 5 * 2**30
    assert m["pitstop_events_dropped"].samples[0].value == 2


def test_a_busy_port_is_said_on_stderr_while_training_runs(tmp_path: Path, env: dict[str, str]) -> None:
    """Issue 10: a --prometheus port another process holds was silent, exit 0."""
    env["PITSTOP_PROMETHEUS_ADDR"] = "127.0.0.1"
    script = tmp_path / "train.py"
    # Trains until the warning is visible (a file the test writes), so "at start" is what is checked.
    script.write_text(
        "import os, time, torch\n"
        "model = torch.nn.Linear(4, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "while not os.path.exists(os.environ['STOP_FILE']):\n"
        "    model(torch.randn(8, 4)).sum().backward(); opt.step(); opt.zero_grad(); time.sleep(0.02)\n"
    )
    stop = tmp_path / "stop"
    env["STOP_FILE"] = str(stop)
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        proc = subprocess.Popen(
            [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--prometheus", str(port),
             "--record", str(tmp_path / "r.jsonl"), str(script)],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stderr is not None
        lines: list[str] = []
        deadline = threading.Timer(60.0, stop.write_text, args=("",))  # no warning ever: the script still ends
        deadline.start()
        try:
            for line in proc.stderr:  # while the script still trains
                lines.append(line.rstrip("\n"))
                if "(prometheus)" in line:
                    break
        finally:
            stop.write_text("")
            deadline.cancel()
        _, rest = proc.communicate(timeout=60)
    warning = next((line for line in lines if "(prometheus)" in line), None)
    assert warning == (f"pitstop: warning (prometheus): metrics endpoint off: cannot serve metrics on "
                       f"127.0.0.1:{port}: Address already in use"), "\n".join(lines) + rest
    assert not any(line.startswith("pitstop summary") for line in lines)  # said before the end, not only in it
    assert "notes       warning (prometheus): metrics endpoint off" in rest  # and kept in the summary
    assert proc.returncode == 0


def test_workers_of_the_training_and_an_eval_loader_are_separate_cpu_series() -> None:
    """The collector on hand-made events: a training loader's workers are never summed with an eval loader's."""
    import time as _time
    from types import SimpleNamespace

    from pitstop.events import DataLoaderInfo, Proc, Sample, Step
    from pitstop.profiling.prometheus import Exporter

    hello = Hello(schema=1, pitstop_version="0.1.0", session="job-9", pid=1, ppid=0, host="node7", argv=[],
                  cwd="/", started=0.0, python="3.12", script="train.py")
    exporter = Exporter(SimpleNamespace(hello=hello, dropped=0, taps=[]))
    now = _time.time()
    exporter.tap([DataLoaderInfo(t=now - 2, id=i, num_workers=2, batch_size=8, pin_memory=False,
                                 persistent_workers=False, prefetch_factor=2) for i in (1, 2)])
    exporter.tap([Step(t=now - 1 + i * 0.01, step=i, wall=0.01, data_wait=0.0, samples=8, loader=1)
                  for i in range(10)])
    exporter.tap([Sample(t=now, procs=[Proc(pid=1, role="main", cpu=93.0, rss=1),
                                       Proc(pid=2, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=3, role="worker", cpu=80.0, rss=1, loader=1),
                                       Proc(pid=4, role="worker", cpu=10.0, rss=1, loader=2)])])
    m = {f.name: f for f in exporter.collect()}
    cpu = {(s.labels["role"], s.labels["loader"], s.labels["loader_role"]): s.value
           for s in m["pitstop_cpu_utilization_ratio"].samples}
    assert cpu == {("main", "", ""): pytest.approx(0.93), ("workers", "1", "train"): pytest.approx(1.6),
                   ("workers", "2", "eval"): pytest.approx(0.1)}
