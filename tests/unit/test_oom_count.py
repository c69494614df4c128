"""The OOM killer is named with its evidence: the memory cgroup's oom_kill count, before and after the run."""

from __future__ import annotations

from pathlib import Path

from pitstop.profiling._oom import oom_kills, oom_note


def _cgroup(tmp_path: Path, listed: str, files: dict[str, str]) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    proc = tmp_path / "proc_self_cgroup"
    proc.write_text(listed)
    return root, proc


def test_the_count_is_read_from_cgroup_v2_and_v1(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path / "v2", "0::/job.slice/run\n",
                         {"job.slice/run/memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\n"})
    assert oom_kills(root, proc) == 2
    # v1 in a container: the path the kernel lists is not under the container's cgroup root
    root, proc = _cgroup(tmp_path / "v1", "4:memory:/process_api/abc\n0::/\n",
                         {"memory/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 5\n"})
    assert oom_kills(root, proc) == 5
    assert oom_kills(tmp_path / "none", proc) is None


def test_only_a_count_that_grew_is_said() -> None:
    assert oom_note(2, 2) is None and oom_note(None, 3) is None and oom_note(2, None) is None
    note = oom_note(2, 3)
    assert note is not None and "OOM killer killed 1 process of this memory cgroup" in note
