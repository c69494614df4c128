"""`pitstop run` on real scripts: the script runs as before, and every step is measured."""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from pitstop.analysis import RunState, advise
from pitstop.events import SCHEMA_VERSION, DataLoaderInfo, End, Event, Hello, Loss, Model, Note, ProfileWindow, Runtime, Sample, Step, encode
from pitstop.profiling.record import ReadResult, iter_record

from .conftest import DDP_GROUP, SCRIPTS, env_in, events_of, pitstop, run_group, wait_for


def _steps(path: Path) -> list[Step]:
    return [e for e in events_of(path) if isinstance(e, Step)]


def _wait_frac(steps: list[Step]) -> float:
    measured = steps[3:]
    return sum(s.data_wait for s in measured) / sum(s.wall for s in measured)


def _rules(path: Path) -> list[str]:
    """The rules that fire on a record, as `pitstop view` would name them."""
    run = RunState()
    for event in events_of(path):
        run.add(event)
    return [f.rule for f in advise(run).findings]


def test_demo_records_every_step_and_finds_the_data_stall(tmp_path: Path, env: dict[str, str]) -> None:
    # 14 steps: 11 after the warm-up, past the 10 the rules need (analysis MIN_STEPS); each step loads 32
    # samples of ~16 ms of CPU each, so every step cut spares ~0.5 s (30 were run once, then 20: the test
    # took over 180 s at load 9-13). Samples 4 a second so that a short run still sees both workers.
    env["PITSTOP_SAMPLE_INTERVAL"] = "0.25"
    stalled = tmp_path / "w0.jsonl"
    result = pitstop(["demo", "--headless", "--steps", "14", "--record", str(stalled)], env)
    assert result.returncode == 0, result.stderr
    assert "step 14/14" in result.stdout  # the script's own output passes through, on stdout
    assert "pitstop summary" in result.stderr and "pitstop summary" not in result.stdout
    steps = _steps(stalled)
    assert [s.step for s in steps] == list(range(14))
    assert all(s.samples == 32 for s in steps)
    events = events_of(stalled)
    assert isinstance(events[-1], End) and events[-1].steps == 14
    assert any(isinstance(e, Loss) for e in events)
    loader = next(e for e in events if isinstance(e, DataLoaderInfo))
    assert loader.num_workers == 0
    # What pitstop decided, not how long a busy machine let the loading take: the demo's loading
    # and its model share the cores, and at load 14.75 the data-wait finding did not fire (at
    # load 7 the share measured 29.9% against a 30% bound once). The summary names the data
    # findings the record's own analysis gives, and one of them fires: the demo stalls on data.
    frac0 = _wait_frac(steps)
    rules = _rules(stalled)
    for rule in ("data-wait", "data-wait-moderate"):
        assert (f"({rule})" in result.stderr) == (rule in rules), (rule, rules, f"{frac0:.0%}")
    assert {"data-wait", "data-wait-moderate"} & set(rules), (rules, f"{frac0:.0%}")

    # The same demo with 2 workers, in batches of 8 (its loading and compute per sample are the
    # same; 20 steps without workers took 9.1 s of CPU, against 16.8 s in batches of 32): the
    # workers take the wait off the steps.
    fed = tmp_path / "w2.jsonl"
    result = pitstop(["run", "--headless", "--record", str(fed), "-m", "pitstop.demo.train",
                      "--steps", "20", "--batch-size", "8", "--num-workers", "2"], env)
    assert result.returncode == 0, result.stderr
    steps2 = _steps(fed)
    assert len(steps2) == 20
    frac2 = _wait_frac(steps2)
    assert frac2 < frac0, f"data wait {frac0:.0%} with 0 workers, {frac2:.0%} with 2"
    # the workers are seen, and none of them runs an agent (only one record file)
    worker_pids = {p.pid for e in events_of(fed) if isinstance(e, Sample) for p in e.procs if p.role == "worker"}
    assert len(worker_pids) >= 2
    assert sorted(p.name for p in tmp_path.glob("*.jsonl")) == ["w0.jsonl", "w2.jsonl"]


