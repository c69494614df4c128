"""The bootstrap keeps the user's own sitecustomize, and a second bootstrap is harmless."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.events import Hello, Step

from .conftest import SCRIPTS, env_in, events_of, pitstop


@pytest.fixture(scope="module")
def nested_run(
        tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path, Path]]:
    """`pitstop run -m pitstop.cli run loop_gan.py 5` with a user's sitecustomize on PYTHONPATH: (result, outer
    record, inner record). One run serves both tests: each `pitstop run` of a torch script costs ~4 s of CPU."""
    root = tmp_path_factory.mktemp("bootstrap")
    env, runtime = env_in(root)
    mine = root / "usersite"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(
        "import os, sys\nprint(f'user sitecustomize ran in {os.getpid()}', file=sys.stderr)\n")
    env["PYTHONPATH"] = str(mine)
    outer, inner = root / "outer.jsonl", root / "inner.jsonl"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(outer), "-m", "pitstop.cli",
                      "run", "--headless", "--profile", "off", "--record", str(inner),
                      str(SCRIPTS / "loop_gan.py"), "5"], env)
    yield result, outer, inner
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.xdist_group("bootstrap")  # one pytest-xdist worker: the one run serves both tests
def test_user_sitecustomize_still_runs(nested_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    result, _, record = nested_run  # the training process is the inner pitstop run's
    assert result.returncode == 0, result.stderr
    events = events_of(record)
    assert isinstance(events[0], Hello) and sum(isinstance(e, Step) for e in events) == 5
    # once in the training process (the agent started there too), as without pitstop
    assert result.stderr.count(f"user sitecustomize ran in {events[0].pid}\n") == 1


@pytest.mark.xdist_group("bootstrap")
def test_pitstop_inside_pitstop_records_once_per_run(
        nested_run: tuple[subprocess.CompletedProcess[str], Path, Path]) -> None:
    # The inner pitstop run starts its own session; the outer agent only watches
    # its own process (the inner CLI), which imports no torch and takes no step.
    result, outer, inner = nested_run
    assert result.returncode == 0, result.stderr
    assert sum(isinstance(e, Step) for e in events_of(inner)) == 5
    assert sum(isinstance(e, Step) for e in events_of(outer)) == 0
