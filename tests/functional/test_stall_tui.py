"""A stuck job in the viewer: a red banner on every screen with the cause, and `w` shows each rank's stacks."""

from __future__ import annotations

import dataclasses

from conftest import FIXED, FakeSource, hello, job_batches, rank_stream, run, runtime, sample, screen_text, wait_for

from pitstop.events import Frame, Hello, Stall, ThreadStack
from pitstop.streams import StreamBatch
from pitstop.tui.app import PitstopApp
from pitstop.tui.screens import DataScreen, OverviewScreen
from pitstop.tui.screens.stacks import StacksScreen

LIB = "/usr/lib/python3.11/site-packages/torch"


def _stall(rank: int, frames: list[Frame]) -> Stall:
    return Stall(t=FIXED + 100.0, phase="start", step=119, since_s=70.0, threshold_s=60.0,
                 stacks=[ThreadStack(pid=4242 + rank, role="main", frames=frames, state="S")])


DATASET = [Frame("main", "/work/hang.py", 30, code="for x, y in loader:"),
           Frame("_BaseDataLoaderIter.__next__", f"{LIB}/utils/data/dataloader.py", 631, library=True),
           Frame("D.__getitem__", "/work/hang.py", 11, code="time.sleep(3600)")]
BACKWARD = [Frame("main", "/work/hang.py", 33, code="loss.backward()"),
            Frame("_engine_run_backward", f"{LIB}/autograd/graph.py", 823, library=True)]


def test_a_stuck_job_shows_a_banner_on_every_screen_and_w_shows_the_stacks() -> None:
    batches = job_batches(slow_rank=-1)
    # world size 2: the ranks are one distributed job
    batches = [StreamBatch(b.stream, [dataclasses.replace(e, world_size=2) if isinstance(e, Hello) else e
                                      for e in b.events]) for b in batches]
    batches.append(StreamBatch(rank_stream(0), [_stall(0, BACKWARD)]))
    batches.append(StreamBatch(rank_stream(1), [_stall(1, DATASET)]))
    source = FakeSource(batches=batches)
    app = PitstopApp(source, clock=lambda: FIXED + 110)  # type: ignore[arg-type]
    cause = "rank 1 is blocked in D.__getitem__ (hang.py:11: time.sleep(3600))"

    async def scenario() -> None:
        async with app.run_test(size=(120, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen) and cause in screen_text(app))
            text = screen_text(app)
            assert "STUCK stuck for 1m" in text and "after step 119" in text
            await wait_for(pilot, lambda: "w Waits" in screen_text(app))  # the key, in the footer while stuck
            assert "rank 0 waits in all_reduce (DDP backward) for rank 1" in text
            await pilot.press("3")
            await wait_for(pilot, lambda: isinstance(app.screen, DataScreen) and cause in screen_text(app))
            await pilot.press("w")
            await wait_for(pilot, lambda: isinstance(app.screen, StacksScreen)
                           and "hang.py:11 D.__getitem__   time.sleep(3600)" in screen_text(app))
            assert "hang.py:33 main   loss.backward()" in screen_text(app)
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, DataScreen))

    run(scenario())


def test_a_rank_read_from_outside_while_it_held_the_gil_is_named_in_the_banner() -> None:
    batches = job_batches(slow_rank=-1)
    batches = [StreamBatch(b.stream, [dataclasses.replace(e, world_size=2) if isinstance(e, Hello) else e
                                      for e in b.events]) for b in batches]
    batches.append(StreamBatch(rank_stream(0), [_stall(0, BACKWARD)]))
    # What the front's silence watch adds to rank 1's stream: its agent was silent, py-spy read it.
    native = [Frame("main", "/work/hang.py", 27, code="libc.sleep(3600)"),
              Frame("clock_nanosleep", "libc.so.6", None, library=True)]
    held = Stall(t=FIXED + 100.0, phase="start", step=119, since_s=70.0, threshold_s=60.0, by="front",
                 stacks=[ThreadStack(pid=4243, role="main", how="py-spy", frames=native, state="S", native=True)])
    batches.append(StreamBatch(rank_stream(1), [held]))
    app = PitstopApp(FakeSource(batches=batches), clock=lambda: FIXED + 110)  # type: ignore[arg-type]
    cause = "rank 1 holds the GIL in native code: main (hang.py:27: libc.sleep(3600)), in clock_nanosleep (libc.so.6)"

    async def scenario() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, OverviewScreen) and cause in screen_text(app))
            await pilot.press("w")
            await wait_for(pilot, lambda: isinstance(app.screen, StacksScreen)
                           and "read by py-spy, state S, holding the GIL (native code)" in screen_text(app))

    run(scenario())


def test_a_process_with_no_first_step_is_said_as_a_wait_on_every_screen() -> None:
    # Its dataset's __init__ waits: no step ever came, so it is a wait for the first step, not "stuck".
    frames = [Frame("main", "/work/hang.py", 28, code="data = DataLoader(Mounted())"),
              Frame("Mounted.__init__", "/work/hang.py", 16, code="self.index = read_index()"),
              Frame("read_index", "/work/hang.py", 10, code="time.sleep(3600)")]
    wait = Stall(t=FIXED + 310.0, phase="start", step=0, since_s=305.0, threshold_s=300.0, first=True,
                 stacks=[ThreadStack(pid=4242, role="main", frames=frames, state="S")])
    events = [hello(), runtime(cuda=False), sample(FIXED + 300.0, cuda=False, workers=0), wait]
    app = PitstopApp(FakeSource(batches=[StreamBatch("run", events)]),  # type: ignore[arg-type]
                     clock=lambda: FIXED + 320)
    said = "WAITING no first step after 5m"

    async def scenario() -> None:
        async with app.run_test(size=(160, 40)) as pilot:
            await wait_for(pilot, lambda: said in screen_text(app))
            assert "is in read_index (hang.py:10: time.sleep(3600))" in screen_text(app)
            assert "STUCK" not in screen_text(app)
            await pilot.press("3")
            await wait_for(pilot, lambda: isinstance(app.screen, DataScreen) and said in screen_text(app))
            await pilot.press("w")
            await wait_for(pilot, lambda: isinstance(app.screen, StacksScreen)
                           and "hang.py:10 read_index   time.sleep(3600)" in screen_text(app))

    run(scenario())