GAN_ARGS = ["20"]
SGD_ARGS = ["120"]  # 64 backward calls held before the window at 100: test_a_window_scheduled_among_held_...
SGD_PROFILE = "100:5:10"
# The tests that read one shared run go to one pytest-xdist worker, so that the run is made once.
GAN_GROUP, SGD_GROUP = pytest.mark.xdist_group("run-gan"), pytest.mark.xdist_group("run-sgd")


def _shared_run(tmp_path_factory: pytest.TempPathFactory, name: str,
                args: list[str]) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """One headless `pitstop run ARGS --record R`, shared by the tests that only read what it left: each
    `pitstop run` of a tiny script costs ~4 s of CPU, ~3 s of it torch's import and teardown."""
    root = tmp_path_factory.mktemp(name)
    env, runtime = env_in(root)
    env.pop("PITSTOP_STATUS_INTERVAL")  # the status line at its default pace, as these runs always had it
    record = root / f"{name}.jsonl"
    result = pitstop(["run", "--headless", "--record", str(record), *args], env)
    yield result, record
    shutil.rmtree(runtime, ignore_errors=True)


@pytest.fixture(scope="module")
def gan_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """loop_gan.py, 20 steps: read by the step detection test and test_view_reads_records_and_refuses_newer_ones."""
    yield from _shared_run(tmp_path_factory, "gan", ["--profile", "off", str(SCRIPTS / "loop_gan.py"), *GAN_ARGS])


@pytest.fixture(scope="module")
def manual_sgd_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[subprocess.CompletedProcess[str], Path]]:
    """loop_manual_sgd.py (no optimizer), 120 steps with a profiler window at step 100: read by the step detection
    test and test_a_window_scheduled_among_held_backward_steps_profiles_steps_that_run."""
    yield from _shared_run(tmp_path_factory, "sgd", ["--profile", SGD_PROFILE, str(SCRIPTS / "loop_manual_sgd.py"),
                                                     *SGD_ARGS])


