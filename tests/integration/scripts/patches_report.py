"""Prints, as JSON, how every callable pitstop patched in this process compares with its original."""

import inspect
import json
import warnings

import torch
import torch.utils.data

from pitstop.profiling._patch import patches

# A torch optimizer's constructor imports torch._dynamo, where pitstop patches its tracer's constructor.
torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)


def signature(f: object) -> str:
    """The signature inspect shows, or what it raises (a pybind builtin has none, patched or not)."""
    try:
        return str(inspect.signature(f))
    except ValueError as err:
        return f"raises {type(err).__name__}"


rows = []
for done in patches():
    current = inspect.getattr_static(done.owner, done.name)
    if isinstance(done.replaced, (classmethod, staticmethod)):
        kind_kept = type(current) is type(done.replaced)
    else:
        kind_kept = not isinstance(current, (classmethod, staticmethod))
    shown = getattr(done.owner, done.name)
    rows.append({
        "name": f"{getattr(done.owner, '__qualname__', done.owner.__name__)}.{done.name}",
        "signature": signature(shown) == signature(done.original),
        "wrapped": getattr(shown, "__wrapped__", None) is done.original,
        "names": all(getattr(done.wrapper, a) == getattr(done.original, a)
                     for a in ("__name__", "__qualname__", "__doc__", "__module__")),
        "kind": kind_kept,
    })
# A warning raised inside a patched constructor still points at this line.
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.cuda.amp.GradScaler()  # deprecated, and disabled without CUDA: warns
lines = sorted({(w.filename.rsplit("/", 1)[-1], w.lineno) for w in caught})
print(json.dumps({"patches": rows, "warning_lines": lines}))
