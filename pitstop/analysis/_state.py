"""Provides RunState: the bounded accumulator of one training process's event stream."""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any

from pitstop.events import (
    Applied,
    DataLoaderInfo,
    End,
    Event,
    Hello,
    Loss,
    Model,
    Note,
    ProfileWindow,
    Rank,
    Runtime,
    Sample,
    Stall,
    Step,
    decode,
    encode,
)
from pitstop.streams import StreamBatch  # defined beside the sources' other types; re-exported by pitstop.analysis

# ~20000 steps of ~300 bytes each is ~6 MB per process: hours of fast steps,
# enough for honest percentiles, and bounded for a run that goes on for days.
# Steps 0..2 pay for CUDA context set-up, cudnn autotuning, allocator growth and
# worker start-up; leaving them out keeps advice about the steady state.
WARMUP = 3
MAX_STEPS = 20_000
# One sample per 0.5-1 s: 3600 samples is 30-60 minutes of GPU/CPU history.
MAX_SAMPLES = 3_600
MAX_LOSSES = 20_000
# A profile window holds top-N tables (a few KB); 50 covers every window of a
# typical run with the default schedule and keeps memory small.
MAX_PROFILES = 50
MAX_NOTES = 500
# Only the first non-finite steps matter for advice ("first NaN at step 412");
# the rest are counted.
MAX_NONFINITE_KEPT = 1_000
# The event kinds RunState keeps a bounded recent history of (its "series");
# everything else it keeps is a running total or the latest event of a kind.
SERIES = ("step", "sample", "loss", "profile", "note")
# Steps with an index below this are also kept in `head`, so totals that survive
# the deque bound can still drop any warm-up of up to this many steps.
HEAD_STEPS = 64


@functools.lru_cache(maxsize=1 << 15)  # a window of MAX_STEPS (20,000) fits; a part is 352 bytes (getsizeof)
def training_part(step: Step) -> Step:
    """A step marked eval as the training step it holds: its wall and `other_s` less the evaluation
    (its anatomy's other phases never count an evaluation: an eval stretch ends a phase).

    Cached, and built without `dataclasses.replace` (13 us a step): the figures ask for the
    window's 20,000 steps several times a second, 261 ms a call before."""
    part = object.__new__(Step)
    fields = part.__dict__
    fields.update(step.__dict__)
    fields["wall"] = max(0.0, step.wall - step.eval_s)
    fields["mark"], fields["eval_s"] = None, 0.0
    if step.other_s is not None:
        fields["other_s"] = max(0.0, step.other_s - step.eval_s)
    return part