@pytest.mark.parametrize(
    "script, args, expected, source",
    [
        pytest.param("loop_gan.py", GAN_ARGS, 20, "optimizer", marks=GAN_GROUP),  # two optimizers, a step an iteration
        pytest.param("loop_manual_sgd.py", SGD_ARGS, 120, "backward", marks=SGD_GROUP),  # no optimizer at all
        ("loop_no_loader.py", ["20"], 20, "optimizer"),  # batches from a memmap, no DataLoader
        ("loop_manual_step.py", ["20"], 20, "manual"),  # pitstop.step() by hand
        ("loop_optimizer_per_step.py", ["20"], 20, "optimizer"),  # a new SGD every iteration (1 step before)
        ("loop_checkpoint_resume.py", ["20"], 20, "optimizer"),  # 2 steps at lr 0 first: the optimizer's state
        ("loop_scaler_skips.py", ["30", "0,1,2,15"], 30, "optimizer"),  # a GradScaler skips 4 optimizer steps
        ("loop_rpc_autograd.py", ["20"], 20, "backward"),  # distributed autograd's backward (0 steps before)
        ("loop_kfold.py", ["3", "10"], 30, "optimizer"),  # a new model each fold, no DataLoader
        ("loop_unbatched_states.py", ["12"], 12, "optimizer"),  # a policy fed one 1-D state a forward
        ("loop_seq_first_loader.py", ["12"], 12, "optimizer"),  # a DataLoader's (seq, batch, features) batches
        ("loop_refetch_loader.py", ["3"], 24, "optimizer"),  # len(list(loader)) at each epoch's end
    ],
)
def test_step_detection_without_code_changes(
    tmp_path: Path, env: dict[str, str], script: str, args: list[str], expected: int, source: str,
    request: pytest.FixtureRequest,
) -> None:
    record = tmp_path / "r.jsonl"
    if script == "loop_gan.py":  # the run test_view_reads_records_and_refuses_newer_ones reads too
        result, record = request.getfixturevalue("gan_run")
        assert args == GAN_ARGS
    elif script == "loop_manual_sgd.py":  # the run test_a_window_scheduled_among_held_backward_steps_... reads too
        result, record = request.getfixturevalue("manual_sgd_run")
        assert args == SGD_ARGS
    else:
        result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record), str(SCRIPTS / script),
                          *args], env)
    assert result.returncode == 0, result.stderr
    assert "done" in result.stdout
    steps = _steps(record)
    assert len(steps) == expected, [s.source for s in steps]
    assert steps[-1].source == source
    assert all(s.wall > 0 for s in steps)
    events = events_of(record)
    end = next(e for e in events if isinstance(e, End))
    assert (end.reason, end.exit_code) == ("exit", 0)
    if script == "loop_gan.py":  # the Model event is sent again once the second optimizer stepped
        models = [e for e in events if isinstance(e, Model)]
        assert models[-1].optimizers == 2, models
    if script == "loop_scaler_skips.py":  # the losses as the script computed them, not scaled by 65536
        values = [v for e in events if isinstance(e, Loss) for v in e.values if v is not None]
        assert values and all(v < 100 for v in values), values
        assert any(isinstance(e, Note) and "GradScaler skipped" in e.message for e in events)
    if script == "loop_rpc_autograd.py":  # the loss of the backward's root, as the script printed it
        values = [v for e in events if isinstance(e, Loss) for v in e.values if v is not None]
        assert values and f"last loss {values[-1]:.4f}" in result.stdout, values[-3:]
    if script == "loop_checkpoint_resume.py":  # said, in the record
        assert any(isinstance(e, Note) and "torch.distributed.checkpoint" in e.message for e in events)
    if script == "loop_kfold.py":  # each fold's model is watched: its batches' samples, its evaluation
        assert all(s.samples == 32 for s in steps[1:]), [s.samples for s in steps]
        assert [s.step for s in steps if s.mark == "eval"] == [10, 20], [s.mark for s in steps]
    if script == "loop_no_loader.py":  # no DataLoader: samples are the leading dimension of the model's input
        assert all(s.samples == 32 for s in steps[1:]), [s.samples for s in steps]
    if script == "loop_unbatched_states.py":  # a 1-D float input is one sample, not 4 (its features)
        assert [s.samples for s in steps[1:]] == [3 + i % 4 for i in range(1, 12)], [s.samples for s in steps]
    if script == "loop_seq_first_loader.py":  # the batch dimension (1), not the sequence's length (3, then 4)
        assert [s.samples for s in steps] == [8] * 11 + [5], [s.samples for s in steps]
    if script == "loop_refetch_loader.py":  # the batches fetched again are not the next step's samples
        assert [s.samples for s in steps] == [8] * 24, [s.samples for s in steps]


def test_a_compiled_training_step_compiles_as_without_pitstop(tmp_path: Path, env: dict[str, str]) -> None:
    # A whole step under torch.compile: Dynamo traced pitstop's hooks as the script's own code,
    # printed warnings into its stderr ("does not know how to trace the builtin `time.perf_counter`")
    # and broke and compiled graphs inside them (12 breaks and 5 graphs for this script's 4 and 3).
    script = str(SCRIPTS / "loop_compiled_step.py")
    plain = run_group([sys.executable, script, "30", "step"], env)
    assert plain.returncode == 0, plain.stderr
    record = tmp_path / "r.jsonl"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record), script, "30", "step"], env)
    assert result.returncode == 0, result.stderr
    # The same loss, graph breaks (reasons and count) and graphs as without pitstop.
    assert json.loads(result.stdout.splitlines()[-1]) == json.loads(plain.stdout.splitlines()[-1])
    assert "Dynamo does not know" not in result.stderr and "pitstop patch" not in result.stderr, result.stderr
    steps = _steps(record)  # the optimizer's step is compiled: counted at each backward, said so
    assert len(steps) == 30 and steps[-1].source == "backward", [s.source for s in steps]


