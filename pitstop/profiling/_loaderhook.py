"""Provides the DataLoader hooks: the data wait and batch size of each fetch, and a config's loader arguments."""

from __future__ import annotations

import time
from typing import Any

from pitstop.profiling._patch import patch
from pitstop.profiling._root import leading_dim

_PERF = time.perf_counter


def hook_dataloader(hooks: Any) -> None:
    """Time each DataLoader batch fetch (the data wait), read its batch size, tell the loaders apart,
    and apply a tuned config's DataLoader arguments."""
    agent = hooks.agent
    clock = agent.clock
    dataloader = hooks.dataloader_mod
    base = dataloader._BaseDataLoaderIter
    tensor_type = hooks.torch.Tensor
    perf = _PERF
    stamps = agent.stamps
    on_fetch, on_iter = clock.on_fetch, clock.on_iter
    compiling, dynamo = hooks.compiling, hooks.dynamo

    hot = agent.hot  # [holding, ...]: the agent on, holding the calls, Dynamo not tracing (`_hotflag.py`)
    fetched = False  # a batch was fetched: the first one finds the model (a cell, not an attribute: read each call)

    def samples_of(batch: Any) -> Any:
        # (inputs, targets): the first tensor's shape, read here (the clock takes its batch
        # dimension: `StepClock.batch_of`); `leading_dim` for the rest.
        kind = type(batch)
        if (kind is tuple or kind is list) and batch and type(batch[0]) is tensor_type:
            shape = batch[0].shape
            return shape if shape else leading_dim(batch, tensor_type)
        return leading_dim(batch, tensor_type)

    def tell(key: Any, first: bool, started: float, waited: float, samples: Any) -> None:
        """The clock told of the fetch: held, or at once."""
        if first:  # an iteration's first batch: one pass of an evaluation
            if hot[6]:
                stamps.append((on_iter, key))
            else:
                on_iter(key)
        if hot[6]:
            stamps.append((on_fetch, key, started, waited, samples))
        else:
            clock.on_fetch(key, started, waited, samples)

    def make_next(original_next: Any) -> Any:
        def __next__(it: Any) -> Any:
            if hot[0] and fetched:  # holding: the stamps held, the batch's first shape read, nothing else
                started = perf()
                batch = original_next(it)  # StopIteration passes through untimed: not a wait
                waited = perf() - started
                try:
                    # (the shape read inline, not in `samples_of`: a Python call less a step, ~2 us
                    # in place on the Xeon VM)
                    kind = type(batch)
                    if (kind is tuple or kind is list) and batch and type(batch[0]) is tensor_type:
                        shape = batch[0].shape
                        samples = shape if shape else leading_dim(batch, tensor_type)
                    else:
                        samples = leading_dim(batch, tensor_type)
                    state = it.__dict__
                    key = state.get("_pitstop_loader")
                    if hot[0]:
                        if state.get("_num_yielded") == 1:  # an iteration's first batch
                            stamps.append((on_iter, key))
                        stamps.append((on_fetch, key, started, waited, samples))
                    else:  # (switched off or taken in during the fetch)
                        tell(key, state.get("_num_yielded") == 1, started, waited, samples)
                except Exception as err:  # never into the training loop
                    agent.fail("the DataLoader hook", err)
                return batch
            if hot[5] or (dynamo[0] and compiling()):
                return original_next(it)
            return fetch(original_next, it)

        return __next__

    def fetch(original_next: Any, it: Any) -> Any:
        """`__next__` where the calls are not held, or at the first batch."""
        nonlocal fetched
        started = perf()
        batch = original_next(it)
        waited = perf() - started
        if not fetched:  # the first batch: the model, to see an evaluation before step 0
            fetched = True
            try:
                hooks.watch_model()
            except Exception as err:  # never into the training loop
                agent.note("warn", "hooks", f"model not watched: {err}", once="root-fetch")
        try:
            state = it.__dict__
            tell(state.get("_pitstop_loader"), state.get("_num_yielded") == 1, started, waited, samples_of(batch))
        except Exception as err:  # never into the training loop
            agent.fail("the DataLoader hook", err)
        return batch

    patch(base, "__next__", make_next)

    def make_iter_init(original_init: Any) -> Any:
        def __init__(it: Any, loader: Any, *args: Any, **kwargs: Any) -> None:
            original_init(it, loader, *args, **kwargs)
            # Which DataLoader a batch came from: the training loader is told from eval ones.
            it.__dict__["_pitstop_loader"] = getattr(loader, "__dict__", {}).get("_pitstop_id")

        return __init__

    patch(base, "__init__", make_iter_init)
    multi = dataloader._MultiProcessingDataLoaderIter

    def make_multi_init(original_init: Any) -> Any:
        def __init__(it: Any, *args: Any, **kwargs: Any) -> None:
            original_init(it, *args, **kwargs)
            try:
                loader = it.__dict__.get("_pitstop_loader")
                agent.worker_pids.update((w.pid, loader) for w in it._workers if w.pid)
            except Exception:
                pass

        return __init__

    patch(multi, "__init__", make_multi_init)
    overrides = hooks.overrides

    def make_loader_init(original_loader_init: Any) -> Any:
        def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
            if agent.disabled and not agent.dormant:  # (a dormant child's loaders get a config too)
                original_loader_init(loader, *args, **kwargs)
                return
            try:
                new_args, new_kwargs, applied, skipped = overrides.dataloader_kwargs(
                    original_loader_init, loader, args, kwargs
                )
            except Exception as err:  # our bug must not change the script's DataLoader
                agent.note("warn", "overrides", f"DataLoader overrides off: {err}", once="loader-kwargs")
                new_args, new_kwargs, applied, skipped = args, kwargs, {}, {}
            original_loader_init(loader, *new_args, **new_kwargs)
            try:
                key = overrides.report_dataloader(loader, applied, skipped)
                if type(loader.batch_size) is int:  # (the clock tells a loader that batches sequence-first by it)
                    clock.batch_sizes[key] = loader.batch_size
            except Exception as err:
                agent.note("warn", "overrides", f"DataLoader report failed: {err}", once="loader-report")

        return __init__

    patch(dataloader.DataLoader, "__init__", make_loader_init)
