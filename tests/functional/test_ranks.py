"""Pilot tests of the job views: the Ranks screen, job figures on the Overview, and `t` (tune) in the run viewer."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from conftest import FIXED, FakeSource, job_batches, rank_stream, replay_source, run, run_events, screen_text, wait_for
from textual.widgets import DataTable

from pitstop.analysis import StreamBatch
from pitstop.events import End, Hello, Step
from pitstop.profiling.record import RecordWriter
from pitstop.profiling.sources import RecordSource
from pitstop.tui.app import PitstopApp
from pitstop.tui.screens import ConfirmScreen, OverviewScreen, RanksScreen


def notices(app: PitstopApp) -> list[tuple[str, str]]:
    return [(n.message, n.severity) for n in app._notifications]


def table_rows(app: PitstopApp) -> list[list[str]]:
    table = app.screen.query_one("#ranks-table", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def test_the_ranks_screen_names_and_highlights_the_straggler_and_shows_a_dead_rank_as_gone() -> None:
    async def scenario() -> None:
        source = FakeSource(batches=job_batches(ranks=3, slow_rank=1))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(app.job.runs) == 3)
            await pilot.press("6")
            await wait_for(pilot, lambda: isinstance(app.screen, RanksScreen))
            await wait_for(pilot, lambda: "Straggler rank 1" in screen_text(app))
            text = screen_text(app)
            assert "extra time is compute" in text and "250.0 ms per step vs median 100.0 ms" in text
            rows = table_rows(app)
            # The rank column shows the rank (issue 12: it showed "pid 23913" outside a launcher).
            assert [r[0] for r in rows] == ["0", "1 ◀ straggler", "2"]
            table = app.screen.query_one("#ranks-table", DataTable)
            assert "red" in str(table.get_row_at(1)[0].style) and "red" not in str(table.get_row_at(0)[0].style)
            assert all(r[2] == "running" for r in rows)  # one host: no host column (its name is above)
            # Rank 2 dies: its stream closes without an End event.
            source._queue.put(StreamBatch(rank_stream(2), [], closed=True))
            await wait_for(pilot, lambda: "rank 2 is gone" in screen_text(app))
            assert table_rows(app)[2][2] == "gone"  # and under the table, how it ended
            # Sorting by step p50 (numbers high first) puts the straggler on top.
            for _ in range(4):  # rank, pid, status, step, step p50
                await pilot.press("s")
            await wait_for(pilot, lambda: table_rows(app)[0][0].startswith("1"))
            assert "step p50 ▼" in screen_text(app)
            await pilot.press("1")
            await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen))
            await wait_for(pilot, lambda: "rank 1 is a straggler (compute)" in screen_text(app))
            text = screen_text(app)
            assert "job samples/s" in text and "straggler rank 1" in text and "ranks 3, 1 gone" in text

    run(scenario())


def test_with_one_rank_the_ranks_screen_says_so() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=20))
        app = PitstopApp(source, clock=lambda: FIXED + 30)
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("6")
            await wait_for(pilot, lambda: "One process in this job" in screen_text(app))
            assert "job samples/s" not in screen_text(app)

    run(scenario())


def test_t_asks_before_tuning_and_tune_exits_the_viewer_with_the_scripts_argv() -> None:
    async def scenario() -> None:
        source = FakeSource()
        source.push(run_events(n_steps=20))
        app = PitstopApp(source, clock=lambda: FIXED + 30, can_tune=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.current_run()[1] is not None)
            await pilot.press("t")
            await wait_for(pilot, lambda: "Tune train.py?" in screen_text(app))
            text = screen_text(app)
            assert "Tune train.py?" in text and "compete" in text and "Cancel (n)" in text and "Tune (y)" in text
            await pilot.press("n")
            await wait_for(pilot, lambda: ("not tuning", "information") in notices(app))
            assert app.return_value is None
            await pilot.press("t")
            await wait_for(pilot, lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("y")
        assert app.return_value == "tune"
        assert app.tune_request is not None and app.tune_request.argv == ("python", "train.py")
        assert app.tune_request.cwd == "/work" and app.tune_request.ranks == 1

    run(scenario())


def test_a_replay_does_not_offer_to_tune() -> None:
    async def scenario() -> None:
        app = PitstopApp(replay_source(run_events(n_steps=20)), clock=lambda: FIXED + 30, can_tune=True)
        async with app.run_test(size=(80, 24)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None)
            await pilot.press("t")
            await wait_for(pilot, lambda: any("a recording cannot be tuned" in m for m, _ in notices(app)))
            assert not isinstance(app.screen, ConfirmScreen)

    run(scenario())


def test_a_mild_straggler_is_shown_with_the_phase_its_extra_time_is_in() -> None:
    # Equal 44 ms steps; rank 1's optimizer takes 19.9 ms against rank 0's 6.6 ms, and rank 0
    # waits those 13.3 ms in its backward (DDP's all-reduce).
    batches = []
    for r in range(2):
        slow = 0.0133 if r == 1 else 0.0
        events = [replace(e, forward_s=0.005, backward_s=0.0317 - slow, optimizer_s=0.0066 + slow, other_s=0.0007,
                          phase_clock="host") if isinstance(e, Step) else e
                  for e in run_events(rank=r, pid=4242 + r, wall=0.044, wait_frac=0.0, n_steps=120, profiles=0)]
        batches.append(StreamBatch(rank_stream(r), events))

    async def scenario() -> None:
        app = PitstopApp(FakeSource(batches=batches), clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: len(app.job.runs) == 2)
            await pilot.press("6")
            await wait_for(pilot, lambda: "Straggler rank 1" in screen_text(app))
            assert "rank 1: optimizer +13.3 ms per step (19.9 ms vs median 6.6 ms" in screen_text(app)
            await pilot.press("1")
            await wait_for(pilot, lambda: "straggler rank 1 (optimizer)" in screen_text(app))

    run(scenario())


def _write_node(directory: Path, rank: int, node: str) -> None:
    """One node's record directory of a 2-node torchrun job: its launcher's own session, the job's id."""
    events = run_events(rank=rank, pid=4242 + rank, wall=0.25 if rank == 1 else 0.1, profiles=0)
    first = events[0]
    assert isinstance(first, Hello)
    # Both "nodes" on one host, as the integration test's launchers are: the column must show the node.
    events[0] = replace(first, session=f"s-{node}", world_size=2, job="torchrun:none@10.0.0.1:29500", node=node,
                        node_rank=rank, nodes=2, local_world_size=1, store="10.0.0.1:29500")
    events.append(End(t=FIXED + 40, steps=120, dropped=0))
    writer = RecordWriter(directory / f"rank{rank}.jsonl.gz")
    writer.write_events(events)
    writer.close()


