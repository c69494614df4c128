"""Tests the tune journal's record format: versions, --resume of older and newer journals, and the view's follower."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pitstop.cli import main
from pitstop.errors import TuneError
from pitstop.tui.trialdata import JournalFollower, read_journal
from pitstop.tuning.journal import Journal, JournaledEvaluator
from pitstop.tuning.journalformat import (
    JOURNAL_VERSION,
    Start,
    Totals,
    TrialEnd,
    TrialProgress,
    TrialStart,
    TuneEnd,
    decode,
    encode,
)
from pitstop.tuning.results import Candidate, TrialResult

HEADER = {"target": "python t.py", "steps": 30}
T0 = 1_700_000_000.0


def result(workers: int, throughput: float | None) -> TrialResult:
    return TrialResult(Candidate.of({"num_workers": workers}) if workers else Candidate(), 30,
                       "workers" if workers else "baseline", "ok" if throughput else "nan",
                       throughput=throughput, duration=2.0)


def test_every_record_comes_back_as_written() -> None:
    totals = Totals(done=2, planned=9, budget_left="4m10s of 10m00s", eta=250.0, budget_seconds=600.0,
                    used_trials=2, used_seconds=350.0)
    records = [
        Start(T0, "10m", 2, 4242, totals),
        TrialStart(T0 + 1, 3, "workers=2", "workers", 35, 100.0, None, totals),
        TrialProgress(T0 + 2, 3, 12, 35, 1.5),
        TuneEnd(T0 + 9, "finished", 0, "", "workers=2", {"num_workers": 2}, True, 1.4, (1.3, 1.5), True,
                "pitstop.toml", "", None, ("Winner: workers=2", ""), totals),
    ]
    for rec in records:
        line = json.dumps(encode(rec), allow_nan=False)
        assert decode(json.loads(line)) == rec
    end = encode(TrialEnd("w2", 30, 1, result(2, float("nan"))))
    assert end["kind"] == "trial" and end["result"]["throughput"] is None  # JSON has no NaN
    back = decode(json.loads(json.dumps(end)))
    assert isinstance(back, TrialEnd) and (back.key, back.steps, back.occurrence) == ("w2", 30, 1)
    assert back.result.candidate.label() == "workers=2" and back.result.throughput is None
    assert decode({"kind": "a kind from a later pitstop", "x": 1}) is None
    assert decode({"kind": "trial_progress", "at": T0, "index": 1, "steps_done": 3, "steps_planned": 9,
                   "elapsed": 1.0, "added_later": True}) == TrialProgress(T0, 1, 3, 9, 1.0)


def write_v1(path: Path, results: list[TrialResult], version: object = 1) -> None:
    """A journal as pitstop wrote it before records had kinds beyond header and trial."""
    header: dict[str, object] = {**HEADER, "kind": "header"}
    if version is not None:
        header["version"] = version
    lines = [header] + [{"kind": "trial", "key": r.candidate.key(), "steps": r.steps, "occurrence": 0,
                         "result": r.to_dict()} for r in results]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


@pytest.mark.parametrize("version", [1, None])
def test_resume_reads_a_version_1_journal_and_carries_on_in_version_2(tmp_path: Path, version: object) -> None:
    path = tmp_path / "j.journal.jsonl"
    write_v1(path, [result(0, 100.0), result(2, 150.0)], version)
    runs: list[Candidate] = []

    def evaluate(c: Candidate, n: int, stage: str) -> TrialResult:
        runs.append(c)
        return result(4, 180.0)

    journal = Journal(path, HEADER, resume=True)
    replay = JournaledEvaluator(journal, evaluate)
    old = [replay(Candidate(), 30, "baseline"), replay(Candidate.of({"num_workers": 2}), 30, "workers")]
    assert [r.throughput for r in old] == [100.0, 150.0] and runs == []  # nothing run again
    replay(Candidate.of({"num_workers": 4}), 30, "workers")
    assert len(runs) == 1
    state = read_journal(path)
    assert state.header is not None and state.header["version"] == JOURNAL_VERSION
    assert [r.label for r in state.rows] == ["baseline", "workers=2", "workers=4"]


def test_a_journal_of_an_unknown_version_is_one_line_naming_it(tmp_path: Path,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "j.journal.jsonl"
    write_v1(path, [result(0, 100.0)], version=7)
    with pytest.raises(TuneError, match="cannot resume: journal format version 7, and this pitstop reads "
                                        "versions 1, 2; --force starts afresh"):
        Journal(path, HEADER, resume=True)
    with pytest.raises(TuneError, match="journal format version 7") as err:
        Journal(path, HEADER)  # without --resume: it does not suggest --resume, which would refuse it
    assert "--resume" not in str(err.value)
    (tmp_path / "train.py").write_text("")
    code = main(["tune", "--resume", "--journal", str(path), "--out", str(tmp_path / "p.toml"),
                 str(tmp_path / "train.py")])
    said = capsys.readouterr().err.strip()
    assert code == 2 and "\n" not in said and "journal format version 7" in said
    assert Journal(path, HEADER, force=True).entries == {}  # --force starts afresh


def test_the_follower_reads_each_whole_line_once_and_starts_over_when_the_journal_is_replaced(
        tmp_path: Path) -> None:
    path = tmp_path / "j.journal.jsonl"
    follower = JournalFollower(path)
    assert follower.poll() is None  # not there yet
    journal = Journal(path, HEADER)
    journal.record(Start(T0, "6", 0, 1, Totals(planned=6)))
    state = follower.poll()
    assert state is not None and state.start is not None and state.planned == 6
    assert follower.poll() is None  # nothing new
    journal.append(result(0, 100.0), 0)
    line = json.dumps(encode(TrialStart(T0 + 3, 2, "workers=2", "workers", 35, 60.0, None, Totals(done=1))))
    with open(path, "a") as handle:
        handle.write(line[:20])  # the tuner is writing this line
    state = follower.poll()
    assert state is not None and len(state.rows) == 1 and state.running is None and state.unreadable == 0
    with open(path, "a") as handle:
        handle.write(line[20:] + "\n")
    state = follower.poll()
    assert state is not None and state.running is not None and state.running.label == "workers=2"
    journal.record(TrialProgress(T0 + 4, 2, 20, 35, 1.0))
    journal.record(TrialProgress(T0 + 5, 1, 99, 99, 9.0))  # not the running trial's: ignored
    state = follower.poll()
    assert state is not None and state.steps == TrialProgress(T0 + 4, 2, 20, 35, 1.0)
    # A fresh tune (--force) replaces the file: what the follower had is gone.
    Journal(path, HEADER, force=True)
    state = follower.poll()
    assert state is not None and state.rows == () and state.start is None


def test_a_resumed_tune_shows_its_earlier_trials_and_not_its_earlier_end(tmp_path: Path) -> None:
    path = tmp_path / "j.journal.jsonl"
    journal = Journal(path, HEADER)
    journal.record(Start(T0, "6", 0, 1, Totals(planned=6)))
    journal.append(result(0, 100.0), 0)
    journal.record(TrialStart(T0 + 3, 2, "workers=2", "workers", 35, 60.0, None, Totals(done=1)))
    journal.record(TuneEnd(T0 + 4, "interrupted", 130, "interrupted", report=("interrupted",)))
    assert read_journal(path).end is not None
    resumed = Journal(path, HEADER, resume=True)
    resumed.record(Start(T0 + 60, "6", 1, 2, Totals(done=0, planned=6)))
    state = read_journal(path)
    assert state.end is None and state.running is None and [r.label for r in state.rows] == ["baseline"]
    assert state.start is not None and state.start.resumed == 1 and state.done == 1
