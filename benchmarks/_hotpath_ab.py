"""In-process A/B of the agent's hot path: hooks on and off in alternate blocks of 100 steps (used by overhead.py)."""
import statistics, time, sys
import torch
from torch.utils.data import DataLoader, TensorDataset
from pitstop.profiling import agent as agent_mod
torch.set_num_threads(1)
a = agent_mod.current()
h = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
model = torch.nn.Sequential(torch.nn.Linear(256, h), torch.nn.ReLU(), torch.nn.Linear(h, h), torch.nn.ReLU(), torch.nn.Linear(h, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
data = TensorDataset(torch.randn(64 * 4000, 256), torch.randint(0, 10, (64 * 4000,)))
it = iter(DataLoader(data, batch_size=64))
res = {True: [], False: []}
for block in range(int(sys.argv[2]) if len(sys.argv) > 2 else 24):
    off = block % 2 == 0
    a.disabled = off
    times = []
    last = time.perf_counter()
    for _ in range(100):
        x, y = next(it)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad(); loss.backward(); opt.step()
        now = time.perf_counter(); times.append(now - last); last = now
    res[off].append(statistics.median(times[5:]))
a.disabled = False
on, off = statistics.median(res[False]), statistics.median(res[True])
print(f"hooks on {on*1e3:.3f} ms, off {off*1e3:.3f} ms, per-step cost {(on-off)*1e6:.1f} us, ratio {on/off:.4f}")
