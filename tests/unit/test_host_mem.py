"""The memory a training process may use: the machine's, or its cgroup's limit when smaller."""

from __future__ import annotations

from pathlib import Path

from pitstop.profiling._hooks import host_mem_total


def test_a_cgroup_limit_below_the_machine_wins_and_max_means_none(tmp_path: Path) -> None:
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       24576000 kB\nMemFree:  1 kB\n")
    cgroup = tmp_path / "cg"
    cgroup.mkdir()
    assert host_mem_total(str(meminfo), str(cgroup)) == 24576000 * 1024  # no cgroup file: the machine
    (cgroup / "memory.max").write_text("max\n")
    assert host_mem_total(str(meminfo), str(cgroup)) == 24576000 * 1024
    (cgroup / "memory.max").write_text(f"{8 << 30}\n")
    assert host_mem_total(str(meminfo), str(cgroup)) == 8 << 30
    assert host_mem_total(str(tmp_path / "missing"), str(tmp_path / "none")) is None
