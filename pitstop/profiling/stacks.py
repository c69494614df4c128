"""Provides sampling of a training job's data-loading Python stacks with py-spy, from outside the process.

When the loader is the bottleneck the next question is which line of the
dataset's `__getitem__` is slow. py-spy reads another process's
Python stacks through ptrace; with `--nonblocking` it never pauses the target
(a sample costs the target nothing but a shared CPU core), so the DataLoader
workers, or the main process when `num_workers=0`, keep their pace while
they are sampled for a few seconds. py-spy is an optional dependency
(`pip install "pitstop[stacks]"`): without it, or without ptrace permission,
the caller gets a `StacksError` whose one line says what to do.

The result is aggregated here, in the viewer's process: the lines of the
user's own code that the samples were in (the deepest frame outside the
standard library, site-packages and torch's data plumbing), and the
functions the samples ended in (self time), each with its share of samples.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from pitstop.errors import PitstopError

DEFAULT_SECONDS = 5.0
# 100 Hz: py-spy's own default; 5 s give ~500 samples per process, enough for a
# line at 2% of the time to show with ~10 samples.
DEFAULT_RATE = 100
# Rows a person reads; the rest is summed in the shares.
TOP = 15
# Files that are nobody's dataset code: the interpreter's own library, installed packages.
_LIBRARY_DIRS = tuple(sorted({p for key in ("stdlib", "platstdlib", "purelib", "platlib")
                              if (p := sysconfig.get_paths().get(key))}, key=len, reverse=True))
_STDLIB = re.compile(r"/lib(64)?/python3\.\d+/")
# Processes that are a DataLoader's neighbours, not its workers.
_NOT_WORKERS = ("resource_tracker", "forkserver", "semaphore_tracker", "compile_worker")
# A sample is data loading when its stack passes through torch's DataLoader (the
# main process's `__next__` with num_workers=0, a worker's `_worker_loop`): in the
# main process the rest is the model and pitstop's own threads.
DATA_FRAMES = ("torch/utils/data/",)
LOADER_INTERNALS = "(torch's DataLoader itself: collate, queues, shared memory)"


class StacksError(PitstopError):
    """Stacks could not be sampled: py-spy missing, not permitted, or the process is gone."""


@dataclass(frozen=True)
class Row:
    """A line or function, the samples it was seen in, and that count's share of all samples."""

    where: str
    samples: int
    share: float


@dataclass(frozen=True)
class StackProfile:
    """What a few seconds of sampling saw in the sampled processes."""

    pids: tuple[int, ...]
    role: str  # "DataLoader workers" or "main process (num_workers=0)"
    seconds: float
    samples: int
    lines: tuple[Row, ...]  # deepest frame in the user's code, inclusive
    functions: tuple[Row, ...]  # the frame each sample ended in (self time)
    notes: tuple[str, ...] = field(default_factory=tuple)


def py_spy() -> str:
    """The py-spy executable next to this Python, or on PATH."""
    here = Path(sys.executable).with_name("py-spy")
    found = str(here) if here.exists() else shutil.which("py-spy")
    if not found:
        raise StacksError('py-spy is not installed: pip install "pitstop[stacks]" (or pip install py-spy)')
    return found


