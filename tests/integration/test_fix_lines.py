"""Lines printed for the user to run, run as printed; findings are true for the model in front of them.

A finding printed `pitstop tune --knobs amp adder.py` for a script started as
`PYTHONPATH=. pitstop run projects/adder/adder.py --trainer.max_iters=50`: run as
printed, "no such script". Here a real `pitstop run --headless` of a script with
required arguments, in a subdirectory, importing a package found through
PYTHONPATH, prints its tune line, and the test executes that line through
`bash -c` with the tuner swapped for `pitstop run --headless` (the same target
words, a run of seconds instead of a tune of minutes), from another directory,
in an environment without PYTHONPATH or the run's framework variables: the
line itself must carry them (run_clm's line dropped `HF_HUB_OFFLINE=1`, and
every line said "no such script" in another directory).
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from pitstop.events import Model
from pitstop.profiling.launch import COMMAND_ENV_PREFIXES

from .conftest import SCRIPTS, events_of, pitstop, run_group

TUNE = "pitstop tune --knobs num_workers "
# Where the workers would take the cores torch's threads compute on, the line tunes both.
TUNE_BOTH = re.compile(r"pitstop tune --knobs num_workers(,threads)? ")


def _project(tmp_path: Path) -> Path:
    """A fresh copy of the typed/ project: sub/train.py imports helpers/ through PYTHONPATH=."""
    proj = tmp_path / "my proj"  # a space: the cd must be quoted
    shutil.copytree(SCRIPTS / "typed", proj)
    return proj


# What the run was started with beside PYTHONPATH: a line that drops them downloads where the run did not.
FRAMEWORK_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def _env(env: dict[str, str], pythonpath: str | None, **extra: str) -> dict[str, str]:
    # None of the suite's own (OMP_WAIT_POLICY): the lines' variables are the ones this test sets
    out = {k: v for k, v in env.items() if not k.startswith(COMMAND_ENV_PREFIXES) and k != "PYTHONPATH"}
    out["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"  # `pitstop` as a user has it
    if pythonpath is not None:
        out["PYTHONPATH"] = pythonpath
    out.update(extra)
    return out


def _tune_line(result: subprocess.CompletedProcess[str]) -> str:
    """The data-wait finding's tune line (on a busy machine a cpu-contended one, `--knobs threads`, comes first)."""
    text = result.stdout + result.stderr
    lines = [line.strip().removeprefix("tune: ") for line in text.splitlines()
             if line.strip().startswith("tune: ") and TUNE_BOTH.search(line)]
    assert lines, f"no {TUNE!r} line in:\n{text[-3000:]}"
    return TUNE_BOTH.sub(TUNE, lines[0], count=1)


def _run_as_printed(line: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """The printed line through bash, the tuner swapped for a headless run of the same target."""
    assert TUNE in line, line
    # TYPED_SAY_ONLY: the script prints what it got (arguments, variables; its imports ran) and ends there
    return run_group(["bash", "-c", line.replace(TUNE, "pitstop run --headless ", 1)],
                     {**env, "TYPED_SAY_ONLY": "1"}, cwd, timeout=180)


def test_a_tune_line_runs_as_printed_from_any_directory_with_its_arguments_and_environment(
        tmp_path: Path, env: dict[str, str]) -> None:
    proj = _project(tmp_path)
    record = tmp_path / "r.jsonl"
    result = pitstop(["run", "--headless", "--record", str(record), "sub/train.py", "--steps", "20", "--tag", "two words"],
                     _env(env, ".", **FRAMEWORK_ENV), cwd=proj)
    assert result.returncode == 0, result.stderr[-3000:]
    line = _tune_line(result)
    assert line == (f"cd {shlex.quote(str(proj))} && HF_DATASETS_OFFLINE=1 HF_HUB_OFFLINE=1 PYTHONPATH=. "
                    f"{TUNE}sub/train.py --steps 20 --tag 'two words'")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for where in (proj, elsewhere):  # where it was printed, and a shell anywhere else
        again = _run_as_printed(line, _env(env, None), where)
        assert again.returncode == 0, again.stderr[-3000:]
        assert "train.py steps=20 tag=two words offline=1" in again.stdout

    # `pitstop view` of the record from another directory prints the same line.
    viewed = pitstop(["view", str(record), "--summary"], _env(env, None), cwd=elsewhere)
    assert _tune_line(viewed) == line


def test_under_a_wrapper_the_tune_line_names_the_wrapper_and_what_it_wraps(tmp_path: Path, env: dict[str, str]) -> None:
    proj = _project(tmp_path)
    result = pitstop(["run", "--headless", "sub/steptime.py", "sub/train.py", "--steps", "20", "--tag", "w"],
                     _env(env, "."), cwd=proj)
    assert result.returncode == 0, result.stderr[-3000:]
    line = _tune_line(result)
    assert line == f"cd {shlex.quote(str(proj))} && PYTHONPATH=. {TUNE}sub/steptime.py sub/train.py --steps 20 --tag w"
    again = _run_as_printed(line, _env(env, None), tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "steptime.py wraps sub/train.py" in again.stdout and "train.py steps=20 tag=w" in again.stdout


def test_a_float64_model_is_told_so_and_never_that_it_trains_in_float32(tmp_path: Path, env: dict[str, str]) -> None:
    proj = _project(tmp_path)
    record = tmp_path / "r.jsonl"
    result = pitstop(["run", "--headless", "--record", str(record), "sub/train.py", "--steps", "20", "--tag", "d",
                      "--dtype", "float64"], _env(env, "."), cwd=proj)
    assert result.returncode == 0, result.stderr[-3000:]
    findings = result.stderr[result.stderr.index("findings ("):]
    assert "Training in float64 on a CPU (float64)" in findings
    assert "float32 on" not in findings and "bfloat16" not in findings
    assert [e.dtype for e in events_of(record) if isinstance(e, Model)][0] == "float64"
