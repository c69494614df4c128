"""Provides the torch hooks: installed the moment the script finishes `import torch`.

No code change in the user's script: a global optimizer-step post-hook marks
steps (and a pre-hook stamps where the optimizer's work begins); a timer around
DataLoader iterators' `__next__` measures data wait and batch sizes;
`Tensor.backward` is wrapped to catch the loss, to stamp where backward begins
and ends (the step's anatomy), and to count steps when no optimizer ever steps;
a few constructors are wrapped to learn about the model (Conv2d, GradScaler,
DataParallel, DDP) and to apply a tuned config.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import os
import time
import weakref
from pathlib import Path
from typing import Any

from pitstop.events import Model, Rank, Runtime
from pitstop.profiling._patch import patch

_PERF = time.perf_counter


def _leading_dim(batch: Any, tensor_type: type) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor."""
    if isinstance(batch, tensor_type):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = _leading_dim(item, tensor_type)
            if found is not None:
                return found
        return None
    if isinstance(batch, dict):
        for item in batch.values():
            found = _leading_dim(item, tensor_type)
            if found is not None:
                return found
    return None


def host_mem_total(meminfo: str = "/proc/meminfo", cgroup: str = "/sys/fs/cgroup") -> int | None:
    """Bytes of memory this process may use: MemTotal, or the cgroup's limit when smaller."""
    total = None
    try:
        with open(meminfo, encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    total = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        total = None
    for name in ("memory.max", "memory/memory.limit_in_bytes"):  # cgroup v2, v1
        try:
            text = Path(cgroup, name).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and (total is None or int(text) < total):
            total = int(text)
        break
    return total


def _torch_threads(torch: Any) -> int | None:
    try:
        return int(torch.get_num_threads())
    except Exception:
        return None


def _cpu_bf16(cpuinfo: str = "/proc/cpuinfo") -> bool | None:
    """True when the CPU has native bf16 (AVX512_BF16 or AMX); None where it cannot be read."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[-1].split())
                    return bool(flags & {"avx512_bf16", "amx_bf16"})
    except OSError:
        return None
    return None


def find_root(module_type: type) -> Any:
    """The outermost module with the most trainable parameters (see Hooks.watch_model).

    One pass over the objects the GC tracks, once per run, at the first backward
    (a warm-up step, never measured): ~0.1 s with transformers imported (200k objects).
    """
    # type(o), not isinstance(o, ...): isinstance reads `__class__`, and some objects
    # warn on attribute access (torch.distributed.reduce_op printed a FutureWarning
    # into the user's stderr). One issubclass per type, not per object: ~3x faster.
    is_module: dict[type, bool] = {}
    modules = []
    for o in gc.get_objects():
        kind = type(o)
        found = is_module.get(kind)
        if found is None:
            found = is_module[kind] = issubclass(kind, module_type)
        if found:
            modules.append(o)
    inner = {id(child) for m in modules for child in m._modules.values() if child is not None}
    tops = [m for m in modules if id(m) not in inner]

    def score(m: Any) -> int:
        return sum(p.numel() for p in m.parameters() if p.requires_grad)

    best, best_score = None, 0
    for m in tops:
        value = score(m)
        if value > best_score:
            best, best_score = m, value
    return best


def _batch_dim(batch: Any, tensor_type: type, dim: int) -> int | None:
    """Samples in a sequence-first batch: dimension `dim` of its first tensor that has it."""
    if isinstance(batch, tensor_type):
        return int(batch.shape[dim]) if batch.dim() > dim else None
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        found = _batch_dim(item, tensor_type, dim)
        if found is not None:
            return found
    return None


def _shm_bytes() -> int | None:
    try:
        st = os.statvfs("/dev/shm")
    except OSError:
        return None
    return st.f_blocks * st.f_frsize


class Hooks:
    """The patches one agent installs into torch."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.torch: Any = None
        self.capture_loss = True
        self.conv2d = 0
        self.grad_scaler = False
        self.autocast = False
        self.data_parallel = False
        self.ddp = False
        self._model_reported = False
        self.overrides: Any = None
        self.runtime: Runtime | None = None
        self.device_type = "cpu"

    def install(self, torch: Any) -> None:
        agent = self.agent
        # Submodules are not attributes of a just-imported torch until imported.
        # (torch.optim even deletes its `optimizer` attribute): keep the module objects.
        self.optimizer_mod = importlib.import_module("torch.optim.optimizer")
        self.dataloader_mod = importlib.import_module("torch.utils.data.dataloader")
        importlib.import_module("torch.nn.parallel")
        self.torch = torch
        agent.torch = torch
        agent.clock.t_start = _PERF()  # step 0 starts here unless a DataLoader fetch comes first
        agent.hooks = self
        if not agent.dormant:  # a dormant child sends its runtime when it wakes (`on_wake`)
            self._emit_runtime()
        from pitstop.profiling.overrides import Overrides

        self.overrides = Overrides(agent, torch, agent.settings.config)
        self.overrides.apply_global()
        self._hook_optimizer()
        self._hook_dataloader()
        self._hook_backward()
        self._hook_constructors()
        if not agent.dormant:
            self._start_windows()

    def on_wake(self) -> None:
        """A dormant child's first step: its runtime, read now (a DataLoader worker never pays
        for the NVML query). Profiler windows stay off in children: the parent's are the run's."""
        if self.runtime is None:
            self._emit_runtime()
        else:  # forked: the parent's reading holds for the child
            self.agent.emit(dataclasses.replace(self.runtime, t=time.time()))
        self._model_reported = False

    def cuda_ready(self) -> bool:
        """CUDA memory counters are read only once the script itself initialised CUDA.
        The agent's writer thread asks (2 Hz, never per step) only where there is a
        GPU (`agent.cuda_device`, set below)."""
        try:
            return bool(self.torch.cuda.is_initialized())
        except Exception:
            return False

    # ---- runtime ----------------------------------------------------------
    def _emit_runtime(self) -> None:
        torch = self.torch
        unavailable: dict[str, str] = {}
        cuda_version = getattr(torch.version, "cuda", None)
        device_type = "cpu"
        names: list[str] = []
        if cuda_version is None:
            unavailable["gpu"] = "CPU build of torch (no CUDA)"
        else:
            try:
                # Device names come from NVML, not torch.cuda: asking torch would
                # initialise CUDA in the script's process before the script does.
                from pitstop.profiling import nvml

                gpus, reason = nvml.read_gpus()
                names = [g.name for g in gpus]
                if torch.cuda.is_available():
                    device_type = "cuda"
                else:
                    unavailable["gpu"] = reason or "torch.cuda.is_available() is False"
            except Exception as err:
                unavailable["gpu"] = f"GPU query failed: {err}"
        cudnn = None
        try:
            cudnn = torch.backends.cudnn.version() if device_type == "cuda" else None
        except Exception:
            cudnn = None
        try:
            usable = len(os.sched_getaffinity(0))
        except (AttributeError, OSError):
            usable = os.cpu_count()
        self.runtime = Runtime(
                t=time.time(),
                torch_version=str(torch.__version__),
                cuda_version=cuda_version,
                device_type=device_type,
                device_names=names,
                cudnn_version=cudnn,
                cpu_count=os.cpu_count(),
                usable_cpus=usable,
                shm_bytes=_shm_bytes(),
                unavailable=unavailable,
                cpu_bf16=_cpu_bf16(),
                torch_threads=_torch_threads(torch),
                host_mem_total=host_mem_total(),
            )
        self.agent.emit(self.runtime)
        self.device_type = device_type
        self.agent.cuda_device = device_type == "cuda"

    def report_model(self) -> None:
        """What we learned about the model; sent at the first step and when it changes."""
        torch = self.torch
        threads = _torch_threads(torch)
        runtime = self.runtime
        if runtime is not None and threads != runtime.torch_threads:  # the script set its own
            self.runtime = dataclasses.replace(runtime, t=time.time(), torch_threads=threads)
            self.agent.emit(self.runtime)
        try:
            benchmark = bool(torch.backends.cudnn.benchmark)
        except Exception:
            benchmark = None
        cl_params = self.overrides.channels_last_params if self.overrides is not None else 0
        optimizers = len(self.agent.clock.optimizers)
        self.agent._model_optimizers = optimizers
        self.agent.emit(
            Model(
                t=time.time(),
                conv2d=self.conv2d,
                optimizers=optimizers,
                grad_scaler=self.grad_scaler,
                autocast=self.autocast,
                data_parallel=self.data_parallel,
                ddp=self.ddp,
                channels_last_params=cl_params,
                cudnn_benchmark=benchmark,
            )
        )
        self._model_reported = True

    def report_rank(self) -> None:
        """At the first step: the rank torch.distributed knows, when the environment had none."""
        if self.agent.rank is not None:
            return
        try:
            dist = self.torch.distributed
            if not (dist.is_available() and dist.is_initialized()):
                return
            rank, world = int(dist.get_rank()), int(dist.get_world_size())
        except Exception:
            return
        local = os.environ.get("LOCAL_RANK")
        self.agent.rank = rank
        self.agent.emit(Rank(t=time.time(), rank=rank, world_size=world,
                             local_rank=int(local) if local and local.isdigit() else None))

    # ---- steps ------------------------------------------------------------
    def _hook_optimizer(self) -> None:
        agent = self.agent
        clock = agent.clock
        perf = _PERF

        def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if agent.dormant:  # a child process's first step: its agent starts now
                agent.wake()
            if not agent.disabled:
                try:
                    clock.on_optimizer_start(perf())
                except Exception as err:  # never into the training loop
                    agent.fail("the optimizer-step pre-hook", err)

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if not agent.disabled:
                try:
                    agent.on_optimizer_step(optimizer)
                except Exception as err:  # never into the training loop
                    agent.fail("the optimizer-step hook", err)

        self.optimizer_mod.register_optimizer_step_pre_hook(pre_hook)
        self.optimizer_mod.register_optimizer_step_post_hook(post_hook)

    def _hook_dataloader(self) -> None:
        agent = self.agent
        clock = agent.clock
        dataloader = self.dataloader_mod
        base = dataloader._BaseDataLoaderIter
        tensor_type = self.torch.Tensor
        perf = _PERF

        def make_next(original_next: Any) -> Any:
            def __next__(it: Any) -> Any:
                if agent.disabled:
                    return original_next(it)
                started = perf()
                batch = original_next(it)  # StopIteration passes through untimed: not a wait
                waited = perf() - started
                try:
                    samples = _leading_dim(batch, tensor_type)
                    clock.on_fetch(it.__dict__.get("_pitstop_loader"), started, waited, samples)
                except Exception as err:  # never into the training loop
                    agent.fail("the DataLoader hook", err)
                return batch

            return __next__

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
        overrides = self.overrides

        def make_loader_init(original_loader_init: Any) -> Any:
            def __init__(loader: Any, *args: Any, **kwargs: Any) -> None:
                if agent.disabled:
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
                    overrides.report_dataloader(loader, applied, skipped)
                except Exception as err:
                    agent.note("warn", "overrides", f"DataLoader report failed: {err}", once="loader-report")

            return __init__

        patch(dataloader.DataLoader, "__init__", make_loader_init)

    def _hook_backward(self) -> None:
        agent = self.agent
        clock = agent.clock
        hooks = self
        perf = _PERF

        def make(original: Any) -> Any:
            def backward(tensor: Any, *args: Any, **kwargs: Any) -> Any:
                if agent.dormant:  # a child process's first backward: its agent starts now
                    agent.wake()
                started = perf()
                marker = clock.marker  # set on CUDA: a timing event where backward begins, too
                token = marker() if marker is not None and not agent.disabled else None
                result = original(tensor, *args, **kwargs)
                if not agent.disabled:
                    loss = None
                    if hooks.capture_loss:
                        try:
                            if tensor.numel() == 1:
                                # On the CPU the value is there: read it now (no sync, nothing
                                # held). Elsewhere keep it for one batched async copy.
                                loss = tensor.item() if tensor.device.type == "cpu" else tensor.detach()
                        except Exception:
                            loss = None
                    try:
                        agent.on_backward(loss, started, token, tensor)
                    except Exception as err:  # never into the training loop
                        agent.fail("the backward hook", err)
                return result

            return backward

        patch(self.torch.Tensor, "backward", make)

    # ---- model facts ----------------------------------------------------------
    def _wrap_init(self, cls: Any, on_init: Any) -> None:
        agent = self.agent

        def make(original: Any) -> Any:
            def __init__(obj: Any, *args: Any, **kwargs: Any) -> None:
                original(obj, *args, **kwargs)
                if not agent.disabled:
                    try:
                        on_init(obj)
                    except Exception as err:
                        agent.note("warn", "hooks", f"{cls.__name__} hook: {err}", once=f"init-{cls.__name__}")

            return __init__

        patch(cls, "__init__", make)

    def _hook_constructors(self) -> None:
        torch = self.torch
        nn = torch.nn

        def on_conv(conv: Any) -> None:
            self.conv2d += 1
            self.overrides.on_conv2d(conv)

        self._wrap_init(nn.Conv2d, on_conv)

        def on_scaler(scaler: Any) -> None:
            # torch turns a GradScaler off where it cannot work (no CUDA): only an
            # enabled one counts as "the script scales its loss".
            is_enabled = getattr(scaler, "is_enabled", None)
            if is_enabled is None or is_enabled():
                self.grad_scaler = True

        scaler = getattr(getattr(torch, "amp", None), "GradScaler", None)
        if scaler is not None:
            self._wrap_init(scaler, on_scaler)

        def on_dp(_: Any) -> None:
            self.data_parallel = True

        self._wrap_init(nn.DataParallel, on_dp)

        def on_ddp(_: Any) -> None:
            self.ddp = True

        self._wrap_init(nn.parallel.DistributedDataParallel, on_ddp)
        if self.overrides is not None and self.overrides.autocast_applied:
            self.autocast = True  # a config's autocast is on for the whole run
        hooks = self

        def make_enter(original_enter: Any) -> Any:
            def __enter__(ctx: Any) -> Any:
                if getattr(ctx, "_enabled", True):
                    hooks.autocast = True
                return original_enter(ctx)

            return __enter__

        patch(torch.autocast, "__enter__", make_enter)

    # ---- the model's root module ----------------------------------------------
    def watch_model(self) -> None:
        """Find the model (the agent calls this once, at the first backward) and watch its forwards.

        The root module is the outermost module with the most trainable
        parameters (no optimizer has stepped yet at the first backward). Its class's `__call__` is patched
        (`_patch`, invisible) to tell the clock whether a forward of the root
        trains (grad on, train mode) or evaluates, and to give samples (the
        batch dimension of its input) to loops that slice batches without a
        DataLoader. Nothing is stored on the model itself: a forward hook lives
        in the module's state, and `torch.save(model)` of pytorch/examples'
        word_language_model then failed pickling pitstop's hook.
        """
        try:
            root = find_root(self.torch.nn.Module)
        except Exception as err:
            self.agent.note("warn", "hooks", f"model not found: {err}", once="root")
            return
        if root is None:
            return
        agent = self.agent
        clock = agent.clock
        grad_enabled = self.torch.is_grad_enabled
        tensor_type = self.torch.Tensor
        perf = _PERF
        # Sequence-first models (an LSTM or Transformer with batch_first=False) take
        # (seq, batch, ...) inputs: the batch is their second dimension.
        seq_first = any(getattr(m, "batch_first", True) is False for m in root.modules())
        root_ref = weakref.ref(root)

        def make(original: Any) -> Any:
            def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
                if module is root_ref() and not agent.disabled:
                    try:
                        training = module.training and grad_enabled()
                        samples = None
                        if training and clock.wants_forward_samples:
                            found = args if args else kwargs
                            samples = _batch_dim(found, tensor_type, 1) if seq_first else _leading_dim(found, tensor_type)
                        clock.on_forward(training, samples, perf())
                    except Exception as err:  # never into the training loop
                        agent.fail("the model's forward hook", err)
                return original(module, *args, **kwargs)

            return __call__

        try:
            patch(type(root), "__call__", make)
        except Exception as err:
            self.agent.note("warn", "hooks", f"model forwards not watched: {err}", once="root-hook")

    # ---- profiler windows -----------------------------------------------------
    def _start_windows(self) -> None:
        profile = self.agent.settings.profile
        if not profile:
            return
        try:
            from pitstop.profiling.windows import ProfilerWindows

            agent = self.agent
            self.agent.windows = ProfilerWindows(
                every=profile.get("every"),
                active=int(profile.get("active") or 5),
                first=int(profile.get("first") or 0),
                trace_dir=agent.settings.trace_dir,
                device_type=self.device_type,
                emit=agent.emit,
                note=lambda level, message: agent.note(level, "profiler", message),
            )
        except Exception as err:
            self.agent.note("warn", "profiler", f"profiler windows off: {err}")
