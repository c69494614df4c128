"""Provides what a stalled run waits for: each process's wait from its stacks, the job's cause in words, the finding.

Pure functions over `Stall` events (pitstop/profiling/_stallwatch.py sends
them with the stacks). A process's wait is read from its training thread's
stack, innermost first: uninterruptible sleep in /proc (a read that does not
return), a collective (torch.distributed, DDP's backward or forward), its
DataLoader (the dataset's own code in a main-process fetch, or the queue of
its workers, with a dead or stuck worker named), a lock, else the script's own
line. Job-wide, the ranks that wait in a collective are said to wait for the
ones that do not; every rank in a collective is a dead or missing peer, or
mismatched collectives.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pitstop.analysis import format as fmt
from pitstop.analysis._context import Finding
from pitstop.analysis._jobstate import JobState
from pitstop.analysis._state import RunState
from pitstop.events import Frame, Stall, ThreadStack

COLLECTIVES = frozenset({
    "all_reduce", "all_gather", "all_gather_into_tensor", "reduce_scatter", "reduce_scatter_tensor", "broadcast",
    "barrier", "monitored_barrier", "all_to_all", "all_to_all_single", "reduce", "gather", "scatter", "send",
    "recv", "isend", "irecv", "all_gather_object", "broadcast_object_list", "gather_object", "scatter_object_list",
    "batch_isend_irecv",
})
_LOCKY = re.compile(r"\b(acquire\(|with\s+[\w.\[\]]*lock\b|\.wait\(|\.join\()", re.IGNORECASE)
_QUEUE_GETS = ("_get_data", "_try_get_data")


@dataclass(frozen=True)
class Wait:
    """Where one process waits, in words."""

    kind: str  # "collective" | "data-fetch" | "data-queue" | "disk" | "lock" | "code" | "unknown"
    text: str  # "is blocked in D.__getitem__ (hang.py:11: time.sleep(3600)) inside its DataLoader's main-process fetch"
    op: str = ""  # the collective ("all_reduce (DDP backward)"), for the job's sentence


def _short(path: str) -> str:
    path = path.split(" (", 1)[0]  # pitstop's patches name their code "_hooks.py (pitstop patch; ...)"
    for marker in ("site-packages/", "dist-packages/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path.rsplit("/", 1)[-1] if "/" in path else path


def _loc(frame: Frame) -> str:
    """"hang.py:11"; a C frame of a native dump has no line: "libc.so.6"."""
    return f"{_short(frame.file)}:{frame.line}" if frame.line is not None else _short(frame.file)


def where(frame: Frame) -> str:
    """"D.__getitem__ (hang.py:11: time.sleep(3600))"."""
    loc = f"{_short(frame.file)}:{frame.line}" if frame.line is not None else _short(frame.file)
    return f"{frame.function} ({loc}: {frame.code})" if frame.code else f"{frame.function} ({loc})"


def _user(frames: Sequence[Frame]) -> Frame | None:
    """The innermost frame of the script's own code."""
    return next((f for f in reversed(frames) if not f.library), None)


def _main(stacks: Sequence[ThreadStack]) -> ThreadStack | None:
    return next((s for s in stacks if s.role == "main"), None)


def _native_call(frames: Sequence[Frame]) -> Frame | None:
    """The innermost named C frame of a `--native` dump ("clock_nanosleep" in libc.so.6), not an address."""
    return next((f for f in reversed(frames) if not f.file.endswith((".py", ".pyw")) and not f.file.startswith("<")
                 and not f.function.startswith("0x")), None)


def _silent(main: ThreadStack, mine: Frame | None) -> Wait:
    """A process whose agent went silent, read from outside by the front (`Stall.by` "front")."""
    if main.state in ("T", "t"):
        return Wait("stopped", "is stopped (state T: SIGSTOP, or a debugger holds it): none of its threads run")
    if main.native or main.frames:
        call = _native_call(main.frames)
        inner = f", in {call.function} ({_short(call.file)})" if call is not None else ""
        frame = mine if mine is not None else next((f for f in reversed(main.frames) if f.file.endswith(".py")), None)
        at = f": {where(frame)}{inner}" if frame is not None else inner
        holds = "holds the GIL in native code" if main.native else "went silent (py-spy did not see which thread " \
                                                                   "holds the GIL)"
        return Wait("native", f"{holds}{at}; the agent's threads cannot run")
    state = f" (state {main.state})" if main.state else ""
    why = f": {main.note}" if main.note else ""
    return Wait("native", f"went silent while its process lives{state}: its training thread most likely holds the GIL "
                          f"in native code, so the agent's threads cannot run; its stacks were not read{why}")


