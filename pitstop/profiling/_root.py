"""Provides the model's root module: found among the GC's objects, its forwards watched for the step clock."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Callable, Mapping
from typing import Any

from pitstop.profiling._dynamo import compile_gate
from pitstop.profiling._dynamo import compiling as is_compiling
from pitstop.profiling._patch import Patch, patch, unpatch

_PERF = time.perf_counter


def leading_dim(batch: Any, tensor_type: type) -> int | None:
    """Samples in a batch: the leading dimension of its first tensor."""
    kind = type(batch)
    if (kind is tuple or kind is list) and batch and type(batch[0]) is tensor_type:  # (inputs, targets): per batch
        shape = batch[0].shape
        if shape:
            return shape[0]
    if isinstance(batch, tensor_type):
        return int(batch.shape[0]) if batch.dim() > 0 else None
    if isinstance(batch, (list, tuple)):
        for item in batch:
            found = leading_dim(item, tensor_type)
            if found is not None:
                return found
        return None
    if isinstance(batch, dict) or isinstance(batch, Mapping):  # (a dict first: the ABC's check is slower)
        # transformers' BatchEncoding (a tokenizer's `pad`, its collators) is a Mapping, not a dict.
        for item in batch.values():
            found = leading_dim(item, tensor_type)
            if found is not None:
                return found
    return None


def batch_dim(batch: Any, tensor_type: type, dim: int) -> int | None:
    """Samples in a sequence-first batch: dimension `dim` of its first tensor that has it."""
    if isinstance(batch, tensor_type):
        return int(batch.shape[dim]) if batch.dim() > dim else None
    items = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, (list, tuple)) else ()
    for item in items:
        found = batch_dim(item, tensor_type, dim)
        if found is not None:
            return found
    return None


def model_samples(inputs: Any, tensor_type: type, seq_first: bool) -> int | None:
    """Samples in a model's inputs, for a loop without a DataLoader: its batch dimension.

    A first input of one floating-point dimension is one unbatched sample (a
    policy fed one state a forward: pytorch/examples' actor_critic.py counted 4
    samples a move, its state's features); a batched one has two dimensions at
    least. One integer dimension stays a batch (the ids of a recommender's batch).
    """
    first = inputs[0] if type(inputs) is tuple and inputs else None
    if isinstance(first, tensor_type) and first.dim() == 1 and first.is_floating_point():
        return 1
    return batch_dim(inputs, tensor_type, 1) if seq_first else leading_dim(inputs, tensor_type)


def find_root(module_type: type) -> Any:
    """The outermost module with the most trainable parameters (see RootWatch.watch).

    One pass over the objects the GC tracks, twice per run, at the first batch and the
    first backward (step 0, never measured): ~0.1 s with transformers imported (200k objects).
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


class RootWatch:
    """The model's root module, found at the first DataLoader batch and again at the first backward."""

    def __init__(self, agent: Any, torch: Any) -> None:
        self.agent = agent
        self.torch = torch
        self._root: Any = None  # weakref to the root module
        self._seq_first = False
        self._watched: set[type] = set()  # classes whose __call__ is patched
        self._at_eval: list[Patch] = []  # `Module.train`'s patch until the model is found (`watch_at_eval`)

    def module(self) -> Any:
        """The root module found last, while it lives; None before (or after it was freed)."""
        return self._root() if self._root is not None else None

    def adopt(self, root: Any) -> None:
        """`root` is the model's root module from now on."""
        # Sequence-first models (an LSTM or Transformer with batch_first=False) take
        # (seq, batch, ...) inputs: the batch is their second dimension.
        self._seq_first = any(getattr(m, "batch_first", True) is False for m in root.modules())
        self._root = weakref.ref(root)

    def watch_at_eval(self, found: Callable[[], None]) -> None:
        """Call `found` (which watches the model) at the script's first `model.eval()` (`Module.train(False)`)
        if no DataLoader batch or backward found the model before: an evaluation before the first step
        without a DataLoader (nanoGPT's `estimate_loss` at iteration 0, a stable-baselines3 policy's first
        rollout) was not seen. The patch goes once the model is found: every module's `train()` passes
        through it (HF Trainer calls `model.train()` each step, once per submodule).
        """
        watcher = self
        agent = self.agent

        def make(original: Any) -> Any:
            def train(module: Any, mode: bool = True) -> Any:
                if not mode and watcher._at_eval:
                    watcher.stop_at_eval()
                    if watcher._root is None and not agent.disabled:
                        try:
                            found()
                        except Exception as err:  # never into the training loop
                            agent.note("warn", "hooks", f"model not watched: {err}", once="root-eval")
                return original(module, mode)

            return train

        try:
            self._at_eval.append(patch(self.torch.nn.Module, "train", make))
        except Exception as err:
            agent.note("warn", "hooks", f"model not watched at eval(): {err}", once="root-eval-hook")

    def stop_at_eval(self) -> None:
        """`Module.train` as it was (the model is found)."""
        while self._at_eval:
            unpatch(self._at_eval.pop())

    def watch(self) -> None:
        """Find the model and watch its forwards: at the first DataLoader batch and at the first backward.

        The root module is the outermost module with the most trainable
        parameters (no optimizer has stepped yet at the first backward). At the
        first batch it is found early enough to see an evaluation before the
        first step (ignite's evaluator at `Events.STARTED`); at the first backward
        again, for a model built after the first batch. Its class's `__call__` is
        patched (`_patch`, invisible) to tell the clock whether a forward of the root
        trains (grad on, train mode) or evaluates (and where an evaluating one ends),
        and to give samples (the batch dimension of its input) to loops that slice
        batches without a DataLoader. Nothing is stored on the model itself: a forward
        hook lives in the module's state, and `torch.save(model)` of pytorch/examples'
        word_language_model then failed pickling pitstop's hook.
        """
        try:
            root = find_root(self.torch.nn.Module)
        except Exception as err:
            self.agent.note("warn", "hooks", f"model not found: {err}", once="root")
            return
        if root is None:
            return
        self.stop_at_eval()
        self.adopt(root)
        cls = type(root)
        if cls in self._watched:
            return
        self._watched.add(cls)
        agent = self.agent
        clock = agent.clock
        grad_enabled = self.torch.is_grad_enabled
        tensor_type = self.torch.Tensor
        perf = _PERF
        watcher = self
        stamps = agent.stamps
        on_forward, on_forward_end = clock.on_forward, clock.on_forward_end
        compiling = is_compiling(self.torch)  # (`_dynamo.py`: a compiled function that calls the model)
        dynamo = compile_gate()

        hot = agent.hot  # [holding, ...] (`_hotflag.py`)

        def make(original: Any) -> Any:
            def __call__(module: Any, *args: Any, **kwargs: Any) -> Any:
                if hot[0]:  # holding: a training forward of the root, its batches from a loader: one stamp held
                    ref = watcher._root
                    try:
                        plain = ref is not None and ref() is module and module.training and grad_enabled() \
                            and clock.train_loader is not None
                    except Exception as err:  # never into the training loop
                        agent.fail("the model's forward hook", err)
                        plain = False
                    if plain:
                        stamps.append((on_forward, True, None, perf()))
                        return original(module, *args, **kwargs) if kwargs else original(module, *args)
                ref = watcher._root
                if ref is None or hot[5] or (dynamo[0] and compiling()):
                    return original(module, *args, **kwargs)
                root = ref()
                if module is not root:
                    if root is not None or type(module) is not cls:
                        return original(module, *args, **kwargs)
                    # The root was freed and a model of its class runs: the script built a new one (each
                    # fold of a k-fold cross-validation). Without it the later folds' batches had no
                    # samples and their evaluations were not seen (30 steps: 9 with samples, 1 eval of 3).
                    watcher.adopt(module)
                training = True
                try:
                    grad = grad_enabled()
                    train_mode = module.training
                    training = train_mode and grad
                    samples = None
                    if clock.train_loader is None:  # (an evaluation's samples tell a rollout's few: `_passes.py`)
                        samples = model_samples(args if args else kwargs, tensor_type, watcher._seq_first)
                    if training:
                        if hot[6]:  # held for the clock (`Agent.flush_stamps`)
                            stamps.append((on_forward, True, samples, perf()))
                        else:
                            clock.on_forward(True, samples, perf())
                    elif hot[6]:
                        stamps.append((on_forward, False, samples, perf(), not grad, not train_mode))
                    else:
                        clock.on_forward(False, samples, perf(), not grad, not train_mode)
                except Exception as err:  # never into the training loop
                    agent.fail("the model's forward hook", err)
                result = original(module, *args, **kwargs) if kwargs else original(module, *args)
                if not training:  # one store or one append: cannot raise
                    if hot[6]:
                        stamps.append((on_forward_end, perf()))
                    else:
                        clock.on_forward_end(perf())
                return result

            return __call__

        try:
            patch(cls, "__call__", make)
        except Exception as err:
            self.agent.note("warn", "hooks", f"model forwards not watched: {err}", once="root-hook")