def test_torch_export_of_the_trained_model_exports_as_without_pitstop(tmp_path: Path, env: dict[str, str]) -> None:
    # A strict export traces with Dynamo without a compile context: a gate that waited for one left
    # the hooks to Dynamo, which failed the export ("does not know how to trace time.perf_counter").
    script = str(SCRIPTS / "loop_export.py")
    plain = run_group([sys.executable, script], env)
    assert plain.returncode == 0, plain.stderr
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(tmp_path / "r.jsonl"), script], env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.splitlines()[-1]) == json.loads(plain.stdout.splitlines()[-1])
    assert "Dynamo does not know" not in result.stderr, result.stderr
    assert len(_steps(tmp_path / "r.jsonl")) == 10


@SGD_GROUP
def test_a_window_scheduled_among_held_backward_steps_profiles_steps_that_run(
        manual_sgd_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    # Backward calls are held until it is clear no optimizer steps (64 of them), then emitted at
    # once: a window scheduled among them (Keras's fit counts steps this way) opened and closed in
    # that burst, 0 ops in 0.2 ms, and its steps were kept out of the figures.
    result, record = manual_sgd_run  # loop_manual_sgd.py 120, --profile 100:5:10
    assert (SGD_ARGS, SGD_PROFILE) == (["120"], "100:5:10")
    assert result.returncode == 0, result.stderr
    windows = [e for e in events_of(record) if isinstance(e, ProfileWindow)]
    assert windows, result.stderr[-2000:]
    first = windows[0]
    assert first.step_start >= 64 and first.ops and first.duration_s > 0.001, first
    steps = _steps(record)
    assert len(steps) == 120 and not any(s.mark for s in steps[:64])


def test_step_times_agree_with_a_plain_optimizer_hook(tmp_path: Path, env: dict[str, str]) -> None:
    record = tmp_path / "r.jsonl"
    truth = tmp_path / "truth.json"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                      str(SCRIPTS / "loop_hook_timing.py"), "80", str(truth)], env)
    assert result.returncode == 0, result.stderr
    plain = json.loads(truth.read_text())
    ours = statistics.median(s.wall for s in _steps(record)[1:])
    assert plain["steps"] == 80 and len(_steps(record)) == 80
    assert abs(ours / plain["median"] - 1) < 0.05, (ours, plain["median"])


def test_the_scripts_exit_code_and_traceback_are_kept(tmp_path: Path, env: dict[str, str]) -> None:
    result = pitstop(["run", "--headless", str(SCRIPTS / "loop_raises.py")], env)
    assert result.returncode == 1
    assert "before the error" in result.stdout
    assert "Traceback (most recent call last)" in result.stderr
    assert "ValueError: bad learning rate schedule" in result.stderr
    result = pitstop(["run", "--headless", str(SCRIPTS / "loop_exit3.py")], env)
    assert result.returncode == 3
    assert result.stdout.splitlines()[0] == "to stdout"
    assert "to stderr" in result.stderr and "exited with code 3" in result.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "nope.py"], "no such script: nope.py"),
        (["run", "-m", "no_such_module_xyz"], "module not found: no_such_module_xyz"),
        (["run", "--", "no-such-launcher-xyz", "train.py"], "launcher not found: no-such-launcher-xyz"),
        (["run"], "give a script"),
        (["run", "--profile", "often", "x.py"], "--profile 'often'"),
        (["run", "--prometheus", "99999", "x.py"], "--prometheus '99999': give a TCP port from 1 to 65535"),
        (["view", "missing.jsonl"], "no record at missing.jsonl"),
        (["attach", "999999"], "no process with pid 999999"),
        (["profile", "1"], "pid 1 has no pitstop agent"),
    ],
)
def test_bad_input_is_one_line_and_nonzero(tmp_path: Path, env: dict[str, str], args: list[str], message: str) -> None:
    result = pitstop(args, env, cwd=tmp_path, timeout=60)
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_unknown_option_is_refused(env: dict[str, str]) -> None:
    result = pitstop(["run", "--bogus", "train.py"], env)
    assert result.returncode == 2 and "--bogus" in result.stderr