def describe(stacks: Sequence[ThreadStack], distributed: bool = False, silent: bool = False) -> Wait:
    """Where a process waits, from its stacks (the training thread first; its workers for a queue wait).

    `silent`: the stacks were read from outside by the front because the process's agent went silent
    (`Stall.by` "front"): a thread held the GIL."""
    main = _main(stacks)
    if main is None:
        return Wait("unknown", "left no stack of its training thread")
    frames = main.frames
    mine = _user(frames)
    if silent or main.native:
        return _silent(main, mine)
    at = f" at {where(mine)}" if mine is not None else ""
    if main.state == "D":
        kernel = f" in the kernel's {main.wchan}" if main.wchan else ""
        return Wait("disk", f"is in uninterruptible sleep (D){kernel}{at}: a read or write that does not return "
                            "(a dead network mount, a failing disk)")
    for f in reversed(frames):
        name = f.function.rsplit(".", 1)[-1]
        if "torch/distributed/" in f.file and name in COLLECTIVES:
            return Wait("collective", f"waits in {name}{at}", op=name)
    if distributed:
        if any("torch/autograd/" in f.file and "backward" in f.function for f in frames):
            return Wait("collective", f"waits in all_reduce (DDP backward){at}", op="all_reduce (DDP backward)")
        if any("torch/nn/parallel/distributed.py" in f.file for f in frames):
            return Wait("collective", f"waits in DDP's forward (its buffers' broadcast){at}", op="DDP's forward")
    loader = next((i for i, f in enumerate(frames) if "torch/utils/data/dataloader.py" in f.file), None)
    if loader is not None:
        inner = frames[loader:]
        if any(f.function.rsplit(".", 1)[-1] in _QUEUE_GETS for f in inner):
            return Wait("data-queue", "waits for a batch from its DataLoader workers" + _workers(stacks))
        dataset = _user(inner)
        if dataset is not None:
            return Wait("data-fetch", f"is blocked in {where(dataset)} inside its DataLoader's main-process fetch")
        return Wait("data-queue", "waits in its DataLoader" + _workers(stacks))
    leaf = frames[-1] if frames else None
    if leaf is not None and leaf.file.endswith("threading.py") and mine is not None:
        return Wait("lock", f"waits in threading's {leaf.function}{at}: a lock, event or thread that is never "
                            "released")
    if mine is not None and mine is leaf and _LOCKY.search(mine.code or ""):
        return Wait("lock", f"waits on a lock{at}: never released (a deadlock in the script's own code?)")
    if mine is not None and main.state == "R":
        return Wait("code", f"is computing in {where(mine)} (running, not blocked: one step far longer than the "
                            "threshold, or a loop that does not end)")
    if mine is not None:
        return Wait("code", f"is in {where(mine)}")
    if leaf is not None:
        return Wait("code", f"is in {where(leaf)}")
    if main.note:
        return Wait("unknown", f"left no stack: {main.note}")
    return Wait("unknown", "left no stack of its training thread")


def _workers(stacks: Sequence[ThreadStack]) -> str:
    """"; worker 4711 is dead (killed by SIGKILL)" / "; worker 4711 is in D.__getitem__ (ds.py:9)"."""
    parts = []
    for s in stacks:
        if s.role != "worker":
            continue
        if s.state == "Z" or (s.note and "gone" in s.note):
            parts.append(f"worker {s.pid} is {s.note or 'dead'}".replace("is the process is", "is"))
        elif s.state == "D":
            parts.append(f"worker {s.pid} is in uninterruptible sleep (D{', ' + s.wchan if s.wchan else ''})")
        elif s.frames:
            mine = _user(s.frames)
            parts.append(f"worker {s.pid} is in {where(mine if mine is not None else s.frames[-1])}")
    return "; " + "; ".join(parts) if parts else ""


def span(seconds: float) -> str:
    """"45s", "1m20s", "2h05m": a stall's length."""
    s = int(round(max(0.0, seconds)))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def stalled_for(run: RunState) -> float | None:
    """Seconds the run's stall has lasted (to its latest event while it goes on); None: not stalled."""
    st = run.stall
    if st is None:
        return None
    if st.lasted_s is not None:
        return st.lasted_s
    began = st.t - st.since_s
    latest = max(run.last_t or st.t, st.t)
    if run.end is not None:
        latest = max(latest, run.end.t)
    return max(st.since_s, latest - began)


