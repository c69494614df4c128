"""Provides where a training process waits: its threads' Python stacks and its processes' kernel state.

Taken when a stall is detected (`_stallwatch.py`) and by `pitstop stacks`.
The training thread's stack comes from inside the process, from the agent's
own thread (`sys._current_frames`): that works whenever the training thread
has let go of the GIL, which a blocked read, `time.sleep`, a lock, a queue
get and a gloo or NCCL wait all do. Another process (a DataLoader worker) is
read from outside with `py-spy dump` (the optional `pitstop[stacks]` extra),
which also reads a thread that holds the GIL in native code; without py-spy
the stack is missing and a note says so. Every process also gets its state
from /proc: `D` (uninterruptible sleep: a read from a dead network mount)
with the kernel function it sleeps in (`wchan`), `Z` (dead, not yet reaped)
with how it died.
"""

from __future__ import annotations

import json
import linecache
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from types import FrameType
from typing import Any

from pitstop.events import Frame, ThreadStack
from pitstop.profiling.stacks import StacksError, is_library, py_spy

# Frames kept per stack, innermost kept: a deep recursion reads as its last 64 calls.
MAX_FRAMES = 64
# py-spy dump attaches, reads and detaches: ~0.1-0.3 s per process here; 10 s bounds a process
# that ptrace cannot stop (itself in D state).
DUMP_TIMEOUT_S = 10.0
# pitstop's own package: its hooks sit between a DataLoader's `__next__` and the script.
_OWN = str(Path(__file__).resolve().parents[1])
# The agent's threads (named "pitstop-..."): never the training's.
_OWN_THREADS = "pitstop-"


def library(path: str) -> bool:
    """A frame that is not the script's own: the standard library, an installed package, pitstop."""
    return is_library(path) or path.startswith(_OWN)


def _frame(code_file: str, line: int | None, function: str, with_code: bool = True) -> Frame:
    text = linecache.getline(code_file, line).split("  #", 1)[0].strip() if with_code and line else ""
    return Frame(function=function, file=code_file, line=line, library=library(code_file), code=text)


def python_frames(frame: FrameType | None) -> list[Frame]:
    """A live frame and its callers as Frames, outermost first (at most MAX_FRAMES, the innermost)."""
    out: list[Frame] = []
    while frame is not None and len(out) < MAX_FRAMES:
        code = frame.f_code
        name = getattr(code, "co_qualname", code.co_name)  # "D.__getitem__" on 3.11+
        out.append(_frame(code.co_filename, frame.f_lineno, name))
        frame = frame.f_back
    out.reverse()
    return out


