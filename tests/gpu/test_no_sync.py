"""pitstop adds no host-device synchronisation per step (issue 15, DESIGN rule 1): the script's steps run
under torch.cuda.set_sync_debug_mode("error"), which raises at any sync, plainly and under the agent."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.events import Loss, Note, Step
from tests.gpu._kit import CONV, GPU, keep, write
from tests.integration.conftest import events_of, run_pitstop

pytestmark = GPU

STEPS, WARMUP = 80, 10
# No GradScaler (its step reads the inf check with .item()) and no logging .item():
# from step WARMUP on, the script's own loop never syncs.
ARGS = ["--steps", str(STEPS), "--warmup", str(WARMUP), "--batch", "32", "--workers", "2", "--pin-memory",
        "--no-scaler", "--item-every", "0", "--sync-debug"]


def test_the_agent_adds_no_sync_to_steps_that_have_none(env: dict[str, str], tmp_path: Path,
                                                       request: pytest.FixtureRequest) -> None:
    # Without pitstop first: a failure here is the script's sync, not pitstop's.
    plain = subprocess.run([sys.executable, str(CONV), *ARGS], capture_output=True, text=True, timeout=240,
                           cwd=tmp_path, stdin=subprocess.DEVNULL)
    write(request, tmp_path, "plain.log", plain.stdout + plain.stderr)
    assert plain.returncode == 0, plain.stderr[-3000:]
    record = tmp_path / "nosync.jsonl"
    # Profiler windows off: stopping a window syncs once per window (torch's profiler does), not per step.
    proc = run_pitstop(["run", "--headless", "--profile", "off", "--record", str(record), str(CONV), *ARGS],
                       env, tmp_path, timeout=240)
    keep(request, record)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = events_of(record)
    # An agent part that synced would have raised under "error" and been switched off with a note.
    notes = [e for e in events if isinstance(e, Note) and e.level in ("warn", "error")]
    assert not notes, [(n.source, n.message) for n in notes]
    assert [e.step for e in events if isinstance(e, Step)] == list(range(STEPS))
    # The losses were still read (one asynchronous copy per batch), finite, for the steps under "error".
    read = {s: v for e in events if isinstance(e, Loss) for s, v in zip(e.steps, e.values)}
    debug_steps = range(WARMUP, STEPS)
    assert all(read.get(s) is not None for s in debug_steps), sorted(set(debug_steps) - set(read))