def stall_open(run: RunState) -> bool:
    """The run is stuck now (its last stall has neither ended nor closed with the process's end)."""
    return run.stall is not None and run.stall.phase in ("start", "update")


def _distributed(run: RunState) -> bool:
    h = run.hello
    return bool((h is not None and (h.world_size or 0) > 1) or (run.model is not None and run.model.ddp))


def run_wait(run: RunState) -> Wait | None:
    """The latest stacks of the run's stall, as a Wait; None without a stall."""
    st = run.stall_stacks
    return None if st is None else describe(st.stacks, _distributed(run), silent=st.by == "front")


# Where a process that has not stepped yet waits reads as stuck only on evidence that it is blocked: a read
# in uninterruptible sleep, a lock, a stopped process. Anything else (a model being built, a download, a
# compile) may still end: said as a wait.
_BLOCKED = frozenset({"disk", "lock", "stopped"})


def headline(run: RunState) -> str | None:
    """"stuck for 1m20s after step 19" (or "was stuck for 45s after step 19, then resumed"); before the first
    step "no first step after 5m00s" (or "no progress for 5m10s before its first step, then it moved");
    None: no stall."""
    st = run.stall
    lasted = stalled_for(run)
    if st is None or lasted is None:
        return None
    if st.first:
        if st.phase == "end":
            return f"no progress for {span(lasted)} before its first step, then it moved"
        return f"no first step after {span(lasted)}"
    if st.phase == "end":
        return f"was stuck for {span(lasted)} after step {st.step}, then resumed"
    return f"stuck for {span(lasted)} after step {st.step}"


_FIXES = {
    "data-fetch": "the dataset's read does not return: look at what it reads (a network mount, a remote store) "
                  "and give that read a timeout",
    "data-queue": "a DataLoader worker is dead or stuck: `dmesg` shows the OOM killer; DataLoader(timeout=60) "
                  "turns a stuck worker into an error",
    "collective": "a rank waits for another in a collective: set init_process_group(timeout=...) (and "
                  "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 on NCCL) so that a hang ends in an error",
    "disk": "the kernel waits on storage that does not answer: check the mount (`mount`, `dmesg`)",
    "lock": "a lock, event or join that never returns: the thread holding it is stuck or gone",
    "native": "a call into native code that keeps the GIL (a C extension, a ctypes.PyDLL call) does not return: "
              "release the GIL around it (Py_BEGIN_ALLOW_THREADS, ctypes.CDLL) or give it a timeout; "
              "`pitstop stacks PID --now` reads it again",
    "stopped": "`kill -CONT PID` resumes it (or the debugger that holds it lets go)",
    "code": "the script's own line above: `pitstop stacks PID --now` shows where it is now (py-spy)",
    "unknown": "`pitstop stacks PID --now` reads the stacks from outside (py-spy)",
}


def blocked(run: RunState) -> bool:
    """The run's stall reads as stuck: after its first step always; before it, only where its stacks show it
    blocked (`_BLOCKED`)."""
    st = run.stall
    if st is None or not st.first:
        return st is not None
    wait = run_wait(run)
    return wait is not None and wait.kind in _BLOCKED


def stall_word(runs: Sequence[RunState]) -> str:
    """"STUCK" where a run of `runs` is stuck now, else "WAITING" (only waits for a first step are open)."""
    return "STUCK" if any(stall_open(run) and blocked(run) for run in runs) else "WAITING"


def stall_title(run: RunState) -> str | None:
    """The headline with where the training thread waits, for a wait before the first step:
    "no first step after 5m00s; the training thread is in D.__init__ (ds.py:9: time.sleep(3600))"."""
    title = headline(run)
    st = run.stall
    if title is None or st is None or not st.first or st.phase == "end":
        return title  # (a wait that ended: where it waited is in the finding's evidence)
    wait = run_wait(run)
    return f"{title}; the training thread {wait.text}" if wait is not None else title


