"""Trains with gradients taken by torch.autograd.grad or torch.func and a hand-made update: no optimizer, no backward().

    python train_by_hand.py autograd|func ITERATIONS

The shapes of MAML loops (`p.data -= lr * g`, pytorch/pytorch's functorch MAML
regression) and of functorch's ensembling example (torch.func's grad_and_value on
`functional_call`): pitstop sees no step, and must say so.
"""

from __future__ import annotations

import sys

import torch
from torch.func import functional_call, grad_and_value


def main() -> None:
    how, iterations = sys.argv[1], int(sys.argv[2])
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    params = {name: p.detach().clone().requires_grad_(True) for name, p in model.named_parameters()}

    def loss_of(ps: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(functional_call(model, ps, (x,)), y)

    loss = torch.tensor(0.0)
    for _ in range(iterations):
        if how == "autograd":
            loss = loss_of(params)
            grads = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        else:
            grads, loss = grad_and_value(loss_of)(params)
        with torch.no_grad():
            for name, p in params.items():
                p -= 0.05 * grads[name]
    print(f"trained by hand ({how}): {iterations} iterations, last loss {loss.item():.4f}", flush=True)


if __name__ == "__main__":
    main()
