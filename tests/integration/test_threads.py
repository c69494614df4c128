"""Tests CPU threads end to end: the threads knob applied by --config, and cpu-contended on a loop beside real CPU hogs."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from pitstop.analysis import RunState, advise
from pitstop.events import Applied, Runtime

from .conftest import SCRIPTS, events_of, kill_group, pitstop, wait_for

_THREADS = """\
import os, torch
from torch.utils.data import DataLoader, TensorDataset

def said(worker_id):
    print("worker OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"), flush=True)

loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8,
                    num_workers=1, worker_init_fn=said)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("main threads", torch.get_num_threads(), "OMP_NUM_THREADS", os.environ.get("OMP_NUM_THREADS"), flush=True)
"""


def test_the_threads_knob_is_applied_by_config_and_recorded(tmp_path: Path, env: dict[str, str]) -> None:
    script = tmp_path / "train.py"
    script.write_text(_THREADS)
    config = tmp_path / "pitstop.toml"
    config.write_text("[compute]\nthreads = 1\n")
    record = tmp_path / "run.jsonl"
    env = {**env, "OMP_NUM_THREADS": "2"}  # the config wins over what the shell set
    result = pitstop(["run", "--headless", "--profile", "off", "--config", str(config), "--record", str(record),
                      str(script)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "main threads 1 OMP_NUM_THREADS 1" in result.stdout
    assert "worker OMP_NUM_THREADS 1" in result.stdout  # the DataLoader worker inherits it
    assert "threads=1" in result.stderr.splitlines()[0]  # said at start, as every applied knob
    events = events_of(record)
    applied = [e for e in events if isinstance(e, Applied)]
    assert applied and applied[0].applied.get("threads") == 1
    runtimes = [e for e in events if isinstance(e, Runtime)]
    assert runtimes[-1].torch_threads == 1


@contextmanager
def cpu_hogs(n: int) -> Iterator[None]:
    """`n` processes spinning on the CPU, killed on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdin=subprocess.DEVNULL,
                              start_new_session=True, text=True) for _ in range(n)]
    try:
        yield
    finally:
        for proc in procs:
            kill_group(proc)


@pytest.mark.slow
def test_cpu_contended_fires_on_a_loop_hogged_from_its_first_step(tmp_path: Path, env: dict[str, str]) -> None:
    # One hog per core (at most 4) beside a loop with torch's default threads (one per core) and
    # OpenMP's default wait policy, as a user's (the suite sets PASSIVE for its own speed). Hogs
    # there from the start can make every step slow alike (no swing to see): the run queue says
    # it, as the time torch's threads waited, ready to run, for a core a hog held.
    cores = min(4, len(os.sched_getaffinity(0)))
    env = {k: v for k, v in env.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["PITSTOP_SAMPLE_INTERVAL"] = "0.25"
    record = tmp_path / "hogged.jsonl"
    go = tmp_path / "go"
    # The hogs start once the script is set up, before its first step: started with it, they spun
    # through its imports and set-up too (40 s of CPU for the test, hogs included, over a 34 s run).
    proc = subprocess.Popen([sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off",
                             "--record", str(record), str(SCRIPTS / "finding_cpu_contended.py"), "20", str(go)],
                            env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for(lambda: (tmp_path / "go.ready").exists() or proc.poll() is not None, 120, "the script's set-up")
        with cpu_hogs(cores):
            go.touch()
            out, err = proc.communicate(timeout=240)
    finally:
        kill_group(proc)
    result = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    assert result.returncode == 0, result.stderr[-3000:]
    run = RunState()
    for event in events_of(record):
        run.add(event)
    found = {f.rule: f for f in advise(run).findings}
    assert "cpu-contended" in found, (list(found), result.stderr[-2000:])
    f = found["cpu-contended"]
    assert f"torch runs {cores} intra-op threads" in f.evidence[0]
    assert any("waited for a free core" in line for line in f.evidence), f.evidence
    assert "(cpu-contended)" in result.stderr