def stall_finding(run: RunState) -> Finding | None:
    """The [high] finding "stuck for 1m20s after step 19", with where the process waits; None: no stall.
    Before the first step: "no first step after 5m00s; the training thread is in ...", medium unless blocked."""
    title = stall_title(run)
    st = run.stall
    if title is None or st is None:
        return None
    wait = run_wait(run)
    if st.first:
        evidence = [f"no step, batch or backward for {span(stalled_for(run) or 0.0)} since pitstop's agent "
                    f"started (the threshold: {span(st.threshold_s)}; a first step that compiles or downloads "
                    "moves no counter either)"]
        if wait is not None:
            evidence.insert(0, f"the training thread {wait.text}")
        severity = "high" if st.phase != "end" and blocked(run) else "medium" if st.phase != "end" else "low"
        return Finding(rule="stall", title=title, severity=severity, evidence=evidence,
                       cause=wait.text if wait is not None else "",
                       fix=_FIXES.get(wait.kind, "") if wait is not None else "")
    evidence = [f"no step, batch or backward for {span(stalled_for(run) or 0.0)} after step {st.step} "
                f"(the threshold: {span(st.threshold_s)})"]
    if wait is not None:
        evidence.insert(0, f"the training thread {wait.text}")
    return Finding(rule="stall", title=title, severity="medium" if st.phase == "end" else "high",
                   evidence=evidence, cause=wait.text if wait is not None else "",
                   fix=_FIXES.get(wait.kind, "") if wait is not None else "")


def dead_worker_finding(run: RunState) -> Finding | None:
    """A DataLoader worker that died (the agent's note, from /proc), named: torch raises in the training
    thread at once, so there is no stall, but a run that ended in "DataLoader worker exited unexpectedly"."""
    notes = [n for n in run.notes if n.source == "dataloader" and "died" in n.message]
    if not notes:
        return None
    return Finding(rule="worker-died", title=notes[0].message, severity="high",
                   evidence=[n.message for n in notes], cause="a DataLoader worker process died",
                   fix=_FIXES["data-queue"])


def job_cause(ranks: Sequence[tuple[str, RunState]]) -> str | None:
    """The job's cause in words: "rank 1 is blocked in ...; rank 0 waits in all_reduce (DDP backward) for rank 1"."""
    stalled = [(label, run, run_wait(run)) for label, run in ranks
               if run.stall is not None and run.stall.phase != "end"]
    if not stalled:
        return None
    if len(ranks) == 1:
        label, _, wait = stalled[0]
        return f"{label} {wait.text}" if wait is not None else None
    collective = [(label, w) for label, _, w in stalled if w is not None and w.kind == "collective"]
    others = [(label, w) for label, _, w in stalled if w is not None and w.kind != "collective"]
    quiet = [label for label, run in ranks if run.stall is None or run.stall.phase == "end"]
    gone = [label for label, run in ranks if run.end is not None and (run.stall is None or run.stall.phase == "end")]
    parts = [f"{label} {w.text}" for label, w in others]
    if collective:
        ops = sorted({w.op for _, w in collective})
        who = ", ".join(label for label, _ in collective)
        verb = "waits" if len(collective) == 1 else "wait"
        if others:
            parts.append(f"{who} {verb} in {' / '.join(ops)} for {', '.join(label for label, _ in others)}")
        elif gone:
            parts.append(f"{who} {verb} in {' / '.join(ops)} for {', '.join(gone)}, which ended")
        elif len(collective) == len(ranks):
            mixed = " (different collectives: the ranks do not call the same ones)" if len(ops) > 1 else ""
            parts.append(f"every rank waits in a collective ({' / '.join(ops)}){mixed}: a peer is dead or "
                         "missing, or the ranks called mismatched collectives")
        else:
            parts.append(f"{who} {verb} in {' / '.join(ops)} for {', '.join(quiet)} (no stall seen there yet)")
    flight = [f"{label} {st.flight[0][len('flight recorder: '):]}" for label, run, _ in stalled
              if (st := run.stall_stacks) is not None and st.flight and st.flight[0].startswith("flight recorder: in ")]
    if flight:
        parts.append("flight recorder: " + ", ".join(flight))
    return "; ".join(parts) if parts else None


def stack_text(stall: Stall, label: str = "") -> list[str]:
    """Each stack of a Stall event, innermost frame first: the script's frames each on a line, runs of
    library frames folded into one line, every frame with file:line."""
    out: list[str] = []
    for s in stall.stacks:
        out.extend(thread_lines(s, label))
    out.extend(stall.flight)
    out.extend(f"note: {n}" for n in stall.notes)
    return out


