"""`pitstop tune -- torchrun ...`: every trial runs the whole job through the same launcher."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from .conftest import SCRIPTS, pitstop

pytestmark = pytest.mark.xdist_group("tune")  # one tuner at a time under pytest-xdist (see test_tune.py)


def test_tune_a_two_rank_job(tmp_path: Path, env: dict[str, str]) -> None:
    # Two trials, the baseline and one worker count: each is a launcher and two ranks (~15 s of CPU),
    # and what is asserted is how the launcher is run and recorded, not which configuration wins.
    result = pitstop(
        ["tune", "--steps", "20", "--warmup", "3", "--min-time", "0.8", "--budget", "2", "--knobs", "workers",
         "--", sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2",
         str(SCRIPTS / "ddp_gloo.py"), "100000"],
        env, cwd=tmp_path, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = result.stdout + result.stderr
    assert "2 local rank(s)" in report  # the worker cap is per local rank
    assert "samples/s" in report
    if (tmp_path / "pitstop.toml").exists():  # written only when a configuration beat the job's own
        assert "torch.distributed.run" in (tmp_path / "pitstop.toml").read_text()  # provenance keeps the launcher
    else:
        assert "Nothing beat the script's own settings" in report
