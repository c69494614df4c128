"""Provides the fixtures every kind of test shares."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def rundir(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A socket directory of the test's own (short: socket paths hold 107 bytes at most), removed after it."""
    path = Path(f"/tmp/pst-test-{os.getpid()}")
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(path))
    yield path
    shutil.rmtree(path, ignore_errors=True)