def test_records_are_never_overwritten_and_must_be_writable(tmp_path: Path, env: dict[str, str]) -> None:
    existing = tmp_path / "mine.jsonl"
    existing.write_text("precious\n")
    result = pitstop(["run", "--record", str(existing), str(SCRIPTS / "loop_exit3.py")], env)
    assert result.returncode == 2 and "record file exists" in result.stderr
    assert existing.read_text() == "precious\n"
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    result = pitstop(["run", "--record", str(blocker / "sub" / "r.jsonl"), str(SCRIPTS / "loop_exit3.py")], env)
    assert result.returncode == 2 and "cannot write records" in result.stderr
    assert "to stdout" not in result.stdout  # the script never started


@GAN_GROUP
def test_view_reads_records_and_refuses_newer_ones(
        tmp_path: Path, env: dict[str, str], gan_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    run, record = gan_run
    assert run.returncode == 0, run.stderr
    result = pitstop(["view", str(record), "--summary"], env)
    assert result.returncode == 0 and "20 (17 measured" in result.stdout
    newer = tmp_path / "newer.jsonl"
    lines = record.read_text().splitlines()
    newer.write_text("\n".join([lines[0].replace(f'"schema":{SCHEMA_VERSION}', '"schema":7'), *lines[1:]]) + "\n")
    result = pitstop(["view", str(newer), "--summary"], env)
    assert result.returncode == 2 and "newer pitstop" in result.stderr
    corrupt = tmp_path / "corrupt.jsonl"
    corrupt.write_text(lines[0] + "\n{{{\n" + lines[1] + "\n")
    result = pitstop(["view", str(corrupt), "--summary"], env)
    assert result.returncode == 2 and "corrupt.jsonl:2: corrupt record line" in result.stderr


def _write_record(path: Path, session: str, pid: int, steps: int, wall: float = 0.02) -> None:
    """A small, complete record as one process of `session` would write it."""
    events: list[Event] = [
        Hello(schema=1, pitstop_version="0", session=session, pid=pid, ppid=1, host="h", argv=["python", "t.py"],
              cwd="/", started=1000.0, python="3.12", script="t.py"),
        Runtime(t=1000.0, torch_version="2", cuda_version=None, device_type="cpu", cpu_count=2),
    ]
    events += [Step(t=1000.0 + (i + 1) * wall, step=i, wall=wall, data_wait=0.0, samples=8) for i in range(steps)]
    events.append(End(t=1000.0 + (steps + 1) * wall, steps=steps, dropped=0, reason="exit", exit_code=0))
    path.write_text("".join(encode(e) + "\n" for e in events))


@pytest.mark.parametrize("command", ["view", "doctor"])
def test_a_reader_that_closes_the_pipe_early_ends_the_command_quietly(
    tmp_path: Path, env: dict[str, str], command: str
) -> None:
    record = tmp_path / "r.jsonl"
    _write_record(record, "s1", 11, steps=20)
    # doctor's shorter measurements: the test is about the pipe, not the figures
    args = ["view", str(record), "--summary"] if command == "view" else ["doctor", "--json", "--quick"]
    proc = subprocess.Popen([sys.executable, "-m", "pitstop.cli", *args], env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.close()  # as `| head -0` does: every write to stdout now fails with EPIPE
    _, err = proc.communicate(timeout=120)
    assert "Traceback" not in err and "BrokenPipeError" not in err and "Exception ignored" not in err, err
    assert proc.returncode == 141  # 128 + SIGPIPE, as a shell reports `yes | head` (docs: README)


def _start_forever(tmp_path: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], Path]:
    record = tmp_path / "live.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "demand", "--record", str(record),
         str(SCRIPTS / "loop_forever.py")],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for(lambda: record.exists() and sum(isinstance(e, Step) for e in _safe_events(record)) >= 5,
             what="five steps in the record")
    return proc, record


