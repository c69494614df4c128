"""Provides the hooks' one flag (`Agent.hot`): whether a hook only holds its call, kept by the agent's switches.

Each hook of a plain step read three of the agent's attributes before it did
anything (`disabled`, the compile gate, `batching`), and the optimizer hooks
and backward read or wrote three more (`step_open`, `held_base`,
`batched_steps`), and the optimizer's post-hook two more to know whether the
held calls are due to be taken in (`probe_due`, `windows`): a cache line of
another object each, cold after the step's own work (docs/internals.md,
"Where the in-place cost is"). Here they are one list the hooks bind once, `hot`:

    [holding, step_open, step, probe_due, windows, disabled, batching]

- `holding`: the agent is on, holds the hooks' calls (`batching`) and Dynamo
  never began to trace (`_dynamo.compile_gate`): the hooks take their short
  path, which appends a tuple of stamps and nothing else it can leave out;
- `step_open`: a held optimizer step began and its post-hook has not come;
- `step`: the index of the step being held, `held_base + batched_steps`;
- `probe_due`: on CUDA, when the next probe is due (`_cuda.time_next`; inf on the CPU);
- `windows`: the profiler windows (`windows.py`), or None;
- `disabled` and `batching`, for the hooks' long paths (a property's getter is
  a Python call: ~500 instructions a read under callgrind, five a step).

`disabled`, `batching`, `step_open`, `held_base`, `batched_steps`, `probe_due`
and `windows` stay the agent's attributes for every other reader: properties
over the list, whose setters (rare: the held calls taken in, the agent
switched off or woken, a fork) keep `holding` true to them. Dynamo's first trace clears `holding` in
every list (`_dynamo.on_trace`), before it can trace a hook.
"""

from __future__ import annotations

from typing import Any

from pitstop.profiling import _dynamo


class HotFlag:
    """Mixin of `Agent`: the hooks' flag, and the attributes it stands for."""

    _disabled = False
    _batching = False
    _held_base = 0

    @property
    def hot(self) -> list[Any]:
        """[holding, step_open, step, probe_due, windows, disabled, batching] (module docstring); made at the first ask."""
        state = self.__dict__
        found = state.get("_hot")
        if found is None:
            found = state["_hot"] = [False, False, self._held_base, float("inf"), None, self._disabled, self._batching]
            _dynamo.on_trace(found)
            self._rehot()
        return found

    def _rehot(self) -> None:
        self.hot[0] = self._batching and not self._disabled and not _dynamo.traced()

    @property
    def disabled(self) -> bool:
        """Every hook passes through (switched off, failed, or a dormant child's before its first step)."""
        return self._disabled

    @disabled.setter
    def disabled(self, value: bool) -> None:
        self._disabled = self.hot[5] = value
        self._rehot()

    @property
    def batching(self) -> bool:
        """The hooks hold their calls for the clock (`Agent.may_batch`, `Agent.flush_stamps`)."""
        return self._batching

    @batching.setter
    def batching(self, value: bool) -> None:
        self._batching = self.hot[6] = value
        self._rehot()

    @property
    def step_open(self) -> bool:
        """While batching: an optimizer step began and its post-hook has not come."""
        return self.hot[1]

    @step_open.setter
    def step_open(self, value: bool) -> None:
        self.hot[1] = value

    @property
    def held_base(self) -> int:
        """The clock's index when the training thread last took the held calls in itself."""
        return self._held_base

    @held_base.setter
    def held_base(self, value: int) -> None:
        hot = self.hot
        hot[2] += value - self._held_base  # (the steps held since stay counted)
        self._held_base = value

    @property
    def batched_steps(self) -> int:
        """The primary optimizer's steps held since `held_base`."""
        return self.hot[2] - self._held_base

    @batched_steps.setter
    def batched_steps(self, value: int) -> None:
        self.hot[2] = self._held_base + value

    @property
    def probe_due(self) -> float:
        """On CUDA: when the hooks hand the next step to the training thread (a probe: `_cuda.time_next`)."""
        return self.hot[3]

    @probe_due.setter
    def probe_due(self, value: float) -> None:
        self.hot[3] = value

    @property
    def windows(self) -> Any:
        """The profiler windows (`windows.ProfilerWindows`), or None."""
        return self.hot[4]

    @windows.setter
    def windows(self, value: Any) -> None:
        self.hot[4] = value


__all__ = ["HotFlag"]
