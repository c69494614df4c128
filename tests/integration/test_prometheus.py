"""`pitstop run --prometheus [HOST:]PORT`: each rank serves raw counters, on loopback unless asked, scraped and parsed."""

from __future__ import annotations

import json
import os
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


def _scrape(port: int, host: str = "127.0.0.1") -> dict[str, Any] | None:
    """{family name: family} from http://host:port/metrics, or None while nothing answers."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=2) as resp:
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


def _kill_group(proc: subprocess.Popen[str]) -> None:
    """The run and every process it started, whatever the test's outcome."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.communicate()


def _hello(record: Path) -> Hello | None:
    try:
        first = events_of(record)[:1]
    except Exception:
        return None
    return first[0] if first and isinstance(first[0], Hello) else None


# Trains until STOP_FILE exists, then writes which pitstop modules its process had
# loaded: the exporter ran there, and must have brought no analysis with it.
TRAIN_UNTIL_STOP = """\
import json, os, sys, time, torch
model = torch.nn.Linear(32, 1); opt = torch.optim.SGD(model.parameters(), lr=0.01)
while not os.path.exists(os.environ["STOP_FILE"]):
    loss = model(torch.randn(16, 32)).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); time.sleep(0.01)
loaded = sorted(m for m in sys.modules if m.startswith("pitstop"))
with open(os.environ["MODULES_FILE"], "w") as f:
    json.dump(loaded, f)
"""


def _listening(pid: int, port: int) -> list[str]:
    """The addresses process `pid` listens on at `port`."""
    import psutil

    return [c.laddr.ip for c in psutil.Process(pid).net_connections("tcp")
            if c.status == psutil.CONN_LISTEN and c.laddr.port == port]


def _other_addresses() -> list[str]:
    """This machine's IPv4 addresses that are not loopback."""
    import psutil

    return [a.address for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family == socket.AF_INET and not a.address.startswith("127.")]


@pytest.mark.slow
def test_a_run_serves_raw_counters_on_loopback_only_without_analysis(tmp_path: Path, env: dict[str, str]) -> None:
    port = _free_ports(1)
    script = tmp_path / "train.py"
    script.write_text(TRAIN_UNTIL_STOP)
    stop, modules = tmp_path / "stop", tmp_path / "modules.json"
    env.update(STOP_FILE=str(stop), MODULES_FILE=str(modules))
    env.pop("PITSTOP_PROMETHEUS_ADDR", None)  # the default bind is what is checked
    record = tmp_path / "live.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--prometheus", str(port),
         "--record", str(record), str(script)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        seen: dict[str, Any] = {}

        def steps_at_least(n: float) -> bool:
            seen["m"] = _scrape(port)
            return (_value(seen["m"], "pitstop_steps", "pitstop_steps_total") or 0) >= n

        wait_for(lambda: steps_at_least(5), timeout=90, what="pitstop_steps_total >= 5 on the endpoint")
        first = _value(seen["m"], "pitstop_steps", "pitstop_steps_total") or 0
        wait_for(lambda: steps_at_least(first + 5), timeout=60, what="pitstop_steps_total to rise")
        m = seen["m"]
        hello = _hello(record)
        assert hello is not None
        labels = m["pitstop_steps"].samples[0].labels
        assert labels["session"] == hello.session and labels["host"] == socket.gethostname()
        assert labels["script"].endswith("train.py")
        assert labels.get("rank", "") == ""  # not under a launcher: no rank label
        assert m["pitstop_steps"].type == "counter" and m["pitstop_step_seconds"].type == "histogram"
        # Training steps of 16 rows each (the first one's size unknown: the model is found at its backward)
        count = _value(m, "pitstop_step_seconds", "pitstop_step_seconds_count")
        unsized = _value(m, "pitstop_unsized_steps", "pitstop_unsized_steps_total")
        assert count is not None and count > 0 and unsized is not None
        assert _value(m, "pitstop_samples", "pitstop_samples_total") == 16 * (count - unsized)
        # The script sleeps 10 ms a step: the histogram's mean is at least that, in seconds (milliseconds
        # would read >= 10; the bound is loose, a busy machine stretches steps: issue 13)
        assert 0.01 <= (_value(m, "pitstop_step_seconds", "pitstop_step_seconds_sum") or 0.0) / count < 5.0
        assert (_value(m, "pitstop_host_rss_bytes") or 0.0) > 10 * 2**20
        assert _value(m, "pitstop_data_wait_seconds", "pitstop_data_wait_seconds_total") is not None
        # CPU only: unavailable figures are absent, never 0
        for absent in ("pitstop_memory_allocated_bytes", "pitstop_gpu_utilization_ratio"):
            assert absent not in m or not m[absent].samples  # a family without series is only its HELP line
        # Raw counters only: rates and advice are PromQL's and the viewers' business
        assert not {"pitstop_findings", "pitstop_steps_per_second", "pitstop_data_wait_ratio"} & set(m)
        # Loopback by default: the training process listens on 127.0.0.1 and nowhere else
        assert _listening(hello.pid, port) == ["127.0.0.1"]
        for addr in _other_addresses():
            with socket.socket() as s, pytest.raises(OSError):
                s.settimeout(5)
                s.connect((addr, port))
        stop.write_text("")
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
        assert (f"pitstop: Prometheus metrics on http://127.0.0.1:{port}/metrics (+LOCAL_RANK for each rank; "
                f"this machine only; --prometheus 0.0.0.0:{port} to listen wider)") in err.splitlines()
        loaded = json.loads(modules.read_text())
        assert "pitstop.profiling.prometheus" in loaded  # the exporter ran in this process ...
        assert [name for name in loaded if name.startswith("pitstop.analysis")] == []  # ... without analysis
    finally:
        stop.write_text("")
        _kill_group(proc)