def _kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _safe_events(path: Path) -> list[object]:
    try:
        return list(iter_record(path))
    except Exception:
        return []


def test_sigkill_leaves_a_readable_record(tmp_path: Path, env: dict[str, str]) -> None:
    proc, record = _start_forever(tmp_path, env)
    hello = next(e for e in events_of(record) if isinstance(e, Hello))
    os.kill(hello.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    assert proc.returncode == 128 + signal.SIGKILL
    result = ReadResult()
    events = list(iter_record(record, result))
    assert sum(isinstance(e, Step) for e in events) >= 5
    # The End pitstop saw, appended (`runflow.record_end`), unless the kill tore the last write.
    ends = [(e.reason, e.exit_code) for e in events if isinstance(e, End)]
    assert ends == [("signal", 137)] or (ends == [] and result.torn), (ends, result)
    summary = pitstop(["view", str(record), "--summary"], env)
    assert summary.returncode == 0 and "steps" in summary.stdout
    if ends:
        assert "killed by a signal before it could record its end (exit code 137 (SIGKILL))" in summary.stdout


def test_live_run_is_listed_profiled_and_serves_history(tmp_path: Path, env: dict[str, str]) -> None:
    proc, record = _start_forever(tmp_path, env)
    hello = next(e for e in events_of(record) if isinstance(e, Hello))
    try:
        listing = pitstop(["ls"], env, timeout=30)
        assert listing.returncode == 0
        row = next(line for line in listing.stdout.splitlines() if line.startswith(str(hello.pid)))
        assert "loop_forever.py" in row
        sock = Path(env["PITSTOP_RUNTIME_DIR"]) / f"{hello.pid}.sock"
        assert oct(sock.stat().st_mode & 0o777) == "0o600"
        assert oct(sock.parent.stat().st_mode & 0o777) == "0o700"
        reply = pitstop(["profile", str(hello.pid)], env, timeout=30)
        assert reply.returncode == 0 and "profiling" in reply.stdout
        from pitstop.events import ProfileWindow

        wait_for(lambda: any(isinstance(e, ProfileWindow) and e.trigger == "demand" for e in _safe_events(record)),
                 what="the on-demand profiler window")
        # a new client gets the history at once: hello first, then steps
        from pitstop.profiling._linedecode import decode_events
        from pitstop.profiling.transport import Client

        client = Client(sock)
        got = []
        for batch in client.lines(poll=0.2):  # the record's lines: a `steps` line holds many steps
            got += [event for line in batch for event in decode_events(line)]
            if sum(isinstance(e, Step) for e in got) >= 5:
                break
        client.close()
        assert isinstance(got[0], Hello) and got[0].pid == hello.pid
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=30)
        finally:
            _kill_quietly(hello.pid)
    assert proc.returncode == 128 + signal.SIGINT  # the script got the SIGINT and died of it
    assert not (Path(env["PITSTOP_RUNTIME_DIR"]) / f"{hello.pid}.sock").exists()  # cleaned at exit