def proc_state(pid: int, tid: int | None = None) -> tuple[str | None, str | None, int | None]:
    """(state letter, wchan, exit status of a zombie) of a process (or one of its threads) from /proc."""
    base = f"/proc/{pid}" if tid is None else f"/proc/{pid}/task/{tid}"
    try:
        with open(f"{base}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None, None, None
    fields = text.rpartition(")")[2].split()
    state = fields[0] if fields else None
    status = None
    if state == "Z" and len(fields) > 49:  # field 52, exit_code (Linux 3.5+): the waitpid status
        try:
            status = int(fields[49])
        except ValueError:
            status = None
    wchan = None
    try:
        with open(f"{base}/wchan", "rb") as f:
            wchan = f.read().decode(errors="replace").strip() or None
    except OSError:
        wchan = None
    if wchan == "0":
        wchan = None
    return state, wchan, status


def death_text(status: int | None) -> str:
    """A zombie's waitpid status as words: "killed by SIGKILL", "exited with code 1"."""
    if status is None:
        return "ended"
    sig = status & 0x7F
    if sig:
        try:
            return f"killed by {signal.Signals(sig).name}"
        except ValueError:
            return f"killed by signal {sig}"
    return f"exited with code {status >> 8}"


def in_process(pid: int | None = None) -> list[ThreadStack]:
    """This process's training thread and pin-memory threads, read from another thread of it.

    The training thread is the main thread; a thread that runs torch's
    `_pin_memory_loop` is the pin-memory thread; the agent's own threads
    are left out, and so are other idle helper threads."""
    pid = os.getpid() if pid is None else pid
    frames = sys._current_frames()
    main = threading.main_thread().ident
    names = {t.ident: t.name for t in threading.enumerate()}
    natives = {t.ident: getattr(t, "native_id", None) for t in threading.enumerate()}
    out: list[ThreadStack] = []
    for ident, frame in frames.items():
        name = names.get(ident, "")
        if name.startswith(_OWN_THREADS) or ident == threading.get_ident():
            continue
        stack = python_frames(frame)
        if ident == main:
            role = "main"
        elif any(f.function == "_pin_memory_loop" for f in stack):
            role = "pin-memory"
        else:
            continue
        state, wchan, _ = proc_state(pid, natives.get(ident))
        out.append(ThreadStack(pid=pid, role=role, thread=name, how="in-process", frames=stack,
                               state=state, wchan=wchan))
    out.sort(key=lambda s: s.role != "main")
    return out


def dump(pid: int, role: str, executable: str | None = None, timeout: float = DUMP_TIMEOUT_S,
         native: bool = False) -> list[ThreadStack]:
    """Every thread of process `pid` with `py-spy dump`; one ThreadStack with a note when it cannot be read.

    `native`: with the C frames too (`--native`), which name the call a thread that holds the GIL is in
    ("clock_nanosleep (libc.so.6)" under a `ctypes.PyDLL` call); where py-spy cannot unwind them, the
    Python frames alone."""
    state, wchan, status = proc_state(pid)
    if state is None:
        return [ThreadStack(pid=pid, role=role, how="none", note="the process is gone")]
    if state == "Z":
        return [ThreadStack(pid=pid, role=role, how="none", state=state,
                            note=f"the process is dead ({death_text(status)}), not yet reaped")]
    try:
        exe = executable or py_spy()
    except StacksError as err:
        return [ThreadStack(pid=pid, role=role, how="none", state=state, wchan=wchan, note=str(err))]
    try:
        done = _run_dump(exe, pid, timeout, native)
        if native and done.returncode != 0:
            done = _run_dump(exe, pid, timeout, False)
    except subprocess.TimeoutExpired:
        return [ThreadStack(pid=pid, role=role, how="none", state=state, wchan=wchan,
                            note=f"py-spy dump did not finish within {timeout:.0f} s")]
    except OSError as err:
        return [ThreadStack(pid=pid, role=role, how="none", state=state, wchan=wchan, note=f"py-spy: {err}")]
    try:
        threads = json.loads(done.stdout) if done.returncode == 0 else None
    except ValueError:
        threads = None
    if not isinstance(threads, list):
        from pitstop.profiling.stacks import _why

        return [ThreadStack(pid=pid, role=role, how="none", state=state, wchan=wchan,
                            note=_why(done.stderr, done.returncode))]
    return parse_dump(threads, pid, role, state, wchan)


def _run_dump(exe: str, pid: int, timeout: float, native: bool) -> subprocess.CompletedProcess[str]:
    return subprocess.run([exe, "dump", "--pid", str(pid), "--json", *(["--native"] if native else [])],
                          capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL)


# A C frame's file: a shared library (libc.so.6, libtorch_cpu.so) or, with debug info, a C/C++ source.
_NATIVE_FILE = re.compile(r"(\.so(\.[\d.]+)?|\.dylib|\.(c|cc|cpp|cxx|h|hpp|pyx))$")


def is_native(frame: Frame) -> bool:
    """A C frame of a `--native` dump ("clock_nanosleep" in libc.so.6, "_ctypes_callproc" in callproc.c);
    a script run without a .py suffix stays the script's own."""
    return _NATIVE_FILE.search(frame.file) is not None


def parse_dump(threads: Iterable[Any], pid: int, role: str, state: str | None = None,
               wchan: str | None = None) -> list[ThreadStack]:
    """py-spy's `dump --json` (a list of threads, frames innermost first) as ThreadStacks: the process's
    main thread as `role`, a pin-memory thread as "pin-memory"; other threads are left out."""
    out: list[ThreadStack] = []
    for thread in threads:
        if not isinstance(thread, dict):
            continue
        # The source lines are read here (the same files: a DataLoader worker or a rank on this host).
        frames = [_dumped(f) for f in reversed(thread.get("frames") or []) if isinstance(f, dict)][-MAX_FRAMES:]
        tid = thread.get("os_thread_id")
        if tid == pid or (tid is None and not out):
            kind = role
        elif any(f.function == "_pin_memory_loop" for f in frames):
            kind = "pin-memory"
        else:
            continue
        t_state, t_wchan, _ = (state, wchan, None) if tid in (None, pid) else proc_state(pid, tid)
        out.append(ThreadStack(pid=pid, role=kind, thread=str(thread.get("thread_name") or ""), how="py-spy",
                               frames=frames, state=t_state, wchan=t_wchan, native=bool(thread.get("owns_gil"))))
    if not out:
        out.append(ThreadStack(pid=pid, role=role, how="none", state=state, wchan=wchan,
                               note="py-spy found no Python thread"))
    return out


def _dumped(f: dict[str, Any]) -> Frame:
    """One frame of py-spy's JSON; a C frame (`--native`) is library code, with no source line to read."""
    line = f.get("line") if isinstance(f.get("line"), int) and f.get("line") else None
    frame = _frame(str(f.get("filename", "")), line, str(f.get("name", "?")))
    if is_native(frame):
        return Frame(function=frame.function, file=str(f.get("short_filename") or frame.file), line=line,
                     library=True)
    return frame


def take(pid: int, workers: Iterable[int], spy: bool = True) -> tuple[list[ThreadStack], list[str]]:
    """Where this process (`pid`, read in-process) and its DataLoader workers (py-spy) wait, and notes."""
    stacks = in_process(pid)
    notes: list[str] = []
    for w in sorted(set(workers)):
        got = dump(w, "worker") if spy else [ThreadStack(pid=w, role="worker", how="none",
                                                          state=proc_state(w)[0], note="not read")]
        stacks.extend(got)
        notes.extend(f"worker {s.pid}: {s.note}" for s in got if s.note and "py-spy is not installed" in s.note)
    if any("py-spy is not installed" in n for n in notes):
        notes = ['py-spy is not installed: the DataLoader workers\' stacks were not read (pip install '
                 '"pitstop[stacks]")']
    return stacks, notes
