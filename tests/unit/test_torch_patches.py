"""Every torch callable pitstop patches still looks like torch's own (fresh interpreter, real torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

# Runs in a fresh interpreter: patches torch for real, reports what a framework would see.
SCRIPT = """
import inspect, json, warnings
import torch
import torch.nn.parallel
import torch.utils.data.dataloader as dl
from pitstop.profiling import _patch

TARGETS = [
    (dl.DataLoader, "__init__"),
    (dl._BaseDataLoaderIter, "__next__"),
    (dl._MultiProcessingDataLoaderIter, "__init__"),
    (torch.Tensor, "backward"),
    (torch.nn.Conv2d, "__init__"),
    (torch.amp.GradScaler, "__init__"),
    (torch.nn.DataParallel, "__init__"),
    (torch.nn.parallel.DistributedDataParallel, "__init__"),
    (torch.autocast, "__enter__"),
]
ATTRS = ("__name__", "__qualname__", "__doc__", "__module__")
calls = []

def through(original):
    def wrapper(*args, **kwargs):
        calls.append(original.__qualname__)
        return original(*args, **kwargs)
    return wrapper

def scaler_warnings():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.amp.GradScaler()  # SCALER LINE
        torch.amp.GradScaler("cuda")
    return [(w.category.__name__, w.filename, w.lineno) for w in caught]

def seen(owner, name):
    func = getattr(owner, name)
    return inspect.signature(func), {a: getattr(func, a) for a in ATTRS}

before = {t: seen(*t) for t in TARGETS}
originals = {t: getattr(*t) for t in TARGETS}
loader_params = list(inspect.signature(dl.DataLoader).parameters)
warned_before = scaler_warnings()

for owner, name in TARGETS:
    _patch.patch(owner, name, through)

problems = []
for (owner, name), (signature, attrs) in before.items():
    where = owner.__qualname__ + "." + name
    now = getattr(owner, name)
    if now is originals[(owner, name)]:
        problems.append(where + ": not patched")
    if now.__wrapped__ is not originals[(owner, name)]:
        problems.append(where + ": __wrapped__ is not the original")
    now_signature, now_attrs = seen(owner, name)
    if now_signature != signature:
        problems.append(f"{where}: signature {now_signature} != {signature}")
    problems += [f"{where}: {a} differs" for a in ATTRS if now_attrs[a] != attrs[a]]
if list(inspect.signature(dl.DataLoader).parameters) != loader_params:
    problems.append("DataLoader's class signature changed")

# The patched callables still run (single-process loader: no worker start-up).
data = torch.utils.data.TensorDataset(torch.arange(4.0))
batches = [b[0].tolist() for b in dl.DataLoader(data, batch_size=2)]
loss = torch.nn.Conv2d(1, 1, 1)(torch.ones(1, 1, 2, 2)).sum()
loss.backward()
with torch.autocast("cpu"):
    pass

print(json.dumps({
    "problems": problems,
    "warned_before": warned_before,
    "warned_after": scaler_warnings(),
    "scaler_line": SCALER_LINE,
    "batches": batches,
    "calls": sorted(set(calls)),
}))
"""


@pytest.fixture(scope="module")
def report() -> dict:
    lines = SCRIPT.splitlines()
    scaler_line = next(i for i, text in enumerate(lines, 1) if "# SCALER LINE" in text)
    script = SCRIPT.replace("SCALER_LINE", str(scaler_line))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_patched_torch_callables_look_like_the_originals(report: dict) -> None:
    assert report["problems"] == []


def test_patched_torch_callables_still_run_through_the_wrappers(report: dict) -> None:
    assert report["batches"] == [[0.0, 1.0], [2.0, 3.0]]
    assert set(report["calls"]) >= {
        "DataLoader.__init__",
        "_BaseDataLoaderIter.__next__",
        "Tensor.backward",
        "Conv2d.__init__",
        "GradScaler.__init__",
        "autocast.__enter__",
    }


def test_grad_scaler_warnings_keep_the_users_line(report: dict) -> None:
    # On this CPU machine torch.cuda.amp.GradScaler() warns that it is deprecated
    # (at the caller) and that CUDA is unavailable (stacklevel=2, from inside the
    # patched torch.amp.GradScaler.__init__: a plain closure would take that line).
    before, after, line = report["warned_before"], report["warned_after"], report["scaler_line"]
    assert after == before
    assert ["FutureWarning", "<string>", line] in after
    assert ["UserWarning", "<string>", line + 1] in after
    assert not [w for w in after if "pitstop" in w[1]]
