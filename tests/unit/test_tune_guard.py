"""Tests the file guard: a trial writes, replaces, removes and creates files in the user's tree; all is put back."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop.tuning.guard import MAX_ENTRIES, FileGuard, walk

# What a training script does to its directory in a few hundred steps, the ways Python code does it.
TRIAL = r"""
import os, shutil, subprocess, sys
open("out/ckpt.pt", "wb").write(b"trial weights")            # a checkpoint overwritten in place
with open("log.txt", "a") as f: f.write("step 1\n")           # a log appended to
open("cfg.tmp", "w").write("{}")                               # an atomic save: write, then replace
os.replace("cfg.tmp", "cfg.json")
os.remove("old.txt")                                           # a file removed
shutil.rmtree("runs")                                          # a run folder removed
os.makedirs("new_dir/sub")                                     # new folders and files
open("new_dir/sub/file", "w").write("x")
open("out/new.txt", "w").write("x")
os.rename("a.txt", "b.txt")                                    # a file renamed away
os.remove("re.txt"); open("re.txt", "w").write("made again")   # removed and made again
open("made.txt", "w").write("1"); open("made.txt", "a").write("2")  # made, then written again
open("data/big.bin", "rb").read()                              # a dataset only read
os.makedirs("__pycache__", exist_ok=True); open("__pycache__/x.pyc", "wb").write(b"c")
os.link("log.txt", "log.hard")                                 # a hard link made
if len(sys.argv) > 1:                                          # a shell command: no hook sees it
    subprocess.run(["sh", "-c", "echo shell > shell.txt"], check=True)
"""


def tree(root: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for path in sorted(root.rglob("*")):
        if path.is_file() and ".guard" not in path.parts and "__pycache__" not in path.parts:
            out[path.relative_to(root).as_posix()] = (path.read_bytes(), path.stat().st_mtime_ns)
    return out


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    for rel, data in {"out/ckpt.pt": b"the user's weights", "log.txt": b"old log\n", "cfg.json": b'{"lr": 1}',
                      "old.txt": b"old", "runs/1/events": b"ev", "a.txt": b"a", "re.txt": b"orig",
                      "data/big.bin": os.urandom(1 << 16), "shell.txt": b"mine"}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    (root / "empty").mkdir()
    return root


def run_trial(guard: FileGuard, root: Path, *args: str) -> None:
    env = dict(os.environ)
    env.update(guard.env(env.get("PYTHONPATH", "")))
    subprocess.run([sys.executable, "-c", TRIAL, *args], cwd=root, env=env, check=True, timeout=60)


def test_every_change_a_trial_makes_through_python_is_put_back(project: Path) -> None:
    before = tree(project)
    guard = FileGuard(project, project / ".guard", skip=(project / ".guard",))
    guard.prepare()
    run_trial(guard, project)
    assert (project / "out" / "ckpt.pt").read_bytes() == b"trial weights"  # the trial really wrote
    done = guard.restore()
    assert tree(project) == before  # bytes and modification times
    assert (project / "empty").is_dir() and (project / "runs" / "1").is_dir()
    assert not (project / "new_dir").exists() and not (project / "b.txt").exists()
    assert {"out/ckpt.pt", "log.txt", "cfg.json", "old.txt", "runs/1/events", "a.txt", "re.txt"} <= set(done.restored)
    assert {"new_dir", "out/new.txt", "b.txt", "made.txt", "log.hard"} <= set(done.removed)
    assert not done.lost
    stored = {p.relative_to(project / ".guard" / "files").as_posix()
              for p in (project / ".guard" / "files").rglob("*") if p.is_file()}
    assert "data/big.bin" not in stored and "made.txt" not in stored  # read-only data is never copied
    # A second trial of the same tune: the originals are kept once, and put back again.
    guard.prepare()
    run_trial(guard, project)
    guard.restore()
    assert tree(project) == before
    guard.close()
    assert not (project / ".guard").exists()


def test_a_change_no_hook_sees_is_reported_not_hidden(project: Path) -> None:
    guard = FileGuard(project, project / ".guard", skip=(project / ".guard",))
    guard.prepare()
    run_trial(guard, project, "with-shell")
    done = guard.restore()
    assert done.lost == ("shell.txt",)
    assert (project / "out" / "ckpt.pt").read_bytes() == b"the user's weights"


def test_a_store_left_by_a_killed_tune_is_put_back_by_the_next(project: Path) -> None:
    before = tree(project)
    guard = FileGuard(project, project / ".guard", skip=(project / ".guard",))
    guard.prepare()
    run_trial(guard, project)  # ... and the tuner is killed before it restores
    later = FileGuard(project, project / ".guard", skip=(project / ".guard",))
    done = later.recover()
    assert done is not None and "out/ckpt.pt" in done.restored
    assert tree(project) == before
    assert not (project / ".guard").exists()
    assert FileGuard(project, project / ".guard").recover() is None


def test_the_walk_skips_caches_and_environments_and_stops_at_its_limit(tmp_path: Path) -> None:
    for rel in (".git/HEAD", "__pycache__/m.pyc", "venv/pyvenv.cfg", "venv/lib/x.py", "src/m.py"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text("x")
    inv = walk(tmp_path)
    assert set(inv.files) == {"src/m.py"} and not inv.truncated
    small = walk(tmp_path, limit=2)
    assert small.truncated and MAX_ENTRIES > 1000


def test_the_tuners_own_output_redirected_into_the_tree_is_not_taken_for_a_trials_write(tmp_path: Path) -> None:
    # `pitstop tune ... > tune.log` in the project folder: the log grows during every trial.
    code = (
        "import sys; from pathlib import Path; from pitstop.tuning.guard import FileGuard\n"
        "root = Path(sys.argv[1]); g = FileGuard(root, root / '.guard'); g.prepare()\n"
        "print('a progress line' * 100, flush=True)\n"
        "done = g.restore(); g.close(); sys.stderr.write(repr(done.lost))\n"
    )
    with open(tmp_path / "tune.log", "wb") as log:
        proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], stdout=log, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == "()"


def test_an_unfinished_restore_keeps_the_originals_for_the_next_tune(project: Path) -> None:
    before = tree(project)
    guard = FileGuard(project, project / ".guard", skip=(project / ".guard",))
    guard.prepare()
    run_trial(guard, project)
    guard.close()  # interrupted before restore(): the store must survive
    assert (project / ".guard" / "files" / "out" / "ckpt.pt").exists()
    FileGuard(project, project / ".guard").recover()
    assert tree(project) == before