def loader_pids(pid: int, workers: Sequence[int] = ()) -> tuple[tuple[int, ...], str]:
    """The processes that load data for training process `pid`: its DataLoader workers, else itself.

    `workers` are the worker pids the agent reported (the viewer knows them);
    without them, the Python children of `pid` that are not multiprocessing's
    helpers are taken (fork-started workers share the parent's command line).
    """
    import psutil

    if workers:
        alive = tuple(w for w in workers if psutil.pid_exists(w))
        if alive:
            return alive, "DataLoader workers"
    try:
        proc = psutil.Process(pid)
        children = proc.children(recursive=False)
        own = " ".join(proc.cmdline())
    except psutil.NoSuchProcess as err:
        raise StacksError(f"no process {pid}") from err
    found = []
    for child in children:
        try:
            name, cmdline = child.name(), " ".join(child.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        # torch >= 2.x names its workers "pt_data_worker"; fork-started ones share the parent's command
        # line, spawn-started ones run python's spawn_main.
        python = name.startswith("pt_data_worker") or "python" in name.lower() or cmdline == own
        if python and not any(word in cmdline for word in _NOT_WORKERS):
            found.append(child.pid)
    if found:
        return tuple(found), "DataLoader workers"
    return (pid,), "main process (num_workers=0)"


def sample(pids: Sequence[int], seconds: float = DEFAULT_SECONDS, rate: int = DEFAULT_RATE,
           role: str = "", executable: str | None = None) -> StackProfile:
    """Sample `pids` for `seconds` at `rate` Hz, all at once, without pausing them."""
    exe = executable or py_spy()
    outputs: dict[int, tuple[int, str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="pitstop-stacks-") as tmp:
        def one(p: int) -> None:
            out = os.path.join(tmp, f"{p}.txt")
            cmd = [exe, "record", "--pid", str(p), "--duration", str(max(1, round(seconds))),
                   "--rate", str(rate), "--nonblocking", "--full-filenames", "--format", "raw", "--output", out]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 30,
                                      stdin=subprocess.DEVNULL)
                text = Path(out).read_text() if Path(out).exists() else ""
                outputs[p] = (done.returncode, text, done.stderr)
            except subprocess.TimeoutExpired:
                outputs[p] = (-1, "", f"py-spy did not finish within {seconds + 30:.0f} s")

        threads = [threading.Thread(target=one, args=(p,), name=f"pitstop-stacks-{p}") for p in pids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    texts, notes = [], []
    for p in pids:
        code, text, err = outputs[p]
        if text.strip():
            texts.append(text)
        else:
            notes.append(f"pid {p}: {_why(err, code)}")
    if not texts:
        raise StacksError(notes[0] if len(notes) == 1 else "; ".join(notes) or "py-spy recorded no samples")
    return aggregate(texts, tuple(pids), role, seconds, tuple(notes))


def _why(stderr: str, code: int) -> str:
    """py-spy's failure in one line, with the fix where it is a known one."""
    low = stderr.lower()
    if "permission" in low or "operation not permitted" in low or "ptrace" in low:
        return ("py-spy may not read this process (ptrace): run as the same user with "
                "kernel.yama.ptrace_scope=0, or with sudo / CAP_SYS_PTRACE")
    if "no such process" in low or "failed to find process" in low:
        return "the process is gone"
    last = next((line.strip() for line in reversed(stderr.splitlines()) if line.strip()), "")
    return f"py-spy exited {code}" + (f": {last}" if last else " with no samples")


def _frames(stack: str) -> list[tuple[str, str, int | None]]:
    """A raw (collapsed) py-spy stack "f (file.py:12);g (other.py:3)" as (function, file, line), outermost first."""
    out = []
    for part in stack.split(";"):
        name, _, where = part.rpartition(" (")
        if not name:
            out.append((part, "", None))
            continue
        path, _, line = where.rstrip(")").rpartition(":")
        out.append((name, path, int(line) if line.isdigit() else None))
    return out


def _loader_at(frames: Sequence[tuple[str, str, int | None]]) -> int | None:
    """The index of the outermost frame inside torch's DataLoader, or None."""
    return next((i for i, (_, path, _) in enumerate(frames) if any(m in path for m in DATA_FRAMES)), None)


def is_library(path: str) -> bool:
    """A frame in the standard library or an installed package (torch's DataLoader plumbing included)."""
    if not path or path.startswith("<"):
        return True
    if any(path.startswith(d) for d in _LIBRARY_DIRS) or "site-packages" in path or "dist-packages" in path:
        return True
    # The training process's interpreter may not be this one (pitstop from pipx, a conda env):
    # its standard library is wherever ".../lib/python3.X/" holds it.
    return _STDLIB.search(path) is not None


def aggregate(texts: Sequence[str], pids: tuple[int, ...], role: str, seconds: float,
              notes: tuple[str, ...] = ()) -> StackProfile:
    """py-spy's raw output (one "stack count" per line) as the lines of user code and the leaf functions.

    Only the samples inside torch's DataLoader count, unless there are none (a
    loader of another kind): then every sample counts, and a note says so.
    """
    parsed: list[tuple[list[tuple[str, str, int | None]], int]] = []
    for text in texts:
        for row in text.splitlines():
            stack, _, count = row.rstrip().rpartition(" ")
            if stack and count.isdigit():
                parsed.append((_frames(stack), int(count)))
    if not parsed:
        raise StacksError("py-spy recorded no samples")
    data = [(f, n) for f, n in parsed if _loader_at(f) is not None]
    everything = sum(n for _, n in parsed)
    if data:
        kept = sum(n for _, n in data)
        if kept < everything:
            notes = (*notes, f"{everything - kept} of {everything} samples were outside the DataLoader "
                             "(the model, other threads): left out")
    else:
        data = parsed
        notes = (*notes, "no sample was inside torch's DataLoader: every stack is shown")
    lines: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = 0
    for frames, n in data:
        total += n
        name, path, _ = frames[-1]
        leaves[f"{name} ({_short(path)})"] += n
        # Below the DataLoader's frames: a fork-started worker's stack still holds the
        # parent's training loop above them, which is not where the sample's time went.
        at = _loader_at(frames)
        below = frames[at + 1:] if at is not None else frames
        mine = next((f for f in reversed(below) if not is_library(f[1])), None)
        if mine is not None:
            lines[f"{_short(mine[1])}:{mine[2]} in {mine[0]}"] += n
        elif at is not None:
            lines[LOADER_INTERNALS] += n
        else:
            lines["(library code only: no frame of the script's own)"] += n

    def rows(c: Counter[str]) -> tuple[Row, ...]:
        return tuple(Row(k, v, v / total) for k, v in c.most_common(TOP))

    return StackProfile(pids=pids, role=role, seconds=seconds, samples=total, lines=rows(lines),
                        functions=rows(leaves), notes=notes)


def _short(path: str) -> str:
    """A path as a person reads it: relative to the working directory, or the part after site-packages."""
    if not path:
        return "?"
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return path
    return rel if not rel.startswith("../..") else path


def format_profile(p: StackProfile) -> list[str]:
    """The profile as text lines, for `pitstop profile --data` and the TUI."""
    who = ", ".join(str(x) for x in p.pids)
    out = [f"{p.samples} samples over {p.seconds:.0f} s of the {p.role} (pid {who})", "",
           "where the dataset's code spent its time (line of the script's own code, % of samples):"]
    out += [f"  {r.share:6.1%}  {r.where}" for r in p.lines]
    out += ["", "functions the samples ended in (self time):"]
    out += [f"  {r.share:6.1%}  {r.where}" for r in p.functions]
    out += [f"note: {n}" for n in p.notes]
    return out
