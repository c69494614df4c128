"""Provides the kernel OOM killer's count of kills in this process's memory cgroup: evidence, not a guess.

A rank killed by SIGKILL read "killed, e.g. SIGKILL or OOM killer" with no
evidence either way. The cgroup's own counter says it: `oom_kill` in
`memory.events` (cgroup v2) or `memory.oom_control` (v1, kernel 4.13+).
`pitstop run` reads it before it starts the training and after it ended;
a count that grew is said beside the summary. None where nothing is readable.
"""

from __future__ import annotations

from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def parse_oom_kill(text: str) -> int | None:
    """The `oom_kill N` line of memory.events or memory.oom_control."""
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if key == "oom_kill" and value.strip().isdigit():
            return int(value.strip())
    return None


def counter_files(proc_cgroup: str, root: Path = CGROUP_ROOT) -> list[Path]:
    """Where the counter of the cgroup `/proc/self/cgroup` names may be, the likeliest first (in a container
    the cgroup filesystem's root is often the container's own cgroup, not the path the kernel lists)."""
    out = []
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        rel = path.lstrip("/")
        if controllers == "":  # cgroup v2
            out += [root / rel / "memory.events", root / "memory.events"]
        elif "memory" in controllers.split(","):  # cgroup v1
            out += [root / "memory" / rel / "memory.oom_control", root / "memory" / "memory.oom_control"]
    return out


def oom_kills(root: Path = CGROUP_ROOT, proc_cgroup: Path = Path("/proc/self/cgroup")) -> int | None:
    """The cgroup's OOM kills so far, or None where no counter is readable."""
    try:
        listed = proc_cgroup.read_text()
    except OSError:
        return None
    for path in counter_files(listed, root):
        try:
            found = parse_oom_kill(path.read_text())
        except OSError:
            continue
        if found is not None:
            return found
    return None


def oom_note(before: int | None, after: int | None) -> str | None:
    """"note: the kernel's OOM killer killed 1 process ..." when the count grew while the run ran."""
    if before is None or after is None or after <= before:
        return None
    n = after - before
    return (f"note: the kernel's OOM killer killed {n} process{'es' if n != 1 else ''} of this memory cgroup "
            f"while the run ran (its oom_kill count went from {before} to {after}): a process ended by SIGKILL "
            "was likely one")


__all__ = ["counter_files", "oom_kills", "oom_note", "parse_oom_kill"]
