"""The bootstrap keeps the user's own sitecustomize, and a second bootstrap is harmless."""

from __future__ import annotations

from pathlib import Path

from pitstop.events import Hello, Step

from .conftest import SCRIPTS, events_of, pitstop


def test_user_sitecustomize_still_runs(tmp_path: Path, env: dict[str, str]) -> None:
    mine = tmp_path / "usersite"
    mine.mkdir()
    (mine / "sitecustomize.py").write_text(
        "import os, sys\nprint(f'user sitecustomize ran in {os.getpid()}', file=sys.stderr)\n")
    env = dict(env, PYTHONPATH=str(mine))
    record = tmp_path / "r.jsonl"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                      str(SCRIPTS / "loop_gan.py"), "5"], env)
    assert result.returncode == 0, result.stderr
    events = events_of(record)
    assert isinstance(events[0], Hello) and sum(isinstance(e, Step) for e in events) == 5
    # once in the training process (the agent started there too), as without pitstop
    assert result.stderr.count(f"user sitecustomize ran in {events[0].pid}\n") == 1


def test_pitstop_inside_pitstop_records_once_per_run(tmp_path: Path, env: dict[str, str]) -> None:
    # The inner pitstop run starts its own session; the outer agent only watches
    # its own process (the inner CLI), which imports no torch and takes no step.
    outer, inner = tmp_path / "outer.jsonl", tmp_path / "inner.jsonl"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(outer), "-m", "pitstop.cli",
                      "run", "--headless", "--profile", "off", "--record", str(inner),
                      str(SCRIPTS / "loop_gan.py"), "5"], env)
    assert result.returncode == 0, result.stderr
    assert sum(isinstance(e, Step) for e in events_of(inner)) == 5
    assert sum(isinstance(e, Step) for e in events_of(outer)) == 0