def thread_lines(s: ThreadStack, label: str = "") -> list[str]:
    """One thread's header and its folded frames."""
    what = {"main": "training thread", "worker": "DataLoader worker", "pin-memory": "pin-memory thread"}.get(
        s.role, s.role)
    state = f", state {s.state}" + (f" in {s.wchan}" if s.wchan else "") if s.state else ""
    how = {"in-process": "read in-process", "py-spy": "read by py-spy", "none": "not read"}.get(s.how, s.how)
    gil = ", holding the GIL (native code)" if s.native else ""
    head = f"{label + ' ' if label else ''}pid {s.pid} {what} ({how}{state}{gil})"
    lines = [head]
    if s.note:
        lines.append(f"  {s.note}")
    folded: list[Frame] = []

    def fold() -> None:
        if folded:
            inner, outer = folded[0], folded[-1]
            span_text = f"{_loc(inner)} {inner.function}"
            if len(folded) > 1:
                span_text += f" ... {_loc(outer)} {outer.function}"
            lines.append(f"  [{len(folded)} library frame{'s' if len(folded) > 1 else ''}: {span_text}]")
            folded.clear()

    for f in reversed(s.frames):
        if f.library:
            folded.append(f)
            continue
        fold()
        code = f"   {f.code}" if f.code else ""
        lines.append(f"  {_loc(f)} {f.function}{code}")
    fold()
    return lines


def job_stall_finding(ranks: Sequence[tuple[str, RunState]]) -> Finding | None:
    """The job's stall: "stuck for 1m20s after step 19", the cause in words across ranks; None: none stuck."""
    stuck = [(label, run) for label, run in ranks if run.stall is not None and run.stall.phase != "end"]
    if not stuck:
        return None
    cause = job_cause(ranks)
    longest = max(stuck, key=lambda item: stalled_for(item[1]) or 0.0)
    title = headline(longest[1]) or "stuck"
    who = ", ".join(label for label, _ in stuck)
    evidence = [f"{who}: {title}"]
    if cause:
        evidence.append(cause)
    severity = "high" if any(blocked(run) for _, run in stuck) else "medium"
    return Finding(rule="stall", title=f"job {title}", severity=severity, evidence=evidence, cause=cause or "")


def stall_block(run: RunState) -> list[str]:
    """The summary's lines on a stall: its headline and the stacks last taken (empty: no stall)."""
    title = stall_title(run)
    if title is None:
        return []
    out = [f"stall: {title}"]
    st = run.stall_stacks
    if st is None:
        out.append("  no stacks were taken")
        return out
    out.append(f"where it waits (stacks taken {span(st.since_s)} into the {'wait' if st.first else 'stall'}):")
    out.extend(f"  {line}" for line in stack_text(st))
    return out


def _worker_pids(run: RunState) -> list[int]:
    """The DataLoader worker pids of the run's latest sample."""
    if not run.samples:
        return []
    return [p.pid for p in run.samples[-1].procs if p.role == "worker"]


def stacks_text(job: JobState, live: bool = True, read_now: Callable[[int, list[int]], list[str]] | None = None,
                now: bool = False, host: str | None = None) -> str:
    """Every rank's latest stall stacks and the job's cause (`pitstop stacks`, the viewer's `w`).

    `read_now(pid, workers)` reads a live process on this host now (py-spy, from outside), where it
    recorded no stall or with `now` (`host`: this machine's name: a process elsewhere cannot be read);
    None (the viewer, which must not block on py-spy): never."""
    ranks = job.ranks()
    if not ranks:
        return "pitstop: no process of this job was seen"
    out: list[str] = []
    cause = job_cause(ranks)
    if cause:
        out += [f"cause: {cause}", ""]
    for label, run in ranks:
        title = headline(run)
        if run.end is not None:
            state = "ended"
        elif not live:
            state = "stuck when its record stops" if stall_open(run) else "its record stops without an end"
        else:
            state = ("stuck now" if blocked(run) else "waiting for its first step") if stall_open(run) else "running"
        who = f"{label} (" if label == f"pid {run.pid}" else f"{label} (pid {run.pid}, "
        out.append(f"== {who}{state}){': ' + title if title else ''} ==")
        st = run.stall_stacks
        live_here = (read_now is not None and live and run.end is None and run.hello is not None
                     and run.hello.host == host and run.pid is not None)
        if st is not None and not now:
            out.append(f"stacks taken at {fmt.clock_time(st.t)}, {span(st.since_s)} into the "
                       f"{'wait' if st.first else 'stall'}:")
            out.extend(f"  {line}" for line in stack_text(st))
        elif live_here and run.pid is not None:
            out.append("stacks read now (py-spy dump):")
            out.extend(f"  {line}" for line in read_now(run.pid, _worker_pids(run)))
        elif st is None:
            host_of = run.hello.host if run.hello else "?"
            out.append("  no stall: no stacks were taken "
                       + ("(the process ended)" if run.end is not None else f"(it runs on {host_of})"))
        out.append("")
    return "\n".join(out).rstrip()
