"""Tests `pitstop tune` end to end: real trials of small scripts, each a fresh process through the agent."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from pitstop.config import load_config
from pitstop.events import DataLoaderInfo
from pitstop.profiling.record import iter_record
from pitstop.tuning.measure import measure
from pitstop.tuning.verdict import Z90

from .conftest import kill_group, run_group

SCRIPT = str(Path(__file__).parent / "scripts" / "tune_train.py")
# Every trial is a torch process (torch's import is 3.3 s of CPU on the 2-core CI box), so these
# tunes are short: few steps, a trial budget, one knob each. The script updates its weights by
# hand (--by-hand): building torch.optim.SGD imports torch._dynamo, 2.7 s more in every trial
# (a tune of 2 trials took 12.9 s of CPU with it, 6.7 s without), and these tests are about
# trials, not the optimizer (tests/functional/test_trials.py tunes the script with its SGD).
BY_HAND = ["--by-hand"]
FAST = ["--steps", "20", "--warmup", "3", "--min-time", "0"]
# Where workers are compared, trials measure at least 0.8 s: shorter windows measure the scheduler.
MEASURED = ["--min-time", "0.8"]
# The two-sided 99% normal quantile, to read a 90% claim with one re-measure in a hundred outside.
Z99 = 2.576

# One tuner at a time under pytest-xdist (./dev.sh test): each measures throughput, and two
# measuring at once on a 2-core machine measure each other.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tune")]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PITSTOP_SESSION", None)
    env.pop("PITSTOP_OWNER_PID", None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def tune_cmd(options: list[str], script_args: list[str]) -> list[str]:
    return [sys.executable, "-m", "pitstop.tuning", *options, SCRIPT, *BY_HAND, *script_args]


def tune(cwd: Path, options: list[str], script_args: list[str], timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return run_group(tune_cmd(["--json", *FAST, *options], script_args), _env(), cwd, timeout)


def report(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.stdout.strip(), proc.stderr
    return json.loads(proc.stdout)


def trials(data: dict[str, Any], **config: Any) -> list[dict[str, Any]]:
    return [t for t in data["trials"] if all(t["candidate"].get(k) == v for k, v in config.items())]


def test_oom_above_a_batch_size_is_a_result_and_the_winner_was_run(tmp_path: Path) -> None:
    # Three trials: the baseline's 8, then 16 and 32 (the OOM); what is chosen is a size that ran,
    # whichever the measurements favour (no confirmation fits, so a win stands unconfirmed or not at all).
    proc = tune(tmp_path, ["--batch-size", "--knobs", "batch", "--budget", "3"],
                ["--oom-above", "16", "--work", "5000"])
    assert proc.returncode == 0, proc.stderr
    data = report(proc)
    ooms = [t for t in data["trials"] if t["status"] == "oom"]
    assert ooms and ooms[0]["candidate"]["batch_size"] == 32
    assert "out of memory" in ooms[0]["reason"]
    chosen = data["winner"].get("batch_size", 8)
    assert chosen <= 16
    assert any(t["status"] == "ok" and t["candidate"].get("batch_size", 8) == chosen for t in data["trials"])
    assert data["batch_size_tuned"] is True


@pytest.fixture(scope="module")
def amp_tune(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """(directory, JSON report) of one amp tune of a script whose epoch never ends and whose loss is NaN
    under autocast: its baseline shows the agent ending an endless epoch, its bf16 trial the NaN."""
    root = tmp_path_factory.mktemp("amp")
    proc = tune(root, ["--knobs", "amp", "--budget", "2", "--steps", "60"],
                ["--forever", "--n", "64", "--nan-with-autocast", "--work", "2000"])
    assert proc.returncode == 0, proc.stderr
    return root, report(proc)


def test_nan_loss_under_autocast_is_rejected(amp_tune: tuple[Path, dict[str, Any]]) -> None:
    root, data = amp_tune
    bf16 = trials(data, amp="bf16")
    assert bf16 and bf16[0]["status"] == "nan" and "NaN" in bf16[0]["reason"]
    assert data["winner"] == {} and not data["improves"]
    assert data["config"] is None and not (root / "pitstop.toml").exists()  # a file that sets nothing is not written
    assert "fp16" in " ".join(data["notes"])  # fp16 not tried on a CPU, and the report says why


def test_a_crash_in_workers_is_a_result_with_its_traceback_line(tmp_path: Path) -> None:
    proc = tune(tmp_path, ["--knobs", "workers", "--budget", "2"], ["--crash-in-workers", "--work", "2000"])
    assert proc.returncode == 0, proc.stderr
    data = report(proc)
    crashed = [t for t in data["trials"] if t["candidate"].get("num_workers", 0) > 0]
    assert crashed and all(t["status"] == "crash" for t in crashed)
    assert "ValueError: this dataset cannot load in a worker process" in crashed[0]["reason"]
    assert data["winner"] == {}


def test_a_hang_is_killed_at_the_trial_limit_with_its_process_group(tmp_path: Path) -> None:
    proc = tune(tmp_path, ["--knobs", "workers", "--budget", "2", "--trial-timeout", "10"],
                ["--hang-in-workers", "--work", "2000"])
    assert proc.returncode == 0, proc.stderr
    data = report(proc)
    hung = [t for t in data["trials"] if t["candidate"].get("num_workers", 0) > 0]
    assert hung and hung[0]["status"] == "hang" and "10 s trial limit" in hung[0]["reason"]
    # Not before its limit; how soon after is the machine's business (a bound of 20 s was wall time: issue 13).
    # That it was killed, workers included, is what the reason and the process table say.
    assert hung[0]["duration"] >= 10
    left = [p for p in psutil.process_iter(["cmdline"]) if "--hang-in-workers" in " ".join(p.info["cmdline"] or [])]
    assert not left, "the hung trial's processes (workers included) must be gone"


def test_a_script_whose_epoch_never_ends_still_stops(amp_tune: tuple[Path, dict[str, Any]]) -> None:
    _, data = amp_tune
    (base,) = trials(data, amp=None)
    assert base["status"] == "ok" and base["measured_steps"] == 60  # 8 batches an epoch, never ending
    assert not any("ended by itself" in n for n in base["notes"])  # the agent ended it (trial-complete)


def test_workers_0_with_the_scripts_persistent_workers_is_a_trial_that_runs(tmp_path: Path) -> None:
    # num_workers=0 unsets the script's persistent_workers=True (it made DataLoader raise: a
    # crashed trial before): the configuration is measured like any other. Confirmed as a given
    # config: whether the search tries 0 follows the baseline's evidence, which the machine's
    # load moves (5, 3, 5, 1 and 4 workers suggested in five runs of the same tune).
    (tmp_path / "zero.toml").write_text("[dataloader]\nnum_workers = 0\n")
    # One round (2 trials): that it runs is the point, not how many rounds decide it.
    proc = tune(tmp_path, ["--confirm", "zero.toml", "--budget", "2"],
                ["--workers", "2", "--persistent", "--work", "2000"])
    # 1: measured and not confirmed (a neighbour's load spread one trial's windows by 127% once); 2+: an error
    assert proc.returncode in (0, 1), proc.stderr
    data = report(proc)
    zero = trials(data, num_workers=0)
    assert zero and zero[0]["status"] not in ("crash",), zero[0]
    assert "persistent_workers" not in (zero[0].get("reason") or "")


# Sleeps set both speeds, so the gain is the same on any load: reads of 5 ms a sample (40 ms a
# batch) and a step of six 5 ms sleeps. With no worker a step sleeps 14 times, from 2 workers
# on (a batch every <= 20 ms) 6 times: 2.33x whatever the winner's count, and each wake-up's
# wait for a core on a busy machine weighs both the same (the tune measured 2.13x, [1.90,
# 2.40], at load 1.4). With the reads alone (10 ms a sample, no step time) the gain was the
# main loop's CPU speed: the winner re-measured 14.53x (17.09x, 12.35x) at load 8.5-9 against
# a tune that claimed [2.12, 11.98].
SLEEPS_SCRIPT = ["--io-ms", "5", "--work", "0", "--step-ms", "30", "--step-sleeps", "6"]


@dataclass
class Resumed:
    """A workers tune interrupted after two trials, refused twice, then resumed to its end (one tune's trials)."""

    root: Path
    journal: Path
    first: subprocess.CompletedProcess[str]  # the run Ctrl+C ended
    done: int  # trials the interrupted run finished
    config_at_interrupt: bool  # whether a pitstop.toml was there when it ended
    again: subprocess.CompletedProcess[str]  # the same command without --resume
    refused: subprocess.CompletedProcess[str]  # --resume without --force, over the user's own pitstop.toml
    kept: str  # the user's pitstop.toml after the refusal
    before: set[Path]  # the trial records there before the resume
    resumed: subprocess.CompletedProcess[str]  # --resume --force: the tune's end, its JSON report


@pytest.fixture(scope="module")
def resumed(tmp_path_factory: pytest.TempPathFactory) -> Resumed:
    """One tune serves the resume and the path a user takes with its config: both were a 4-trial workers
    tune of their own (8 trials); resumed, it is one tune's 4 and the trial Ctrl+C cut short."""
    root = tmp_path_factory.mktemp("resume")
    options = [*FAST, *MEASURED, "--json", "--knobs", "workers", "--budget", "4"]
    first = subprocess.Popen(tune_cmd(options, SLEEPS_SCRIPT), cwd=root, env=_env(), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    journal = root / ".pitstop-tune" / "missing"
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:  # wait for two finished trials, then Ctrl+C
            found = list((root / ".pitstop-tune").glob("tune_train-*.journal.jsonl"))
            journal = found[0] if found else journal
            if journal.exists() and journal.read_text().count('"kind":"trial"') >= 2:
                break
            time.sleep(0.2)
        first.send_signal(signal.SIGINT)
        out, err = first.communicate(timeout=30)
    finally:
        kill_group(first)
    interrupted = subprocess.CompletedProcess(first.args, first.returncode, out, err)
    done = journal.read_text().count('"kind":"trial"')
    config_at_interrupt = (root / "pitstop.toml").exists()
    again = run_group(tune_cmd(options, SLEEPS_SCRIPT), _env(), root, 60)
    (root / "pitstop.toml").write_text("# mine\n")  # the user's own config, there before the resume
    refused = run_group(tune_cmd([*options, "--resume"], SLEEPS_SCRIPT), _env(), root, 60)
    kept = (root / "pitstop.toml").read_text()
    records = journal.with_name(journal.name.replace(".journal.jsonl", ".records"))
    before = set(records.glob("*.jsonl"))  # finished trials, plus the one Ctrl+C cut short
    resumed_run = run_group(tune_cmd([*options, "--resume", "--force"], SLEEPS_SCRIPT), _env(), root, 240)
    return Resumed(root, journal, interrupted, done, config_at_interrupt, again, refused, kept, before, resumed_run)


def test_resume_after_interruption_reuses_finished_trials(resumed: Resumed) -> None:
    first, journal = resumed.first, resumed.journal
    assert first.returncode == 130, first.stderr
    assert "--resume" in first.stderr and not resumed.config_at_interrupt
    assert resumed.done >= 2
    for line in journal.read_text().splitlines():
        json.loads(line)  # consistent: every line whole
    again = resumed.again
    assert again.returncode == 2 and "--resume" in again.stderr  # nothing overwritten without asking
    proc = resumed.resumed
    assert proc.returncode == 0, proc.stderr
    replayed = [ln for ln in proc.stderr.splitlines() if ln.startswith("[") and "(journal)" in ln]
    assert len(replayed) == resumed.done
    records = journal.with_name(journal.name.replace(".journal.jsonl", ".records"))
    new = set(records.glob("*.jsonl")) - resumed.before
    total = journal.read_text().count('"kind":"trial"')
    assert len(new) == total - resumed.done  # finished trials were not run again
    assert (resumed.root / "pitstop.toml").read_text() != "# mine\n"


def _throughput(tmp_path: Path, name: str, config: list[str], script_args: list[str]) -> float:
    """One `pitstop run` of the script (with `config` options or without), its measured samples/s."""
    record = tmp_path / f"{name}.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "pitstop.cli", "run", "--headless", "--profile", "off", *config, "--record",
         str(record), SCRIPT, *BY_HAND, *script_args],
        cwd=tmp_path, env=_env(), capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    figure = measure(iter_record(record), warmup=3).throughput
    assert figure, run.stderr[-3000:]
    return figure


def test_a_workers_tune_overwrites_only_with_force_and_its_config_holds_its_interval_under_pitstop_run(
        resumed: Resumed) -> None:
    # One tune serves the whole path a user takes: their own pitstop.toml is kept unless --force;
    # the tune finds workers, writes the config with the interval it claims; `pitstop run --config`
    # applies it to the script's DataLoader, and re-measuring lands inside the interval. The tune
    # used to write a single round's ratio as [x, x], which no re-measure lands on.
    tmp_path, script = resumed.root, SLEEPS_SCRIPT
    refused = resumed.refused
    assert refused.returncode == 2 and "use --force" in refused.stderr
    assert resumed.kept == "# mine\n"

    proc = resumed.resumed
    assert proc.returncode == 0, proc.stderr
    data = report(proc)
    assert data["winner"].get("num_workers", 0) > 0, proc.stderr
    assert data["speedup"] > 1.2 and len(data["trials"]) <= 4
    assert "[1/" in proc.stderr and "samples/s" in proc.stderr  # progress lines
    assert data["improves"] and data["interval"], proc.stdout
    lo, hi = data["interval"]
    assert lo < data["speedup"] < hi
    cfg = load_config(tmp_path / "pitstop.toml")
    workers = cfg.dataloader.num_workers
    assert workers and workers > 0
    assert "pitstop run --config" in (tmp_path / "pitstop.toml").read_text()
    assert cfg.provenance["speedup"] == pytest.approx(data["speedup"], rel=1e-3)
    assert cfg.provenance["speedup_interval"] == pytest.approx([lo, hi], rel=1e-3)
    assert "tune_train.py" in cfg.provenance["script"]
    # The user's check, alternating A/B: the script's own settings, then the written config,
    # which changes the script's DataLoader with no code change.
    ratios = []
    for i in range(2):
        base = _throughput(tmp_path, f"base{i}", [], [*script, "--n", "240"])
        tuned = _throughput(tmp_path, f"tuned{i}", ["--config", str(tmp_path / "pitstop.toml")],
                            [*script, "--n", "240"])
        ratios.append(tuned / base)
    loaders = [e for e in iter_record(tmp_path / "tuned0.jsonl") if isinstance(e, DataLoaderInfo)]
    assert loaders and loaders[0].num_workers == workers
    assert loaders[0].overrides.get("num_workers") == workers
    remeasured = (ratios[0] * ratios[1]) ** 0.5
    # The interval is a 90% claim: one re-measure in ten lands outside it by design (CI once saw
    # 2.27x against [1.85, 2.26], the tune having run beside other tests). Asserting it on a single
    # re-measure would fail one CI run in twenty; the same claim read at 99% (its half-width
    # x2.576/1.645) fails one in a hundred, and still fails a point, a biased or a too-narrow claim.
    centre = (lo * hi) ** 0.5
    half = math.log(hi / centre) * Z99 / Z90
    assert centre * math.exp(-half) <= remeasured <= centre * math.exp(half), (ratios, lo, hi, proc.stdout)
