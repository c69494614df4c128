"""Issue 14 §5 on a real script: every step's forward, backward and optimizer time, always on, from a record."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

from pitstop.events import Step

from .conftest import SCRIPTS, events_of, run_pitstop

STEPS = 40


def test_a_slow_forward_is_the_largest_phase_of_every_recorded_step(tmp_path: Path, env: dict[str, str]) -> None:
    record, out = tmp_path / "r.jsonl", tmp_path / "own.json"
    result = run_pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                          str(SCRIPTS / "anatomy_slow_forward.py"), str(STEPS), str(out)], env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    own = json.loads(out.read_text())["phases"][3:]  # the script's own stamps, warm-up out
    steps = [e for e in events_of(record) if isinstance(e, Step)][3:]
    assert len(steps) == STEPS - 3 and all(s.mark is None for s in steps)
    for s in steps:
        assert s.phase_clock == "host"
        assert None not in (s.forward_s, s.backward_s, s.optimizer_s, s.other_s), s
        phases = {"forward": s.forward_s, "backward": s.backward_s, "optimizer": s.optimizer_s, "other": s.other_s}
        assert max(phases, key=phases.__getitem__) == "forward", (s.step, phases)
        total = sum(phases.values())  # type: ignore[arg-type]
        assert abs(total / s.compute - 1) < 0.10, (s.step, total, s.compute)
        assert s.other_s >= 0.005 * 0.95, s  # the script's 5 ms between backward and the optimizer
    for i, name in enumerate(("forward", "backward", "optimizer")):
        mine = statistics.median(getattr(s, f"{name}_s") for s in steps)
        theirs = statistics.median(p[i] for p in own)
        if name == "optimizer":  # SGD on 9 parameters: microseconds, where the hook's own calls show
            assert mine < 0.002, (mine, theirs)
        else:
            assert abs(mine / theirs - 1) < 0.10, (name, mine, theirs)

    summary = subprocess.run([sys.executable, "-m", "pitstop.cli", "view", str(record), "--summary"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert summary.returncode == 0, summary.stderr
    line = next(x for x in summary.stdout.splitlines() if x.strip().startswith("compute"))
    assert line.split()[1] == "forward" and "host clock" in line, line