@pytest.mark.slow
def test_each_rank_of_a_torchrun_job_serves_on_the_host_asked_at_base_port_plus_local_rank(
    tmp_path: Path, env: dict[str, str]
) -> None:
    # 127.0.0.2 is loopback on Linux too, yet not the default: the HOST given reaches every rank
    host = "127.0.0.2"
    port = _free_ports(2)
    stop = tmp_path / "stop"
    env["STOP_FILE"] = str(stop)
    records = tmp_path / "job"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--prometheus", f"{host}:{port}",
         "--record", str(records), "--", sys.executable, "-m", "torch.distributed.run", "--standalone",
         "--nproc_per_node", "2", str(SCRIPTS / "ddp_until_stop.py"), "3000"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    try:
        got: dict[int, dict[str, Any]] = {}

        def both_counting() -> bool:
            for r in (0, 1):
                m = _scrape(port + r, host)
                if m is not None and (_value(m, "pitstop_steps", "pitstop_steps_total") or 0) >= 5:
                    got[r] = m
            return len(got) == 2

        wait_for(both_counting, timeout=120, what="both ranks' endpoints counting steps")
        sessions = set()
        for r in (0, 1):
            labels = got[r]["pitstop_steps"].samples[0].labels
            assert (labels["rank"], labels["local_rank"]) == (str(r), str(r))
            assert labels["script"].endswith("ddp_until_stop.py")
            sessions.add(labels["session"])
            info = got[r]["pitstop_run_info"].samples[0].labels
            assert info["world_size"] == "2" and info["device"] == "cpu"
        hellos = {h.rank: h for f in records.glob("rank*.jsonl.gz") if (h := _hello(f)) is not None}
        assert sessions == {hellos[0].session} and len(sessions) == 1  # one session label for every rank
        assert [_listening(hellos[r].pid, port + r) for r in (0, 1)] == [[host], [host]]
        stop.write_text("")
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err[-3000:]
        assert out.count("done after") == 2
        assert (f"pitstop: Prometheus metrics on http://{host}:{port}/metrics (+LOCAL_RANK for each rank; "
                "unauthenticated: anyone who can reach this address can read it)") in err.splitlines()
    finally:
        stop.write_text("")
        _kill_group(proc)
    assert _scrape(port, host) is None and _scrape(port + 1, host) is None


def test_a_busy_port_is_said_on_stderr_while_training_runs(tmp_path: Path, env: dict[str, str]) -> None:
    """Issue 10: a --prometheus port another process holds was silent, exit 0."""
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
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
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
            stop.write_text("")
            _, rest = proc.communicate(timeout=60)
        finally:
            stop.write_text("")
            deadline.cancel()
            _kill_group(proc)
    warning = next((line for line in lines if "(prometheus)" in line), None)
    assert warning == (f"pitstop: warning (prometheus): metrics endpoint off: cannot serve metrics on "
                       f"127.0.0.1:{port}: Address already in use"), "\n".join(lines) + rest
    assert not any(line.startswith("pitstop summary") for line in lines)  # said before the end, not only in it
    assert "notes       warning (prometheus): metrics endpoint off" in rest  # and kept in the summary
    assert proc.returncode == 0
