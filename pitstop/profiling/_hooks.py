"""Provides the torch hooks: installed the moment the script finishes `import torch`.

No code change in the user's script: a global optimizer-step post-hook marks
steps (and a pre-hook stamps where the optimizer's work begins); a timer around
DataLoader iterators' `__next__` measures data wait and batch sizes;
`Tensor.backward` is wrapped to catch the loss, to stamp where backward begins
and ends (the step's anatomy), and to count steps when no optimizer ever steps;
a few constructors are wrapped to learn about the model (Conv2d, GradScaler,
DataParallel, DDP) and to apply a tuned config.

The DataLoader hooks are in `_loaderhook`, the constructor hooks in `_modelhooks`,
the runtime facts read at install in `_runtime`; the per-step hooks stay here.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import time
import weakref
from typing import Any

from pitstop.events import Model, Rank, Runtime
from pitstop.profiling import _clipwatch
from pitstop.profiling._backhook import backward_wrapper
from pitstop.profiling._dynamo import FrameSkip, compiling, compile_gate
from pitstop.profiling._keras import hook_keras_optimizer
from pitstop.profiling._loaderhook import hook_dataloader
from pitstop.profiling._losses import LOSS_EVERY_S
from pitstop.profiling._modelhooks import hook_constructors, model_dtype
from pitstop.profiling._optkeys import OptimizerKeys
from pitstop.profiling._patch import patch, patches
from pitstop.profiling._root import RootWatch
from pitstop.profiling._runtime import host_mem_total as host_mem_total  # (re-exported: its tests import it here)
from pitstop.profiling._runtime import read_runtime, torch_threads

_PERF = time.perf_counter
# Hook calls held for the clock (`Agent.flush_stamps`): the writer thread takes them in at each
# of its passes (`Agent._take_held`); the training thread itself only at a profiler window's
# step, at a call the clock must decide at once, before a probe on CUDA (`_cuda.PROBE_S`), or
# when this many are held (a writer that cannot keep up: ~4 calls a step, a few MB at most).
HOLD_MAX = 16_384




# torch.distributed.checkpoint creates an optimizer's state before it loads a checkpoint into it
# (or saves one) with a step of zero gradients at learning rate 0: `state_dict._init_optim_state`,
# `_NamedOptimizer.init_state` (through its own `step`). Not a training step: pytorch/examples'
# FSDP2 example, resumed from its checkpoint, counted 11 steps for its 10.
_STATE_INIT = frozenset({"_init_optim_state", "init_state"})


def _state_init(wrapper: Any) -> bool:
    """Whether the optimizer step running in `wrapper` (torch's step-wrapper frame) only creates the state."""
    frame = wrapper.f_back
    for _ in range(2):  # its caller, or a _NamedOptimizer's step's caller
        if frame is None:
            return False
        code = frame.f_code
        if code.co_name in _STATE_INIT and "torch/distributed/" in code.co_filename.replace(os.sep, "/"):
            return True
        frame = frame.f_back
    return False


def _wrapper_optimizer(frame: Any) -> Any:
    """The optimizer whose step runs in `frame` (torch's step wrapper binds `self`, from `args`)."""
    local = frame.f_locals
    found = local.get("self")
    if found is None:
        args = local.get("args") or (None,)
        found = args[0]
    return found


class Hooks:
    """The patches one agent installs into torch."""

    def __init__(self, agent: Any) -> None:
        self.agent = agent
        self.torch: Any = None
        self.capture_loss = True
        # The losses read (`_losses.LOSS_EVERY_S`): the step whose losses the backward hook reads or
        # not (`loss_step`, `loss_read`), when the next read is due (perf_counter), and the last loss
        # not read with its step (`loss_tail`, `tail_step`), read as the run ends (`read_tail`).
        self.loss_every = 0.0 if agent._trial_steps is not None else LOSS_EVERY_S  # a tune trial: every loss
        self.loss_step: int | None = None
        self.loss_read = True
        self.loss_due = float("-inf")
        self.loss_tail: Any = None
        self.tail_step = -1
        self.tail_parts = 0  # backward calls of the tail's step (one: the tail is the step's loss)
        self.conv2d = 0
        self.grad_scaler = False
        self.grad_clip = False  # the script called clip_grad_norm_ / clip_grad_value_ (`_clipwatch`)
        self.scalers: list[Any] = []  # weak references to the enabled GradScalers (their losses are scaled)
        self.scaler_skipped: Any = None  # tells the clock of an optimizer step a GradScaler skipped
        self.autocast = False
        self.data_parallel = False
        self.ddp = False
        self._model_reported = False
        self.root: RootWatch | None = None  # the model's root module (install)
        self.overrides: Any = None
        self.runtime: Runtime | None = None
        self.device_type = "cpu"
        self.step_code: Any = None  # the code of torch's optimizer-step wrapper (its pre-hook's caller)
        self.state_init: int | None = None  # key of the optimizer whose running step only creates its state
        # The clock's key of each optimizer: a number never reused, where id() is (`_optkeys.py`).
        self.optimizer_keys = OptimizerKeys()
        self.frames: FrameSkip | None = None  # pitstop's frames, never compiled by Dynamo (`hide_frames`)
        self.compiling: Any = None  # True only while Dynamo traces the hook that asks (`_dynamo.compiling`)
        self.dynamo: list[bool] = [False]  # [True] once Dynamo began to trace (`_dynamo.compile_gate`)
        self._backward_wrapper: Any = None  # makes the Tensor.backward wrapper (distributed autograd's too)
        self.step_now: Any = None  # tells the clock of an optimizer step at once (`_hook_optimizer`)
        self.keras = False  # Keras's optimizer steps are hooked (`_keras.py`)

    def install(self, torch: Any) -> None:
        agent = self.agent
        # Submodules are not attributes of a just-imported torch until imported.
        # (torch.optim even deletes its `optimizer` attribute): keep the module objects.
        self.optimizer_mod = importlib.import_module("torch.optim.optimizer")
        self.dataloader_mod = importlib.import_module("torch.utils.data.dataloader")
        importlib.import_module("torch.nn.parallel")
        self.torch = torch
        agent.torch = torch
        self.compiling = compiling(torch)
        self.dynamo = compile_gate()
        self.frames = FrameSkip(torch)
        agent.clock.t_start = _PERF()  # step 0 starts here unless a DataLoader fetch comes first
        agent.hooks = self
        if not agent.dormant:  # a dormant child sends its runtime when it wakes (`on_wake`)
            self._emit_runtime()
        from pitstop.profiling.overrides import Overrides

        self.overrides = Overrides(agent, torch, agent.settings.config)
        self.overrides.apply_global()
        self.root = RootWatch(agent, torch)
        self.root.watch_at_eval(self.watch_model)
        self._hook_optimizer()
        hook_dataloader(self)
        self._hook_backward()
        self._hook_dist_autograd()
        self._hook_autograd_grad()
        _clipwatch.install(self)
        hook_constructors(self)
        if not agent.dormant:
            self._start_windows()
        self.hide_frames()

    def hide_frames(self) -> None:
        """Mark pitstop's code (its modules loaded so far, and the wrappers patched in) so that Dynamo
        never compiles a frame of it (`_dynamo.py`). At install, and when the model is found (the
        first batch, the first backward: the modules the first step imports are loaded by then)."""
        frames = self.frames
        if frames is None or not frames.available:
            return
        try:
            frames.modules()
            for done in patches():
                frames.code(done.wrapper.__code__)
        except Exception as err:  # a torch whose marks differ: compiled scripts may trace the hooks
            self.agent.note("warn", "hooks", f"hooks not hidden from torch.compile: {err}", once="dynamo-skip")

    def on_wake(self) -> None:
        """A dormant child's first step: its runtime, read now (a DataLoader worker never pays
        for the NVML query). Profiler windows stay off in children (the parent's are the run's),
        except in a rank of a distributed job the parent spawned (`torch.multiprocessing.spawn`):
        there the parent never trains, and the job had no op table or collective time at all."""
        if self.runtime is None:
            self._emit_runtime()
        else:  # forked: the parent's reading holds for the child
            self.agent.emit(dataclasses.replace(self.runtime, t=time.time()))
        self._model_reported = False
        if self.agent.rank is not None and self.agent.windows is None:
            self._start_windows()

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
        self.runtime = runtime = read_runtime(self.torch)
        self.agent.emit(runtime)
        self.device_type = runtime.device_type
        self.agent.cuda_device = runtime.device_type == "cuda"

    def report_model(self) -> None:
        """What we learned about the model; sent at the first step and when it changes."""
        torch = self.torch
        threads = torch_threads(torch)
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
                grad_clip=self.grad_clip,
                autocast=self.autocast,
                data_parallel=self.data_parallel,
                ddp=self.ddp,
                channels_last_params=cl_params,
                cudnn_benchmark=benchmark,
                dtype=model_dtype(self.root),
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
        hooks = self
        perf = _PERF

        stamps = agent.stamps
        on_start, on_step = clock.on_optimizer_start, clock.on_optimizer_step
        serials, new_key = self.optimizer_keys.serials, self.optimizer_keys.new
        # The optimizers that stepped, weakly: the clock switches at once from one that is gone.
        live: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
        clock.alive = lambda key: key in live
        compiling, dynamo = self.compiling, self.dynamo

        hot = agent.hot  # [holding, step_open, the held step, probe_due, windows, disabled, batching] (`_hotflag.py`)

        def pre_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            if hot[0]:  # holding: the start's stamp held
                try:
                    stamps.append((on_start, serials.get(id(optimizer)) or new_key(optimizer), perf(), None))
                    hot[1] = True
                except Exception as err:  # never into the training loop
                    agent.fail("the optimizer-step pre-hook", err)
                return
            if hot[5]:
                if not agent.dormant or (dynamo[0] and compiling()):
                    return
                agent.wake()  # a child process's first step: its agent starts now
                if hot[5]:
                    return
            elif dynamo[0] and compiling():  # traced by torch.compile (a compiled step): nothing (`_dynamo.py`)
                return
            if hot[6]:
                stamps.append((on_start, serials.get(id(optimizer)) or new_key(optimizer), perf(), None))
                hot[1] = True  # (`step_open`)
            else:
                try:
                    # The token is torch's step wrapper's frame, which called this hook: while it is
                    # on the stack the step runs. Taken until the first step ended (the sampler names
                    # the optimizer from it) and once to learn the wrapper's code: a frame object
                    # made at every step is several us a step in place (docs/internals.md). Later
                    # steps are told by that code on the stack (`_abandon_raised`).
                    if clock.index == 0 or hooks.step_code is None:
                        token = sys._getframe(1)
                        if _state_init(token):  # told here, before the first step ended (not later)
                            hooks.state_init = serials.get(id(optimizer)) or new_key(optimizer)
                            agent.note("info", "hooks", "an optimizer step that torch.distributed.checkpoint "
                                       "made to create the optimizer's state (zero gradients, learning rate 0) "
                                       "is not counted as a training step", once="state-init")
                            return
                        hooks.step_code = token.f_code
                        clock.on_optimizer_start(serials.get(id(optimizer)) or new_key(optimizer), perf(), token)
                    else:
                        clock.on_optimizer_start(serials.get(id(optimizer)) or new_key(optimizer), perf())
                except Exception as err:  # never into the training loop
                    agent.fail("the optimizer-step pre-hook", err)

        def post_hook(optimizer: Any, args: Any, kwargs: Any) -> None:
            # Holding (hot[0]) implies batching, the agent on and Dynamo not tracing: the check is skipped.
            if not hot[0] and (hot[5] or (dynamo[0] and compiling())):
                return
            try:
                key = serials.get(id(optimizer)) or new_key(optimizer)
                now = perf()
                if hot[6] and key == clock.primary:  # a plain step: held, the held calls taken in where due
                    stamps.append((on_step, key, now))
                    hot[1] = False  # (`step_open`)
                    step = hot[2] + 1  # (`held_base + batched_steps`)
                    hot[2] = step
                    windows = hot[4]  # this step's index is step - 1
                    if len(stamps) >= HOLD_MAX or now >= hot[3] or (
                            windows is not None and step > windows.wake_step):
                        agent.flush_stamps(now)  # (on CUDA, a probe due: the next step is one)
                elif hooks.state_init == key:  # (never held: told before the first step ended)
                    hooks.state_init = None
                else:
                    step_now(optimizer, key, now)
            except Exception as err:  # never into the training loop
                agent.fail("the optimizer-step hook", err)

        def step_now(optimizer: Any, key: int, now: float) -> None:
            """The clock told of the step at once (the calls held so far taken in first)."""
            if hot[6]:  # (takes the lock: the writer may be taking held calls in)
                agent.flush_stamps()
            if key not in live:
                try:
                    live[key] = optimizer
                except TypeError:  # an optimizer that cannot be weakly referenced: never gone
                    clock.alive = None
            clock.on_optimizer_step(key, now)
            agent.held_base, agent.batched_steps = clock.index, 0
            agent.batching = agent.may_batch()

        def skipped(optimizer: Any) -> None:
            """A step the GradScaler did not run (inf or NaN gradients): a step all the same, of no optimizer time."""
            agent.note("info", "hooks", "a GradScaler skipped the optimizer's step (inf or NaN gradients): "
                       "counted as a step, with no optimizer time", once="scaler-skip")
            if hot[6]:
                agent.flush_stamps()
            now = perf()
            key = serials.get(id(optimizer)) or new_key(optimizer)
            on_start(key, now)
            step_now(optimizer, key, now)

        self.scaler_skipped = skipped
        self.step_now = step_now  # (Keras's own optimizer steps, `_keras.py`)

        self.optimizer_mod.register_optimizer_step_pre_hook(pre_hook)
        self.optimizer_mod.register_optimizer_step_post_hook(post_hook)

    def _hook_backward(self) -> None:
        self._backward_wrapper = make = backward_wrapper(self)
        patch(self.torch.Tensor, "backward", make)

    def _hook_dist_autograd(self) -> None:
        """Training over torch.distributed.rpc runs its backward through distributed autograd,
        `torch.distributed.autograd.backward(context_id, roots)`, not `Tensor.backward`, and steps a
        `DistributedOptimizer`, no torch optimizer: pytorch/examples' RPC parameter server trained
        its trainer 63 batches and recorded 0 steps. Its backward is the Tensor.backward wrapper's,
        on the first root (the loss): the steps are counted at each of them. (`import torch` imports
        the module: the attribute the script calls is in place before the script runs.)"""
        module = sys.modules.get("torch.distributed.autograd")
        if module is None or not callable(getattr(module, "backward", None)):
            return
        tensor_backward = self._backward_wrapper

        def make(original: Any) -> Any:
            def run(tensor: Any, context_id: Any, roots: Any, *args: Any, **kwargs: Any) -> Any:
                return original(context_id, roots, *args, **kwargs)

            timed = tensor_backward(run)

            def backward(context_id: Any, roots: Any, *args: Any, **kwargs: Any) -> Any:
                if not roots:  # (nothing to differentiate: the original says so)
                    return original(context_id, roots, *args, **kwargs)
                return timed(roots[0], context_id, roots, *args, **kwargs)

            return backward

        patch(module, "backward", make)

    def scale_of(self, tensor: Any) -> Any:
        """The scale tensor a GradScaler multiplied `tensor` (a loss about to go backward) by, else None.
        `scaler.scale(loss)` is `loss * scaler._scale`: the graph's last node saved that very tensor.
        Asked only where a scaler is enabled, and in the steps whose loss is read."""
        try:
            fn = tensor.grad_fn
            if fn is None or type(fn).__name__ != "MulBackward0":
                return None
            other = fn._saved_other
            for ref in self.scalers:
                scaler = ref()
                own = getattr(scaler, "_scale", None) if scaler is not None else None
                if own is not None and other.data_ptr() == own.data_ptr():
                    return other
        except Exception:  # a graph saved otherwise: the loss is read as it is
            return None
        return None

    def _hook_autograd_grad(self) -> None:
        """Count `torch.autograd.grad` calls: a loop that takes its gradients there (torch.func's grad,
        MAML, a hand-made update) steps no optimizer and calls no backward, so no step is ever seen.
        Only counted: the blind-spot note and the first step's progress say it (`_blind.py`)."""
        clock = self.agent.clock
        compiling, dynamo = self.compiling, self.dynamo

        def make(original: Any) -> Any:
            def grad(*args: Any, **kwargs: Any) -> Any:
                if not (dynamo[0] and compiling()):
                    clock.grads += 1
                return original(*args, **kwargs)

            return grad

        patch(self.torch.autograd, "grad", make)

    def _abandon_raised(self) -> None:
        """Optimizer steps whose frame left the stack raised (no post-hook came): the clock ends them.

        A walk up the stack at each backward, only while a step is open: a closure's
        backward (LBFGS: seconds each) or the first backward after a step raised."""
        clock = self.agent.clock
        code = self.step_code
        try:
            alive = set()  # frames on the stack, and the optimizers whose step wrapper runs
            frame = sys._getframe(1)
            while frame is not None:
                alive.add(id(frame))
                if frame.f_code is code:  # by the clock's key of that optimizer (`_optkeys.py`), not its id()
                    optimizer = _wrapper_optimizer(frame)
                    alive.add(self.optimizer_keys.serials.get(id(optimizer), id(optimizer)))
                frame = frame.f_back
            for key, token in list(clock.open_steps):
                if (id(token) if token is not None else key) not in alive:
                    clock.abandon(key)
                    break  # and every step opened inside it
        except Exception as err:
            self.agent.fail("the optimizer-step check", err)

    # ---- the model's root module ----------------------------------------------
    def watch_model(self) -> None:
        """Find the model and watch its forwards (at the first batch, and the agent at the first backward);
        then hide the code loaded by now, and the forward's wrapper, from torch.compile."""
        if self.root is not None:
            self.root.watch()
        if not self.keras:
            try:
                self.keras = hook_keras_optimizer(self)
            except Exception as err:
                self.agent.note("warn", "hooks", f"Keras optimizer steps not watched: {err}", once="keras")
                self.keras = True
        self.hide_frames()

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