class RunState:
    """Bounded accumulator of the events of ONE training process.

    Deques hold recent history; the running totals (`total_*`, `peak_*`,
    `first_step_t`, ...) cover the whole stream and survive the deque bounds.
    `version` grows by one on each `add`, so a viewer redraws only on change.
    """

    def __init__(self, max_steps: int | None = None) -> None:
        self.version = 0
        self.hello: Hello | None = None
        self.runtime: Runtime | None = None
        self.model: Model | None = None
        self.model_starts: list[float] = []  # Model.t of each Model event with a new optimizer
        self.end: End | None = None
        self.applied: Applied | None = None
        # An exporter inside the training process keeps fewer (see profiling/prometheus.py);
        # MAX_STEPS is read at call time so tests can shrink it.
        self.steps: deque[Step] = deque(maxlen=max(1, MAX_STEPS if max_steps is None else max_steps))
        self.head: list[Step] = []  # steps with index < HEAD_STEPS (warm-up accounting)
        self.samples: deque[Sample] = deque(maxlen=MAX_SAMPLES)
        # An OrderedDict: trimming the oldest of a plain dict (`next(iter(d))`) walks the
        # deleted slots at its front: ~100 us a Loss event once 20,000 are kept, 10 with popitem.
        self.losses: OrderedDict[int, float | None] = OrderedDict()
        self.losses_read = 0  # steps whose loss the agent read (at fast steps one every 10 ms: docs/events.md)
        # [step, value]: the second optimizer's latest finite loss (a GAN's G: `Loss.optimizer` 2), kept apart
        # from `losses` (the step's, the clock's optimizer's); None where no second optimizer's loss was read.
        self.other_loss: list[float] | None = None
        self.nonfinite_steps: list[int] = []
        self.nonfinite_total = 0
        self._nonfinite_seen: set[int] = set()
        # The same for the second optimizer's losses (a GAN's G): its NaN ends the training as surely as D's.
        self.other_nonfinite_steps: list[int] = []
        self.other_nonfinite_total = 0
        self._other_nonfinite_seen: set[int] = set()
        self.profiles: deque[ProfileWindow] = deque(maxlen=MAX_PROFILES)
        self.dataloaders: dict[int, DataLoaderInfo] = {}
        self.notes: deque[Note] = deque(maxlen=MAX_NOTES)
        self.unknown_events = 0
        # Running totals over every step seen.
        # total_steps counts every step; the other step totals count training steps
        # only: a marked step (an eval pass, a profiler window) is kept out of
        # throughput and step statistics (DESIGN rule 7) and counted in `marked`.
        self.total_steps = 0
        self.train_steps = 0
        self.marked: dict[str, int] = {}  # Step.mark -> steps
        self.eval_steps = 0  # steps marked "eval"
        self.eval_step_passes = 0  # the evaluation passes in them (`Step.passes`; one a step in older records)
        # Steps holding a policy's rollouts (marked "rollout"), the rollouts and their seconds: the
        # data the updates train on, not evaluation (`profiling/_passes.py` says how they are told).
        self.rollout_steps = 0
        self.rollout_step_count = 0
        self.rollout_steps_s = 0.0
        self.eval_wall = 0.0  # their wall time
        self.eval_steps_s = 0.0  # time spent evaluating inside them (Step.eval_s)
        # Their training part, past the warm-up: wall less `eval_s`, the training loader's wait and
        # samples. It counts in throughput and data wait: ignite restarts its training DataLoader's
        # workers after each evaluation (8 s a time, in the step marked eval), and a run of 167
        # samples/s read 2,920 with its data wait left out.
        self.eval_train_steps = 0
        self.eval_train_wall = 0.0
        self.eval_train_wait = 0.0
        self.eval_train_samples = 0
        self.eval_train_known = 0  # of those steps, the ones with samples
        self.total_wall = 0.0
        self.total_data_wait = 0.0
        self.total_samples = 0
        self.steps_with_samples = 0
        self.first_step_t: float | None = None  # end time of the first step seen
        self.first_step_start: float | None = None  # first step's end minus its wall
        self.last_step_t: float | None = None
        self.last_step: int | None = None  # index of the latest step
        self.first_t: float | None = None  # earliest time stamp of any event
        self.last_t: float | None = None  # latest time stamp of any event
        self.peak_mem_allocated: int | None = None
        self.peak_mem_reserved: int | None = None
        self.peak_rss: int | None = None
        # Running totals over every sample seen.
        self.total_sample_count = 0
        self.gpu_util_sum = 0.0
        self.gpu_util_n = 0
        self.gpu_power_sum = 0.0
        self.gpu_power_n = 0
        self.gpu_mem_peak: int | None = None
        self.gpu_mem_total: int | None = None
        self.cpu_main_sum = 0.0
        self.cpu_main_n = 0
        self.cpu_workers_sum = 0.0  # summed over workers, per sample
        self.cpu_workers_n = 0
        self.workers_max = 0  # most DataLoader worker processes seen at once
        self.system_cpu_sum = 0.0
        self.system_cpu_n = 0
        self.first_alloc_retries: int | None = None
        self.last_alloc_retries: int | None = None
        self.last_ooms: int | None = None
        # The latest Stall event and the latest one with stacks (analysis/_stall.py).
        self.stall: Stall | None = None
        self.stall_stacks: Stall | None = None

    # -- feeding ----------------------------------------------------------
    def add(self, event: Event) -> None:
        """Take one event of any kind; unknown objects are counted, never raised on."""
        self.version += 1
        t = getattr(event, "t", None)
        if isinstance(t, (int, float)) and math.isfinite(t):
            self._stamp(float(t))
        if isinstance(event, Step):
            self._add_step(event)
        elif isinstance(event, Sample):
            self._add_sample(event)
        elif isinstance(event, Loss):
            self._add_loss(event)
        elif isinstance(event, ProfileWindow):
            self.profiles.append(event)
        elif isinstance(event, DataLoaderInfo):
            self.dataloaders[event.id] = event
        elif isinstance(event, Note):
            self.notes.append(event)
        elif isinstance(event, Hello):
            self.hello = event
            self._stamp(float(event.started))
        elif isinstance(event, Runtime):
            self.runtime = event
        elif isinstance(event, Model):
            # Each new optimizer (Model.optimizers grew): where a model trained one after another starts (`_models`).
            if (self.model is None or event.optimizers > self.model.optimizers) and len(self.model_starts) < 256:
                self.model_starts.append(event.t)
            self.model = event
        elif isinstance(event, Rank):
            if self.hello is not None:  # every reader of hello.rank sees the rank learned late
                self.hello = dataclasses.replace(self.hello, rank=event.rank, world_size=event.world_size,
                                                 local_rank=event.local_rank)
        elif isinstance(event, Applied):
            self.applied = event
        elif isinstance(event, End):
            self.end = event
        elif isinstance(event, Stall):
            # The latest by its time, not by its place: `pitstop run` appends the stalls it read from outside
            # (the agent was silent) to the record once the process is gone, after the agent's later ones.
            if self.stall is None or event.t >= self.stall.t:
                self.stall = event
            if event.stacks and (self.stall_stacks is None or event.t >= self.stall_stacks.t):
                self.stall_stacks = event
        else:
            self.unknown_events += 1

    def add_all(self, events: list[Event]) -> None:
        """Take several events in order."""
        for event in events:
            self.add(event)

    def _stamp(self, t: float) -> None:
        if self.first_t is None or t < self.first_t:
            self.first_t = t
        if self.last_t is None or t > self.last_t:
            self.last_t = t

    def _add_step(self, s: Step) -> None:
        self.steps.append(s)
        self.total_steps += 1
        if self.first_step_t is None:
            self.first_step_t = s.t
            self.first_step_start = s.t - s.wall
        self.last_step_t = s.t
        self.last_step = s.step
        self.peak_mem_allocated = _max(self.peak_mem_allocated, s.mem_peak)
        self.peak_mem_allocated = _max(self.peak_mem_allocated, s.mem_allocated)
        self.peak_mem_reserved = _max(self.peak_mem_reserved, s.mem_reserved)
        self.peak_rss = _max(self.peak_rss, s.host_rss)
        mark = s.mark
        if mark is not None:
            self.marked[mark] = self.marked.get(mark, 0) + 1
            if mark == "rollout":
                self.rollout_steps += 1
                self.rollout_step_count += s.passes or 1
                self.rollout_steps_s += s.eval_s
            if mark == "eval":
                self.eval_steps += 1
                self.eval_step_passes += s.passes if s.passes is not None else 1
                self.eval_wall += s.wall
                self.eval_steps_s += s.eval_s
                if s.step >= WARMUP:
                    self.eval_train_steps += 1
                    self.eval_train_wall += max(0.0, s.wall - s.eval_s)
                    self.eval_train_wait += s.data_wait
                    if s.samples is not None:
                        self.eval_train_samples += s.samples
                        self.eval_train_known += 1
            return
        # Capped too: a step index that starts again (a second loop with manual steps)
        # would otherwise grow `head` for the whole run.
        if s.step < HEAD_STEPS and len(self.head) < HEAD_STEPS:
            self.head.append(s)
        self.train_steps += 1
        self.total_wall += s.wall
        self.total_data_wait += s.data_wait
        if s.samples is not None:
            self.total_samples += s.samples
            self.steps_with_samples += 1

    def _add_sample(self, s: Sample) -> None:
        self.samples.append(s)
        self.total_sample_count += 1
        utils = [g.util for g in s.gpus if g.util is not None]
        if utils:
            self.gpu_util_sum += sum(utils) / len(utils)
            self.gpu_util_n += 1
        powers = [g.power_w for g in s.gpus if g.power_w is not None]
        if powers:
            self.gpu_power_sum += sum(powers)  # the job's GPUs together
            self.gpu_power_n += 1
        for g in s.gpus:
            self.gpu_mem_peak = _max(self.gpu_mem_peak, g.mem_used)
            self.gpu_mem_total = _max(self.gpu_mem_total, g.mem_total)
        workers = [p for p in s.procs if p.role == "worker"]
        self.workers_max = max(self.workers_max, len(workers))
        worker_cpu = [p.cpu for p in workers if p.cpu is not None]
        if worker_cpu:
            self.cpu_workers_sum += sum(worker_cpu)
            self.cpu_workers_n += 1
        main_unread = False  # the process's first sample: its CPU has no interval yet
        for p in s.procs:
            if p.role == "main":
                if p.cpu is not None:
                    self.cpu_main_sum += p.cpu
                    self.cpu_main_n += 1
                else:
                    main_unread = True
                self.peak_rss = _max(self.peak_rss, p.rss)
        # The machine's CPU over the same samples as the process's: with the first one (from the
        # sampler's start, often idle) in it, a run read "main 1.21 cores, machine 0.98 of 2".
        if s.system_cpu is not None and not main_unread:
            self.system_cpu_sum += s.system_cpu
            self.system_cpu_n += 1
        if s.alloc_retries is not None:
            if self.first_alloc_retries is None:
                self.first_alloc_retries = s.alloc_retries
            self.last_alloc_retries = s.alloc_retries
        if s.ooms is not None:
            self.last_ooms = s.ooms

    def _add_loss(self, loss: Loss) -> None:
        other = loss.optimizer != 1
        if other:  # a second optimizer's (a GAN's G): its latest finite value, apart
            for step, value in zip(loss.steps, loss.values):
                if value is not None and math.isfinite(value) and (self.other_loss is None or step >= self.other_loss[0]):
                    self.other_loss = [step, float(value)]
        else:
            self._keep_losses(loss)
            self.losses_read += len(loss.steps)
        for step, value in zip(loss.steps, loss.values):
            if value is None or not math.isfinite(value):
                self._nonfinite(step, other)
        for step in loss.nonfinite:
            self._nonfinite(step, other)

    def _keep_losses(self, loss: Loss) -> None:
        for step, value in zip(loss.steps, loss.values):
            finite = value is not None and math.isfinite(value)
            self.losses.pop(step, None)  # re-insert so the dict stays in arrival order
            self.losses[step] = float(value) if finite else None
        while len(self.losses) > MAX_LOSSES:
            self.losses.popitem(last=False)

    def _nonfinite(self, step: int, other: bool = False) -> None:
        seen = self._other_nonfinite_seen if other else self._nonfinite_seen
        if step in seen:
            return
        kept = self.other_nonfinite_steps if other else self.nonfinite_steps
        if other:
            self.other_nonfinite_total += 1
        else:
            self.nonfinite_total += 1
        if len(kept) < MAX_NONFINITE_KEPT:
            kept.append(step)
            seen.add(step)

    # -- replay checkpoints -------------------------------------------------
    def without_series(self) -> RunState:
        """A copy sharing no mutable container with this one, its recent-history series empty.

        What a replay keeps as a checkpoint (pitstop/tui/replay.py): the totals are a
        few KB, while the series (`SERIES`) are up to ~40 MB of events a process; the
        replay reads those back from the record with `refill` instead of keeping them.
        """
        copy = object.__new__(RunState)
        copy.__dict__.update(self.__dict__)
        copy.steps = deque(maxlen=self.steps.maxlen)
        copy.samples = deque(maxlen=self.samples.maxlen)
        copy.profiles = deque(maxlen=self.profiles.maxlen)
        copy.notes = deque(maxlen=self.notes.maxlen)
        copy.losses = OrderedDict()
        # Bounded (HEAD_STEPS, MAX_NONFINITE_KEPT, a few loaders and marks): copied.
        copy.head = list(self.head)
        copy.nonfinite_steps = list(self.nonfinite_steps)
        copy._nonfinite_seen = set(self._nonfinite_seen)
        copy.other_nonfinite_steps = list(self.other_nonfinite_steps)
        copy._other_nonfinite_seen = set(self._other_nonfinite_seen)
        copy.dataloaders = dict(self.dataloaders)
        copy.marked = dict(self.marked)
        copy.model_starts = list(self.model_starts)
        return copy

    def to_checkpoint(self) -> dict[str, Any]:
        """The totals as plain JSON values (what `without_series` keeps): a record index saves these.

        Raises TypeError for a field of a type it does not know, so that a field added
        later is never saved wrong: the index is then not written and the record is read whole.
        """
        out: dict[str, Any] = {}
        for name, value in self.__dict__.items():
            if name in _SERIES_FIELDS:
                out[name] = {"maxlen": value.maxlen} if isinstance(value, deque) else {}
            elif name in _EVENT_FIELDS:
                out[name] = None if value is None else encode(value)
            elif name == "head":
                out[name] = [encode(s) for s in value]
            elif name == "dataloaders":
                out[name] = [encode(d) for d in value.values()]
            elif type(value) is set:  # the non-finite steps seen, of either optimizer
                out[name] = sorted(value)
            elif value is None or type(value) in (int, float, str, bool) or _plain(value):
                out[name] = value
            else:
                raise TypeError(f"RunState.{name}: cannot save a {type(value).__name__} in an index")
        return out

    @classmethod
    def from_checkpoint(cls, saved: dict[str, Any], decoder: Callable[[str], Any] | None = None) -> RunState:
        """The RunState `to_checkpoint` saved, its series empty. Raises ValueError when `saved` is not one.

        `decoder`: what turns each saved event line into its event (`events.decode` when None;
        a reader passes its faster one for the HEAD_STEPS steps every checkpoint holds).
        """
        run = cls()
        decoded = _decoded if decoder is None else functools.partial(_decoded, decoder=decoder)
        if set(saved) != set(run.__dict__):
            raise ValueError("an index of another pitstop version (RunState's fields differ)")
        for name, value in saved.items():
            if name in _SERIES_FIELDS:
                current = getattr(run, name)
                if isinstance(current, deque):
                    value = deque(maxlen=value.get("maxlen"))
                else:
                    value = type(current)()
            elif name in _EVENT_FIELDS:
                value = None if value is None else decoded(value)
            elif name == "head":
                value = [decoded(line) for line in value]
            elif name == "dataloaders":
                value = {d.id: d for d in (decoded(line) for line in value)}
            elif type(getattr(run, name)) is set:
                value = set(value)
            elif name == "marked":
                value = dict(value)
            setattr(run, name, value)
        return run

    def series_limits(self) -> dict[str, int]:
        """How many events of each kind the series keep (`SERIES`); losses count distinct steps."""
        return {"step": self.steps.maxlen or 0, "sample": self.samples.maxlen or 0,
                "profile": self.profiles.maxlen or 0, "note": self.notes.maxlen or 0, "loss": MAX_LOSSES}

    def keep_last(self, limits: dict[str, int]) -> None:
        """Drop the oldest entries of the series past `limits` ({SERIES kind: entries}; losses count steps).

        A reader holding many processes at once keeps shorter windows than one
        process's (pitstop/recorded/_windows.py); the running totals are untouched.
        """
        dropped = False
        for name, kind in _SERIES_KINDS:
            series = getattr(self, name)
            limit = limits.get(kind)
            while limit is not None and len(series) > limit:
                series.popleft()
                dropped = True
        limit = limits.get("loss")
        while limit is not None and len(self.losses) > limit:
            self.losses.popitem(last=False)
            dropped = True
        if dropped:
            self.version += 1

    def refill(self, event: Event) -> None:
        """Put an event back into its series only: the totals of a checkpoint already count it."""
        if isinstance(event, Step):
            self.steps.append(event)
        elif isinstance(event, Sample):
            self.samples.append(event)
        elif isinstance(event, Loss) and event.optimizer == 1:  # (a second optimizer's kept only its latest)
            self._keep_losses(event)
        elif isinstance(event, ProfileWindow):
            self.profiles.append(event)
        elif isinstance(event, Note):
            self.notes.append(event)

    # -- reading ----------------------------------------------------------
    @property
    def eval_passes(self) -> int:
        """Evaluation passes: those of the steps holding one (`Step.passes`; one a step in records made
        before it was kept), and those after the last step (`End.eval_passes`; one where `End.eval_s`)."""
        end = self.end
        after = 0 if end is None else end.eval_passes if end.eval_passes is not None else int(end.eval_s > 0)
        return self.eval_step_passes + after

    @property
    def eval_s(self) -> float:
        """Seconds spent evaluating: inside steps, and after the last step."""
        return self.eval_steps_s + (self.end.eval_s if self.end is not None else 0.0)

    @property
    def rollouts(self) -> int:
        """A policy's rollouts (data collected for its updates): in steps, and after the last step."""
        return self.rollout_step_count + (self.end.rollouts if self.end is not None else 0)

    @property
    def rollout_s(self) -> float:
        """Seconds spent in rollouts: inside steps, and after the last step."""
        return self.rollout_steps_s + (self.end.rollout_s if self.end is not None else 0.0)

    def measured_steps(self, warmup: int = 3) -> list[Step]:
        """Training steps in the window whose index is at or past `warmup` (warm-up and marked steps dropped).

        Where most steps evaluate (`evaluates_each_step`), each such step's training part counts too."""
        if self.evaluates_each_step():
            return [training_part(s) if s.mark == "eval" else s for s in self.steps
                    if s.step >= warmup and (s.mark is None or s.mark == "eval")]
        return [s for s in self.steps if s.step >= warmup and s.mark is None]

    def evaluates_each_step(self) -> bool:
        """True where more steps past the warm-up hold an evaluation than none: a full-batch loop
        (pytorch/examples' GCN) evaluates after every optimizer step, and no step was left to measure."""
        return self.eval_train_steps > self.train_steps

    def training_loader(self) -> DataLoaderInfo | None:
        """The DataLoader whose batches fed the latest steps (`Step.loader`), or None."""
        for s in reversed(self.steps):
            if s.loader is not None:
                return self.dataloaders.get(s.loader)
        return None

    def loader_role(self, loader_id: int) -> str:
        """"train" for the training loader, "eval" for another one iterated, "" when unknown."""
        train = self.training_loader()
        if train is None:
            return ""
        return "train" if loader_id == train.id else "eval"

    def recent_steps(self, n: int) -> list[Step]:
        """The last n steps in the window."""
        if n <= 0:
            return []
        k = len(self.steps)
        return [self.steps[i] for i in range(max(0, k - n), k)]

    def last_loss(self) -> float | None:
        """The latest finite loss value, or None."""
        for step in reversed(self.losses):
            value = self.losses[step]
            if value is not None:
                return value
        return None

    @property
    def device_type(self) -> str | None:
        """"cuda" | "cpu" | "mps" once Runtime arrived, else None."""
        return self.runtime.device_type if self.runtime is not None else None

    @property
    def rank(self) -> int | None:
        """The launcher's RANK, or None."""
        return self.hello.rank if self.hello is not None else None

    @property
    def pid(self) -> int | None:
        """The training process id, once Hello arrived."""
        return self.hello.pid if self.hello is not None else None


_SERIES_FIELDS = frozenset({"steps", "samples", "losses", "profiles", "notes"})
_SERIES_KINDS = (("steps", "step"), ("samples", "sample"), ("profiles", "profile"), ("notes", "note"))  # deques
_EVENT_FIELDS = frozenset({"hello", "runtime", "model", "end", "applied", "stall", "stall_stacks"})


def _plain(value: object) -> bool:
    """A list of numbers or a dict of str to numbers: saved as it is."""
    if type(value) is list:
        return all(type(v) in (int, float) for v in value)  # type: ignore[attr-defined]
    if type(value) is dict:
        return all(type(k) is str and type(v) in (int, float) for k, v in value.items())  # type: ignore[attr-defined]
    return False


def _decoded(line: str, decoder: Callable[[str], Any] = decode) -> Any:
    event = decoder(line)
    if event is None:
        raise ValueError("an index holds an event of a kind this version does not know")
    return event


def _max(current: int | None, value: int | None) -> int | None:
    if value is None:
        return current
    return value if current is None or value > current else current
