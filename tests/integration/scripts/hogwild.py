"""Hogwild training as pytorch/examples' mnist_hogwild: N multiprocessing children train one shared model.

Usage: hogwild.py START_METHOD PROCESSES STEPS [pool]. Each child prints one
line per optimizer step ("child PID step I") and the parent never steps.
"""
import os
import sys

import torch
import torch.multiprocessing as mp


def train(model: torch.nn.Module, steps: int) -> int:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps):
        x = torch.randn(32, 16)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        os.write(1, f"child {os.getpid()} step {i}\n".encode())  # one write: lines of two children never mix
    return steps


def pool_task(steps: int) -> int:
    return train(torch.nn.Linear(16, 1), steps)


if __name__ == "__main__":
    method, processes, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    ctx = mp.get_context(method)
    if len(sys.argv) > 4 and sys.argv[4] == "pool":
        with ctx.Pool(processes) as pool:
            done = pool.map(pool_task, [steps] * processes)
        print(f"hogwild pool done: {sum(done)} steps")
        sys.exit(0)
    model = torch.nn.Linear(16, 1)
    model.share_memory()
    children = [ctx.Process(target=train, args=(model, steps)) for _ in range(processes)]
    for p in children:
        p.start()
    for p in children:
        p.join()
    assert all(p.exitcode == 0 for p in children), [p.exitcode for p in children]
    print(f"hogwild done: {processes} children")
