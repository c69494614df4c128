"""One `pitstop run` as the Run object drives it: a fake launch and fake fronts, a real record and real messages."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import pytest

from pitstop.errors import UsageError
from pitstop.events import End, Hello, Step, encode
from pitstop.profiling.launch import SessionSettings, Target
from pitstop.runflow import Fronts, Run, RunRequest, TuneLaunch
from pitstop.tui.tunelaunch import TuneRequest

TARGET = Target(script="train.py", args=("--lr", "0.1"))


@pytest.fixture(autouse=True)
def private_runtime_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(tmp_path / "rt"))


@dataclass
class FakeChild:
    pid: int
    returncode: int | None

    def poll(self) -> int | None:
        return self.returncode


@dataclass
class FakeLaunch:
    """Starts nothing: writes what the agent would have recorded, and what the script printed."""

    returncode: int | None
    steps: int = 3
    output: bytes = b""
    stderr_at_start: Callable[[], str] = lambda: ""
    calls: list[tuple[Target, SessionSettings, dict[str, Any]]] = field(default_factory=list)
    said_before_start: str = ""

    def __call__(self, target: Target, settings: SessionSettings, **options: Any) -> FakeChild:
        self.said_before_start = self.stderr_at_start()
        self.calls.append((target, settings, options))
        child = FakeChild(pid=4242, returncode=self.returncode)
        stdout: IO[bytes] | None = options.get("stdout")
        if stdout is not None:
            stdout.write(self.output)
        if self.steps:
            events: list[Any] = [Hello(schema=1, pitstop_version="0.1.0", session=settings.session, pid=child.pid,
                                       ppid=1, host="h", argv=["python", "train.py"], cwd="/", started=1000.0,
                                       python="3.11", script=settings.script)]
            events += [Step(t=1001.0 + i, step=i, wall=1.0, data_wait=0.25, samples=8) for i in range(self.steps)]
            events.append(End(t=1001.0 + self.steps, steps=self.steps, dropped=0, exit_code=self.returncode))
            record = Path(settings.record)
            (record / "rank0.jsonl").write_text("".join(encode(e) + "\n" for e in events))
        return child


@dataclass
class FakeStatus:
    child: FakeChild
    started: bool = False

    def start(self) -> None:
        self.started = True

    def wait(self) -> int:
        assert self.started and self.child.returncode is not None
        return self.child.returncode


@dataclass
class FakeSource:
    label: str
    session: str
    until: Callable[[], bool]
    closed: bool = False

    def close(self) -> None:
        self.closed = True


@dataclass
class FakeViewer:
    """The TUI: records what it was given; `press_t` makes it exit with a tune request, as `t` does."""

    press_t: TuneRequest | None = None
    given: dict[str, Any] = field(default_factory=dict)

    def __call__(self, source: FakeSource, **options: Any) -> int:
        self.given = {"source": source, **options}
        if self.press_t is not None:
            return options["tune"](self.press_t)
        return 0


def headless_run(tmp_path: Path, launch: FakeLaunch, **request: Any) -> Run:
    def status(session: str, label: str, proc: FakeChild, watch: object = None) -> FakeStatus:
        return FakeStatus(proc)

    return Run(RunRequest(target=TARGET, headless=True, record=str(tmp_path / "rec"), **request),
               fronts=Fronts(status=status), launcher=launch, on_a_terminal=lambda: True)


def tui_run(tmp_path: Path, launch: FakeLaunch, viewer: FakeViewer, tune: TuneLaunch | None = None) -> Run:
    def source(label: str, session: str, until: Callable[[], bool], watch: object = None) -> FakeSource:
        return FakeSource(label, session, until)

    return Run(RunRequest(target=TARGET, record=str(tmp_path / "rec")), fronts=Fronts(source=source, viewer=viewer),
               launcher=launch, on_a_terminal=lambda: True, tune=tune)


def test_headless_run_passes_the_scripts_exit_code_on_and_says_where_the_record_is(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    launch = FakeLaunch(returncode=3)
    run = headless_run(tmp_path, launch)
    assert run.execute() == 3
    err = capsys.readouterr().err
    record = tmp_path / "rec"
    assert f"pitstop: running python train.py --lr 0.1 (record: {record})" in err
    assert "pitstop summary: train.py (pid 4242)" in err and "exit code 3" in err
    assert f"pitstop: record: {record}" in err
    assert err.rstrip().endswith("pitstop: train.py exited with code 3")
    target, settings, options = launch.calls[0]
    assert target == TARGET and settings.script == "train.py" and options == {}  # our terminal, our session


def test_a_script_killed_by_a_signal_exits_as_a_shell_would_say(tmp_path: Path) -> None:
    assert headless_run(tmp_path, FakeLaunch(returncode=-9)).execute() == 128 + 9


def test_without_a_record_there_is_no_summary_but_the_exit_code_stays(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert headless_run(tmp_path, FakeLaunch(returncode=1, steps=0)).execute() == 1
    err = capsys.readouterr().err
    assert "pitstop: no summary: " in err and "exited with code" not in err


def test_a_tuned_config_is_announced_before_the_script_starts_and_given_to_its_agent(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "pitstop.toml"
    config.write_text("[dataloader]\nnum_workers = 4\n")
    launch = FakeLaunch(returncode=0, stderr_at_start=lambda: capsys.readouterr().err)
    assert headless_run(tmp_path, launch, config=str(config)).execute() == 0
    assert f"pitstop: applying {config}: num_workers=4 (training DataLoader)" in launch.said_before_start
    assert launch.calls[0][1].config == {"dataloader": {"num_workers": 4}}


def test_the_viewer_reads_the_runs_own_session_and_a_failed_script_shows_its_last_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    output = b"".join(b"line %d\n" % i for i in range(40)) + b"ValueError: bad batch\n"
    viewer = FakeViewer()
    run = tui_run(tmp_path, FakeLaunch(returncode=2, output=output), viewer)
    assert run.execute() == 2
    source = viewer.given["source"]
    assert run.settings is not None and source.session == run.settings.session
    assert source.label == "train.py (pid 4242)" and source.until() and source.closed
    log = tmp_path / "rec" / "output.log"
    assert viewer.given["log_path"] == log and log.read_bytes() == output
    err = capsys.readouterr().err
    assert "line 26\nline 27" in err and "line 25\n" not in err  # the last 15 lines of its output
    assert "ValueError: bad batch" in err
    assert f"pitstop: train.py exited with code 2 (full output: {log})" in err


def test_quitting_the_viewer_leaves_training_running_and_says_how_to_come_back(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    viewer = FakeViewer()
    launch = FakeLaunch(returncode=None)
    assert tui_run(tmp_path, launch, viewer).execute() == 0
    assert "pitstop attach 4242" in viewer.given["detach_hint"]
    assert launch.calls[0][2]["new_session"] is True  # closing the terminal does not stop training
    assert "summary" not in capsys.readouterr().err


@pytest.fixture
def keepers(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, float | None]]:
    """The index keepers a run starts (record, pid, first pass), none of them a process."""
    started: list[tuple[str, int, float | None]] = []

    def start(record: str, pid: int, first: float | None = None) -> None:
        started.append((record, pid, first))

    monkeypatch.setattr("pitstop.keeper.start", start)
    return started


def test_a_run_that_ends_within_one_index_interval_starts_no_keeper(
        tmp_path: Path, keepers: list[tuple[str, int, float | None]]) -> None:
    assert headless_run(tmp_path, FakeLaunch(returncode=0)).execute() == 0
    assert tui_run(tmp_path / "tui", FakeLaunch(returncode=0), FakeViewer()).execute() == 0
    assert keepers == []  # the end summary indexed the record; no process folded it beside


def test_training_left_running_by_a_viewer_that_quit_gets_its_keeper_at_once(
        tmp_path: Path, keepers: list[tuple[str, int, float | None]]) -> None:
    assert tui_run(tmp_path, FakeLaunch(returncode=None), FakeViewer()).execute() == 0
    assert keepers == [(str(tmp_path / "rec"), 4242, 0.0)]  # its first pass now: the interval may be up


def test_a_keeper_starts_once_the_training_has_run_one_interval_and_passes_at_once(
        keepers: list[tuple[str, int, float | None]]) -> None:
    from pitstop.keeper import Later

    later = Later("/runs/r", 4242, every=0.01)
    later._timer.join(timeout=30)  # the interval is up: the timer started it
    later.now()  # called again (a viewer quit too): still one keeper
    later.stop()
    assert keepers == [("/runs/r", 4242, 0.0)]


def test_t_in_the_viewer_tunes_the_target_the_run_started_and_the_tune_decides_the_exit_code(tmp_path: Path) -> None:
    tuned: list[tuple[list[str], Target]] = []

    def start(options: Any, target: Target) -> int:
        tuned.append((list(options), target))
        return 5

    # The request names one rank of a launcher's job: the run knows its own target and needs no rebuilding.
    request = TuneRequest(script="train.py", argv=("python", "other.py"), cwd="/", ranks=2)
    run = tui_run(tmp_path, FakeLaunch(returncode=1), FakeViewer(press_t=request), tune=TuneLaunch(TARGET, start=start))
    assert run.execute() == 5
    assert tuned == [([], TARGET)]


def test_attach_rebuilds_the_script_from_the_processs_argv(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text("")
    tuned: list[Target] = []
    tune = TuneLaunch(start=lambda options, target: tuned.append(target) or 0)
    assert tune(TuneRequest(script="train.py", argv=("python", "-u", "train.py", "--lr", "1"), cwd=str(tmp_path),
                            ranks=1)) == 0
    assert tuned == [Target(script=str(tmp_path / "train.py"), args=("--lr", "1"))]
    with pytest.raises(UsageError, match="distributed job"):
        tune(TuneRequest(script="train.py", argv=("python", "train.py"), cwd=str(tmp_path), ranks=2))


def test_without_a_socket_directory_the_run_is_headless_even_on_a_terminal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", str(blocker))
    run = tui_run(tmp_path, FakeLaunch(returncode=0), FakeViewer())
    settings = run.prepare()
    assert not settings.socket and not run.uses_tui()
    assert "pitstop: warning: live viewers off:" in capsys.readouterr().err


def test_a_configs_threads_beyond_the_cpus_are_cut_with_the_reason_said_before_the_script_starts(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "pitstop.toml"
    config.write_text("[compute]\nthreads = 99999999999999999999\n")
    launch = FakeLaunch(returncode=0, stderr_at_start=lambda: capsys.readouterr().err)
    assert headless_run(tmp_path, launch, config=str(config)).execute() == 0
    cpus = len(os.sched_getaffinity(0))
    assert (f"threads=99999999999999999999 cut to {cpus}: this process may use {cpus} CPU(s)"
            in launch.said_before_start)
    assert f"applying {config}: threads={cpus} (process-wide)" in launch.said_before_start
    assert launch.calls[0][1].config == {"compute": {"threads": cpus}}


def test_the_stall_the_front_read_from_outside_is_recorded_once_the_process_is_gone_and_summed_up(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from pitstop.events import Stall, ThreadStack
    from pitstop.profiling import waits
    from pitstop.profiling._silence import SilenceWatch
    from pitstop.profiling.record import iter_record

    given: list[Any] = []
    stacks = [ThreadStack(pid=4242, role="main", how="py-spy", native=True, state="S",
                          frames=[waits.Frame("main", "/job/train.py", 27)])]
    made = [Stall(t=1002.5, phase="start", step=1, since_s=4.0, threshold_s=3.0, stacks=stacks, by="front"),
            Stall(t=1003.5, phase="exit", step=2, since_s=5.0, threshold_s=3.0, lasted_s=5.0, by="front")]

    def status(session: str, label: str, proc: FakeChild, watch: SilenceWatch | None = None) -> FakeStatus:
        given.append(watch)
        assert watch is not None
        watch.made[proc.pid] = made  # as if it had read pid 4242 while its agent was silent
        return FakeStatus(proc)

    def launch(target: Target, settings: SessionSettings, **options: Any) -> FakeChild:
        record = Path(settings.record) / "rank0.jsonl"  # as the agent names itself in its Hello
        events: list[Any] = [Hello(schema=2, pitstop_version="0.1.0", session=settings.session, pid=4242, ppid=1,
                                   host="h", argv=["train.py"], cwd="/", started=1000.0, python="3.11",
                                   script="train.py", record=str(record))]
        events += [Step(t=1001.0 + i, step=i, wall=0.5, data_wait=0.0, samples=8) for i in range(3)]
        record.write_text("".join(encode(e) + "\n" for e in events))  # killed: no End of its own
        return FakeChild(pid=4242, returncode=130)

    monkeypatch.setattr(waits, "proc_state", lambda pid, tid=None: (None, None, None))  # pid 4242 is gone
    run = Run(RunRequest(target=TARGET, headless=True, record=str(tmp_path / "rec"), stall_after=3.0),
              fronts=Fronts(status=status), launcher=launch, on_a_terminal=lambda: True)
    assert run.execute() == 130
    assert isinstance(given[0], SilenceWatch) and given[0].after_s == 3.0
    recorded = list(iter_record(tmp_path / "rec" / "rank0.jsonl"))
    assert [e for e in recorded if isinstance(e, Stall)] == made
    assert isinstance(recorded[-1], End) and recorded[-1].reason == "signal"  # the launcher's End after them
    err = capsys.readouterr().err
    assert "[high] stuck for 5s after step 2 (stall)" in err
    assert "the training thread holds the GIL in native code: main (train.py:27)" in err