def test_the_ranks_screen_of_a_recorded_two_node_job_shows_each_ranks_node(tmp_path: Path) -> None:
    # `pitstop view NODE0 NODE1`: each node's launcher wrote its own directory (its own session);
    # the job is one, and the Ranks screen says which node each rank ran on.
    nodes = [tmp_path / "node0", tmp_path / "node1"]
    _write_node(nodes[0], 0, "gpu-a")
    _write_node(nodes[1], 1, "gpu-b")

    async def scenario() -> None:
        app = PitstopApp(RecordSource(nodes), clock=lambda: FIXED + 30)
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: app.timeline is not None and len(app.job.runs) == 2)
            await pilot.press("6")
            await wait_for(pilot, lambda: isinstance(app.screen, RanksScreen))
            await wait_for(pilot, lambda: "Straggler rank 1" in screen_text(app))
            assert "2 ranks of world size 2" in screen_text(app)
            assert [r[3] for r in table_rows(app)] == ["finished", "finished"]
            table = app.screen.query_one("#ranks-table", DataTable)
            titles = [str(c.label) for c in table.columns.values()]
            assert titles[:2] == ["rank ▲", "node"]
            assert [r[:2] for r in table_rows(app)] == [["0", "gpu-a"], ["1 ◀ straggler", "gpu-b"]]
            await pilot.press("s")  # sorted by node: A-Z
            await wait_for(pilot, lambda: "node ▲" in screen_text(app))
            assert [r[1] for r in table_rows(app)] == ["gpu-a", "gpu-b"]

    run(scenario())
