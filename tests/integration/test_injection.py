"""Every process that trains is measured however torch is imported, and a run pitstop cannot see says so."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.events import End, Hello, Note, Step

from .conftest import SCRIPTS, env_in, events_of, pitstop


def _run(tmp_path: Path, env: dict[str, str], script: str, *args: str, record: str = "r.jsonl") -> tuple[str, str]:
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(tmp_path / record),
                      str(SCRIPTS / script), *args], env)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout, result.stderr


def _steps(path: Path) -> list[Step]:
    return [e for e in events_of(path) if isinstance(e, Step)]


@pytest.mark.parametrize(
    "script, done",
    [
        ("import_find_spec_first.py", "find_spec first done: 12 optimizer steps"),
        ("import_transformers_first.py", "transformers first done: 12 optimizer steps"),
    ],
)
def test_torch_looked_up_before_its_import_is_still_hooked(tmp_path: Path, env: dict[str, str], script: str,
                                                           done: str) -> None:
    out, err = _run(tmp_path, env, script, "12")
    assert done in out
    steps = _steps(tmp_path / "r.jsonl")
    assert [s.step for s in steps] == list(range(12)), err[-2000:]
    assert all(s.source == "optimizer" for s in steps)
    assert re.search(r"^  steps\s+12 ", err, re.M), err[-2000:]


def test_torch_imported_past_the_watcher_is_hooked_late_and_said(tmp_path: Path, env: dict[str, str]) -> None:
    out, err = _run(tmp_path, env, "import_past_watcher.py", "30")
    assert "past watcher done: 30 optimizer steps" in out
    events = events_of(tmp_path / "r.jsonl")
    late = [e for e in events if isinstance(e, Note) and "imported before pitstop could hook it" in e.message]
    assert len(late) == 1 and "hooks installed late at" in late[0].message
    steps = [e for e in events if isinstance(e, Step)]
    assert 0 < len(steps) <= 30  # steps before the late hook are not counted, and never invented
    assert "hooks installed late" in err  # said live and in the summary


def _children_lines(stdout: str) -> dict[int, int]:
    """Optimizer steps each child printed ("child PID step I"): the script's own count."""
    counted: dict[int, int] = {}
    for pid in re.findall(r"^child (\d+) step \d+$", stdout, re.M):
        counted[int(pid)] = counted.get(int(pid), 0) + 1
    return counted


@pytest.mark.parametrize("method", ["spawn", "fork"])
def test_hogwild_children_are_measured_and_added_up(tmp_path: Path, env: dict[str, str], method: str) -> None:
    out, err = _run(tmp_path, env, "hogwild.py", method, "2", "15", record="rec")
    own = _children_lines(out)
    assert len(own) == 2 and set(own.values()) == {15}, out
    records = {}
    for path in (tmp_path / "rec").glob("*.jsonl.gz"):
        events = events_of(path)
        hello = next(e for e in events if isinstance(e, Hello))
        records[hello.pid] = (hello, events)
    main = next(h for h, _ in records.values() if h.parent_pid is None)
    children = {pid: events for pid, (h, events) in records.items() if h.parent_pid == main.pid}
    assert set(children) == set(own), f"records of {sorted(records)}, children that printed {sorted(own)}"
    for pid, events in children.items():
        steps = [e for e in events if isinstance(e, Step)]
        assert len(steps) == own[pid]
        assert isinstance(events[-1], End) and events[-1].steps == own[pid]
    assert re.search(rf"2 child processes of pid {main.pid} trained: ", err), err[-3000:]
    assert re.search(r"^  all steps\s+30 across 2 training processes", err, re.M), err[-3000:]
    assert re.search(r"^  children\s+trained in child processes .*30 steps in all", err, re.M)


@pytest.fixture(scope="module")
def loader_workers_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """One run of a forked worker's loader, then a spawned worker's (10 steps each): (stdout, records' directory).

    One run serves both start methods: each `pitstop run` of a torch script costs ~4 s of CPU.
    """
    root = tmp_path_factory.mktemp("loader-workers")
    env, runtime = env_in(root)
    try:
        out, _ = _run(root, env, "loader_workers.py", "fork,spawn", "10", record="rec")
        yield out, root / "rec"
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


@pytest.mark.xdist_group("loader-workers")  # one pytest-xdist worker, so that the one run serves both
@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_dataloader_workers_leave_no_record(loader_workers_run: tuple[str, Path], context: str) -> None:
    out, records = loader_workers_run
    assert f"loader {context} done" in out
    assert [p.name for p in records.glob("*.jsonl.gz")] == ["rank0.jsonl.gz"]  # none of either's worker
    # every step of both loaders measured, in the main process
    assert len(_steps(records / "rank0.jsonl.gz")) == 20


def test_training_in_a_subprocess_pitstop_cannot_measure_is_said(tmp_path: Path, env: dict[str, str]) -> None:
    env["PITSTOP_SAMPLE_INTERVAL"] = "0.25"  # the child is seen busy within its few seconds
    out, err = _run(tmp_path, env, "train_in_subprocess.py", "4")
    child = re.search(r"training in subprocess (\d+)", out)
    assert child and "subprocess trained" in out, out
    assert [p.name for p in tmp_path.glob("*.jsonl")] == ["r.jsonl"]  # not measured: no record of its own
    summary = err[err.index("pitstop summary"):]
    assert "no training step seen in this process" in summary
    assert f"child processes {child.group(1)} were busy" in summary
    assert "nothing in this run crossed a threshold" not in summary
    assert "no training step was seen in this process, so no rule had anything to judge" in summary


@pytest.mark.parametrize("how", ["autograd", "func"])
def test_a_loop_that_updates_its_parameters_by_hand_is_said_not_counted(
        tmp_path: Path, env: dict[str, str], how: str) -> None:
    # functorch's ensembling example (torch.func's grad, its own update) trained 4,000 iterations
    # and MAML's `p.data -= lr * g` 2,000: both read "steps 0, findings: none ... see the notes",
    # with no note, and "still setting up" on the status line.
    out, err = _run(tmp_path, env, "train_by_hand.py", how, "300")
    assert f"trained by hand ({how}): 300 iterations" in out
    summary = err[err.index("pitstop summary"):]
    said = re.search(r"took gradients with torch.autograd.grad ([\d,]+) times", summary)
    assert said and int(said.group(1).replace(",", "")) >= 300, summary
    assert "call pitstop.step() once per training iteration" in summary
    assert "see the notes" in summary  # and the note is there to see
    assert not _steps(tmp_path / "r.jsonl")
