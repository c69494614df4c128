"""The index saved beside a record: written when a record is read, used by the next reader, never trusted over the record."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from pitstop.analysis import _state
from pitstop.events import encode
from pitstop.headless import summary_text
from pitstop.profiling import record as record_module
from pitstop.recorded import _index, _sidecar, load_runs
from tests.unit.test_replay import _events, _write


@pytest.fixture
def small_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """Windows and checkpoints a few hundred events apart, so a test-sized record has many of them."""
    monkeypatch.setattr(_index, "CHECKPOINT_EVENTS", 97)
    monkeypatch.setattr(_index, "STEP_STRIDE", 8)
    monkeypatch.setattr(_state, "MAX_STEPS", 60)
    monkeypatch.setattr(_state, "MAX_SAMPLES", 15)
    monkeypatch.setattr(_state, "MAX_LOSSES", 20)
    monkeypatch.setattr(_state, "MAX_PROFILES", 3)
    monkeypatch.setattr(_state, "MAX_NOTES", 2)


def _summary(path: Path) -> str:
    runs, notes = load_runs(path)
    return summary_text(runs, notes)


def _decoded_lines(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """A counter of the record lines decoded from now on (the reader's one decode function)."""
    count = [0]
    decode = record_module.decode_events

    def counting(raw: bytes) -> object:
        count[0] += 1
        return decode(raw)

    monkeypatch.setattr(record_module, "decode_events", counting)
    return count


def _fresh(path: Path, tmp_path: Path) -> str:
    """The summary of a copy of `path` read whole (no index beside it), named as `path`."""
    copy = tmp_path / "fresh" / path.name
    copy.parent.mkdir(exist_ok=True)
    shutil.copyfile(path, copy)
    return _summary(copy).replace(str(copy), str(path))


@pytest.mark.usefixtures("small_windows")
def test_a_second_read_restores_the_index_and_prints_the_same_summary(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank0.jsonl"
    _write(path, _events(900, rank=0))
    lines = len(path.read_bytes().splitlines())
    first = _summary(path)
    assert _sidecar.index_path(path).exists()  # written by the first reader
    decoded = _decoded_lines(monkeypatch)
    again = _summary(path)
    assert again == first
    # Only one window of recent history is read back (60 steps, 15 samples, ...), not the record.
    assert 0 < decoded[0] < lines / 4, (decoded[0], lines)


@pytest.mark.usefixtures("small_windows")
def test_a_record_killed_after_its_index_was_saved_is_read_to_its_end_and_the_index_rebuilt(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "rank0.jsonl"
    events = _events(900, rank=0)
    _write(path, events[:1200], end=False)
    _summary(path)  # the index of the first part
    covered = _sidecar.index_path(path).stat().st_size
    with open(path, "a") as handle:  # the run went on, then was killed with SIGKILL mid-line
        handle.write("".join(encode(e) + "\n" for e in events[1200:]) + '{"kind":"step","t":17000')
    got = _summary(path)
    assert "ends in a cut line" in got
    assert got == _fresh(path, tmp_path)
    assert _sidecar.index_path(path).stat().st_size != covered  # rebuilt to the record's last whole line
    decoded = _decoded_lines(monkeypatch)
    assert _summary(path) == got and decoded[0] < len(events) / 4  # and used


@pytest.mark.usefixtures("small_windows")
def test_an_index_that_disagrees_with_the_record_is_set_aside(tmp_path: Path) -> None:
    path = tmp_path / "rank0.jsonl"
    _write(path, _events(900, rank=0))
    _summary(path)
    index = _sidecar.index_path(path).read_bytes()
    path.unlink()
    _write(path, _events(900, rank=0, wall=0.02))  # another run under the same name, the old index beside it
    _sidecar.index_path(path).write_bytes(index)
    assert _summary(path) == _fresh(path, tmp_path)
    whole = path.read_bytes()  # the same length, one value changed between two checkpoints
    at = whole.index(b'"step":500,')
    path.write_bytes(whole[:at] + b'"step":599,' + whole[at + 11:])
    assert _summary(path) == _fresh(path, tmp_path)


@pytest.mark.usefixtures("small_windows")
def test_the_viewer_opens_a_record_from_its_index_and_seeks_as_before(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.unit.test_replay import _linear, _state_of
    from pitstop.tui.replay import Timeline

    files = [tmp_path / "rank0.jsonl", tmp_path / "rank1.jsonl"]
    _write(files[0], _events(900, rank=0))
    _write(files[1], _events(600, rank=1, wall=0.012), end=False)
    Timeline.of_files(files)  # the first viewer indexes the records and saves their indexes
    decoded = _decoded_lines(monkeypatch)
    tl = Timeline.of_files(files)
    assert decoded[0] < sum(len(f.read_bytes().splitlines()) for f in files) / 4
    for cursor in (tl.end, tl.start, (tl.start + tl.end) / 2, tl.profile_times[3], tl.end):
        assert _state_of(tl.seek(cursor)) == _state_of(_linear(files, cursor)), cursor


@pytest.mark.usefixtures("small_windows")
def test_the_keeper_indexes_a_growing_record_in_passes_and_a_reader_then_reads_only_what_came_after(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from pitstop.keeper import Keeper

    path = tmp_path / "rank0.jsonl"
    events = _events(900, rank=0)
    cuts = [0, 400, 401, 1100, len(events)]  # a pass with one new line, one with none
    keeper = Keeper(path)
    for a, b in zip(cuts, cuts[1:]):
        with open(path, "a") as handle:  # the agent appends as the run goes
            handle.write("".join(encode(e) + "\n" for e in events[a:b]))
        assert keeper.step() == b - a
        assert keeper.step() == 0  # nothing new: nothing folded, nothing saved
    index = keeper.indexes[path]
    regular = [ck for ck in index.checkpoints[1:-1]]
    assert all(ck.fed % index.every == 0 for ck in regular)  # the passes' end checkpoints do not pile up
    # It folds totals and positions, holding no window of events (64 ranks' windows were 2.5 GiB).
    assert index.run.total_steps == 900 and not (index.run.steps or index.run.samples or index.run.losses)
    with open(path, "a") as handle:  # the last lines, after the keeper's last pass: a SIGKILL then
        handle.write('{"kind":"step","t":17000')
    decoded = _decoded_lines(monkeypatch)
    got = _summary(path)
    assert decoded[0] < len(events) / 4  # the keeper's index was used: one window read back
    assert got == _fresh(path, tmp_path)  # and it prints what a whole pass prints


@pytest.mark.usefixtures("small_windows")
def test_a_reader_builds_only_the_checkpoints_it_restores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A day-long record has ~1,800 checkpoints: building each one's RunState as the
    # index loaded took most of a 24-hour record's summary.
    path = tmp_path / "rank0.jsonl"
    _write(path, _events(900, rank=0))
    first = _summary(path)
    built = [0]
    restore = _state.RunState.from_checkpoint

    def counting(data: dict,  # type: ignore[type-arg]
                 decoder: Callable[[str], object] | None = None) -> _state.RunState:
        built[0] += 1
        return restore(data, decoder)

    monkeypatch.setattr(_state.RunState, "from_checkpoint", staticmethod(counting))
    assert _summary(path) == first
    assert built[0] == 1, built[0]  # the last one, restored; not the ~30 others saved


@pytest.mark.usefixtures("small_windows")
def test_an_index_saved_by_a_runstate_with_other_fields_is_set_aside(tmp_path: Path) -> None:
    # An index whose checkpoints lack a field RunState has now (one saved before the field came, under the same
    # FORMAT): `view --summary` raised "ValueError: an index of another pitstop version" instead of reading the record.
    import gzip
    import json

    path = tmp_path / "rank0.jsonl"
    _write(path, _events(900, rank=0))
    first = _summary(path)
    index = _sidecar.index_path(path)
    doc = json.loads(gzip.decompress(index.read_bytes()))
    for checkpoint in doc["checkpoints"]:
        checkpoint["state"].pop("other_nonfinite_total", None)
    index.write_bytes(gzip.compress(json.dumps(doc).encode()))
    assert _summary(path) == first
