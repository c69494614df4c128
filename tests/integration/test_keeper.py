"""The index of a run's record is kept while it records: a viewer opens a long run from it at once."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import psutil

from pitstop.profiling._recordfile import file_offset
from pitstop.recorded import _sidecar

from .conftest import SCRIPTS, kill_group, wait_for


def _covered(record: Path) -> int:
    """Bytes of the record its saved index covers (0: none yet)."""
    try:
        stop = int(json.loads(gzip.decompress(_sidecar.index_path(record).read_bytes()))["stop"])
    except (OSError, ValueError, KeyError, EOFError):
        return 0
    return file_offset(stop, compressed=False)  # a plain record (`--record NAME.jsonl`): its byte offset


def _keepers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "pitstop.keeper" in " ".join(p.info["cmdline"] or [])]


def test_the_index_is_kept_while_the_run_records_and_the_keeper_ends_with_the_training(
        tmp_path: Path, env: dict[str, str]) -> None:
    env = {**env, "PITSTOP_INDEX_EVERY": "0.3"}
    record = tmp_path / "run.jsonl"
    stop = tmp_path / "stop"
    proc = subprocess.Popen([sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off",
                             "--record", str(record), str(SCRIPTS / "train_until_stopped.py"), str(stop)],
                            env=env, cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        # While it trains, with no viewer reading the record, its index appears and grows.
        wait_for(lambda: _covered(record) > 0 or proc.poll() is not None, timeout=120, what="a kept index")
        first = _covered(record)
        wait_for(lambda: _covered(record) > first or proc.poll() is not None, timeout=60, what="the index growing")
        assert proc.poll() is None and _covered(record) > first
        assert _covered(record) <= record.stat().st_size
        stop.touch()
        out, err = proc.communicate(timeout=120)
    finally:
        stop.touch()
        kill_group(proc)
    assert proc.returncode == 0, err[-3000:]
    assert _covered(record) == record.stat().st_size  # the end summary indexed the last lines
    wait_for(lambda: not [k for k in _keepers() if str(record) in " ".join(k.cmdline())], timeout=30,
             what="the keeper to end")


def test_a_keeper_ends_when_its_training_is_killed(tmp_path: Path) -> None:
    victim = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    keeper = subprocess.Popen([sys.executable, "-m", "pitstop.keeper", "--pid", str(victim.pid), "--every", "0.2",
                               str(tmp_path / "none.jsonl")], stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        os.kill(victim.pid, signal.SIGKILL)
        victim.wait(timeout=10)
        assert keeper.wait(timeout=30) == 0  # a last pass over no record, and out
    finally:
        for p in (victim, keeper):
            if p.poll() is None:
                p.kill()
                p.wait()
