"""A GPU training loop of ~PITSTOP_GPU_STEP_MS ms steps (10 by default) for the agent's overhead on a GPU.

    PITSTOP_AB_WORKLOAD=_workload_gpu PITSTOP_GPU_STEP_MS=1 pitstop run ... _overhead_ab.py ...

`_overhead_ab.py` imports `build` and `train_step` from here instead of
`_workload_10ms` (gpu_acceptance.py sets PITSTOP_AB_WORKLOAD). An MLP whose
batch is sized at start so that a step takes the wanted time; the batches are
made on the GPU once and served by a DataLoader (batch_size=None, in the main
process), so the agent's DataLoader timer runs each step as in real loops and
no host work hides its cost. No sync per step: like most training loops the
host runs ahead of the GPU until CUDA's launch queue is full, then at the GPU's
pace; a 1 ms step of this small model is host-bound, where the agent's own
host time shows in full. Falls back to the CPU where there is no GPU (a check
of the harness only).
"""
import contextlib
import os
import time
from collections.abc import Iterator

import torch
from torch.utils.data import DataLoader, Dataset

STEP_MS = float(os.environ.get("PITSTOP_GPU_STEP_MS", "10"))
# Wide for 10 ms (matmul-bound), narrow for 1 ms (launch-bound: ~20 kernels a step); on a CPU
# (a check of the harness) narrow enough for the sizing to reach the step time at all.
WIDTH = (4096 if STEP_MS >= 5 else 1024) if torch.cuda.is_available() else 256
BATCHES = 8  # distinct batches, served in turn


class Served(Dataset):
    """`steps` items, each one of a few batches already on the device."""

    def __init__(self, batches: list[tuple[torch.Tensor, torch.Tensor]], steps: int) -> None:
        self.batches = batches
        self.steps = steps

    def __len__(self) -> int:
        return self.steps

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.batches[i % len(self.batches)]


def train_step(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> None:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()


def _batch(batch: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(batch, WIDTH, device=device), torch.randint(0, 10, (batch,), device=device)


def _step_seconds(model: torch.nn.Module, opt: torch.optim.Optimizer, batch: int, device: torch.device) -> float:
    x, y = _batch(batch, device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(3):
        train_step(model, opt, x, y)
    sync()
    start = time.perf_counter()
    for _ in range(10):
        train_step(model, opt, x, y)
    sync()
    return (time.perf_counter() - start) / 10


@contextlib.contextmanager
def _uncounted() -> Iterator[None]:
    """The sizing steps are not the workload's: under `pitstop run` the agent passes them through uncounted."""
    try:
        from pitstop.profiling import agent as agent_mod

        agent = agent_mod.current()
    except ImportError:
        agent = None
    if agent is not None:
        agent.disabled = True
    try:
        yield
    finally:
        if agent is not None:
            agent.disabled = False


def build(steps: int) -> tuple[torch.nn.Module, torch.optim.Optimizer, DataLoader]:
    torch.manual_seed(0)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU(), torch.nn.Linear(WIDTH, WIDTH),
                                torch.nn.ReLU(), torch.nn.Linear(WIDTH, 10)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
    # Two rounds of sizing: step time is about linear in the batch above the launch-bound floor.
    batch = 256
    with _uncounted():
        for _ in range(2):
            took = _step_seconds(model, opt, batch, device)
            batch = max(8, min(1 << 16, int(batch * STEP_MS / 1000.0 / took)))
    data = [_batch(batch, device) for _ in range(BATCHES)]
    return model, opt, DataLoader(Served(data, steps), batch_size=None)