@DDP_GROUP
def test_torchrun_two_ranks_one_stream_each_and_no_agent_in_workers(
        balanced_ddp_job: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    result, records = balanced_ddp_job  # 100 steps a rank: the run test_distributed reads for "no straggler"
    assert result.returncode == 0, result.stderr
    files = sorted(records.glob("*.jsonl.gz"))
    assert [f.name for f in files] == ["rank0.jsonl.gz", "rank1.jsonl.gz"]
    hellos = [events_of(f)[0] for f in files]
    assert [h.rank for h in hellos] == [0, 1] and all(h.world_size == 2 for h in hellos)
    assert len({h.session for h in hellos}) == 1
    rank_pids = {h.pid for h in hellos}
    launcher_pids = {h.ppid for h in hellos}
    assert launcher_pids.isdisjoint(rank_pids)  # the torchrun launcher has no agent
    done_pids = {int(line.split()[3]) for line in result.stdout.splitlines() if line.endswith("done")}
    assert done_pids == rank_pids
    worker_pids = {int(line.split()[2]) for line in result.stdout.splitlines() if line.startswith("worker pid")}
    assert len(worker_pids) == 2  # one forked worker (rank 0), one spawned (rank 1)
    assert worker_pids.isdisjoint(rank_pids)  # no worker wrote a record or said hello
    for f in files:
        assert len(_steps(f)) == 100


def test_a_socket_dir_taken_by_another_user_is_said_at_start_and_live_viewers_still_work(
    tmp_path: Path, env: dict[str, str]
) -> None:
    if os.getuid() != 0:
        pytest.skip("needs root to hand /tmp/pitstop-<uid> to another user")
    base = Path(f"/tmp/pst-fb-{os.getpid()}-{tmp_path.name[-8:]}")  # short: socket paths max 107 bytes
    shared = base / "tmp" / f"pitstop-{os.getuid()}"
    shared.mkdir(parents=True, mode=0o777)
    os.chown(shared, 65534, 65534)  # another local user created it first
    for name in ("PITSTOP_RUNTIME_DIR", "XDG_RUNTIME_DIR"):
        env.pop(name, None)
    env.update(TMPDIR=str(base / "tmp"), XDG_CACHE_HOME=str(base / "cache"))
    try:
        proc, record = _start_forever(tmp_path, env)
        hello = next(e for e in events_of(record) if isinstance(e, Hello))
        try:
            listing = pitstop(["ls"], env, timeout=30)
            assert any(line.startswith(str(hello.pid)) for line in listing.stdout.splitlines()), listing.stdout
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                _, err = proc.communicate(timeout=30)
            finally:
                _kill_quietly(hello.pid)
        fallback = base / "cache" / "pitstop" / "run"
        assert err.splitlines()[0] == (f"pitstop: warning: {shared} is not usable (it belongs to another user "
                                       f"(uid 65534)); live viewers use {fallback} instead")
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


def test_view_of_a_folder_of_unrelated_records_summarizes_each_run_apart(tmp_path: Path, env: dict[str, str]) -> None:
    folder = tmp_path / "records"
    folder.mkdir()
    for i, wall in enumerate((0.01, 0.05, 0.2)):  # three runs, no job: very different step times
        _write_record(folder / f"run{i}.jsonl", f"2026-run-{i}", 300 + i, steps=30, wall=wall)
    result = pitstop(["view", str(folder), "--summary"], env)
    assert result.returncode == 0, result.stderr
    first = result.stdout.splitlines()[0]
    assert first == ("pitstop: these records belong to 3 different runs (2026-run-0, 2026-run-1, 2026-run-2); "
                     "each is summarized on its own")
    assert "pitstop job summary" not in result.stdout and "straggler" not in result.stdout
    assert result.stdout.count("pitstop summary: t.py (pid 30") == 3


_CONFIGURED = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(96, 8), torch.randn(96, 1)), batch_size=8)
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = (model(x) - y).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("dtype seen by the script:", model(x).dtype)
"""


def test_a_config_says_what_it_applies_at_start_and_in_the_summary(tmp_path: Path, env: dict[str, str]) -> None:
    # Issue 10: bf16 went on silently while the script's own log said float32.
    script = tmp_path / "train.py"
    script.write_text(_CONFIGURED)
    config = tmp_path / "pitstop.toml"
    config.write_text('[compute]\namp = "bf16"\n\n[dataloader]\nnum_workers = 1\n')
    result = pitstop(["run", "--headless", "--profile", "off", "--config", str(config), str(script)], env,
                     cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[0] == (
        f"pitstop: applying {config}: amp=bf16 (process-wide); num_workers=1 (training DataLoader)")
    row = next(line for line in result.stderr.splitlines() if line.startswith("  config "))
    assert row.startswith("  config      applied amp=bf16") and "num_workers=1 (train loader" in row, row
    # the report's command row is the command that ran, the config with it
    record = next(p for p in (tmp_path / "records").rglob("*.jsonl*") if not p.name.endswith(".index"))
    report = pitstop(["report", str(record), "-o", str(tmp_path / "report.md")], env, cwd=tmp_path)
    assert report.returncode == 0, report.stderr
    assert f"pitstop run --config {config} {script}" in (tmp_path / "report.md").read_text()


_STOPPABLE = """\
import time, torch
model = torch.nn.Linear(8, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
print("started", flush=True)
try:
    while True:
        model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad(); time.sleep(0.01)
except KeyboardInterrupt:
    print("stopped: exiting with 1", flush=True)
    raise SystemExit(1)  # not through sys.exit: the agent cannot see this code, the front can
"""


def test_after_a_stop_from_the_viewer_the_summary_says_how_the_script_really_ended(
    tmp_path: Path, env: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Issue 10: the summary said "end exit" after a `k` stop whose script exited 1.
    from pitstop.profiling.transport import request, socket_for_pid

    script = tmp_path / "train.py"
    script.write_text(_STOPPABLE)
    record = tmp_path / "r.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", "--record", str(record),
         str(script)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    wait_for(lambda: record.exists() and sum(isinstance(e, Step) for e in _safe_events(record)) >= 5,
             what="five steps in the record")
    hello = next(e for e in events_of(record) if isinstance(e, Hello))
    monkeypatch.setenv("PITSTOP_RUNTIME_DIR", env["PITSTOP_RUNTIME_DIR"])  # where the run's socket is
    try:
        reply = request(socket_for_pid(hello.pid), "stop")  # what `k` in the viewer sends
        assert "SIGINT" in reply
        out, err = proc.communicate(timeout=60)
    finally:
        _kill_quietly(hello.pid)
    assert proc.returncode == 1 and "stopped: exiting with 1" in out
    row = next(line for line in err.splitlines() if line.startswith("  end "))
    assert "(exit code 1)" in row, row


def _losses(path: Path) -> dict[int, float | None]:
    return {step: value for e in events_of(path) if isinstance(e, Loss) for step, value in zip(e.steps, e.values)}


def test_fast_steps_read_a_loss_every_10_ms_and_the_last_steps_loss_at_the_end(
        tmp_path: Path, env: dict[str, str]) -> None:
    # A loss read in place costs ~5 us of the training thread (`_losses.LOSS_EVERY_S`): at steps
    # well under 1 ms pitstop reads one step's in 10 ms, and the last step's as the run ends.
    record, truth = tmp_path / "r.jsonl", tmp_path / "truth.json"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                      str(SCRIPTS / "loop_loss_pace.py"), "400", "0", str(truth)], env)
    assert result.returncode == 0, result.stderr
    own = json.loads(truth.read_text())
    steps, losses = _steps(record), _losses(record)
    assert len(steps) == 400
    wall = sum(s.wall for s in steps[1:])
    assert 2 <= len(losses) <= wall / 0.01 + 3, (len(losses), wall)  # one per 10 ms at most, and the end's
    assert max(losses) == 399  # the last step's loss, read as the run ended
    for step, value in losses.items():  # each the script's own value for that step (9 digits kept)
        assert value == pytest.approx(own[step], rel=1e-7), step
    assert f"loss        last {own[-1]:.4g}" in result.stderr, result.stderr[-1500:]  # the summary's


def test_steps_of_10_ms_or_more_each_carry_their_loss(tmp_path: Path, env: dict[str, str]) -> None:
    record, truth = tmp_path / "r.jsonl", tmp_path / "truth.json"
    result = pitstop(["run", "--headless", "--profile", "off", "--record", str(record),
                      str(SCRIPTS / "loop_loss_pace.py"), "40", "11", str(truth)], env)
    assert result.returncode == 0, result.stderr
    own = json.loads(truth.read_text())
    losses = _losses(record)
    assert sorted(losses) == list(range(40))
    assert [losses[k] for k in range(40)] == pytest.approx(own, rel=1e-7)
