"""A CPU training loop of ~1 ms steps, the pace of a small model on a GPU (used by overhead.py).

    python _workload_1ms.py STEPS OUT.json

The same loop as `_workload_10ms.py` (an MLP, a DataLoader over in-memory
tensors, SGD) at a tenth of the work a step: where the agent's fixed cost per
step is largest as a share. `_overhead_ab.py` imports `build` and `train_step`
(PITSTOP_AB_WORKLOAD=_workload_1ms).
"""
from __future__ import annotations

import functools

from _workload_10ms import build as build_mlp  # the same model, data, step and timing loop, smaller
from _workload_10ms import main, train_step  # noqa: F401  (`_overhead_ab.py` imports train_step from here)

# ~1 ms a step on one core of the 2-core dev VM (0.94 ms median; 3.1 ms at width 256)
build = functools.partial(build_mlp, width=128, batch=32, features=128)


if __name__ == "__main__":
    main(build)
