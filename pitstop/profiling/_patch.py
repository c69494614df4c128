"""Provides invisible patching of torch callables: same signature, names, docs and warning lines."""

from __future__ import annotations

import functools
import threading
import types
from dataclasses import dataclass
from typing import Any, Callable

# How a wrapper stays out of warnings' `stacklevel` count.
#
# CPython's warnings machinery skips "internal" frames while it walks up
# `stacklevel` frames: a frame whose code filename contains both "importlib"
# and "_bootstrap" (Lib/warnings.py `_is_internal_frame` / `_next_external_frame`,
# read in this interpreter's 3.11.7; Python/_warnings.c `is_internal_filename`
# for the C `warnings.warn` actually in use). The skip applies to every frame
# above the warning's caller when stacklevel > 1, so `warnings.warn(msg,
# stacklevel=2)` inside an original that a pitstop wrapper calls lands on the
# user's line, exactly as without pitstop. Checked with both the C and the
# pure-Python `warn` on CPython 3.10.13, 3.11.7, 3.12.1 and 3.13.0
# (tests/unit/test_patch.py does it on the running one); logging's
# `findCaller(stacklevel=N)` skips such frames too, from 3.11 on only.
#
# The frame to hide is the wrapper's own: it is the frame that calls the
# original. A trampoline compiled under such a filename (`call(original, hook,
# ...)`) would hide only itself, not the hook that calls the original, and
# splitting hooks into before/after callbacks so that the trampoline calls the
# original costs two extra calls per batch. Instead the wrapper function is
# rebuilt around a copy of its own code object whose only change is
# `co_filename` (its real path plus the marker below): no extra frame at all,
# and the line numbers still point into the real file. The `traceback` module
# (pytest, logging) shows the wrapper's source lines through linecache's lazy
# loader, since the filename is not of the `<...>` form; the interpreter's own
# uncaught-exception printer shows the frame without its line on 3.10-3.12
# (3.13 prints through `traceback`, with it). The price: coverage and
# breakpoints no longer see the wrapper bodies under their real file.
_HIDDEN_MARK = " (pitstop patch; frames hidden from warnings like importlib._bootstrap)"

# Cost (timeit, CPython 3.11.7 on this shared 2-core CPU box, best of 40 x 200k
# `next(it)` calls, order alternated): unpatched 55 ns; wrapped by the plain
# closure pitstop used before, stamping two perf_counter() times, 224 ns; the same
# closure through `patch` 217-229 ns, i.e. no difference beyond noise: the
# rebuilt wrapper is the closure itself, no extra Python call. The trampoline
# alternative (`call(original, hook, *args, **kwargs)`) cost 480-530 ns: its
# extra frame plus packing *args/**kwargs. Against a DataLoader batch (tens of
# microseconds at least) the wrapper is noise either way.

_MISSING = object()


@dataclass(frozen=True, eq=False)
class Patch:
    """One attribute pitstop replaced: where, what was there, what is there now."""

    owner: Any  # a class or a module
    name: str
    original: Callable[..., Any]  # the callable the wrapper calls (unwrapped from classmethod/staticmethod)
    wrapper: Callable[..., Any]  # the function that replaced it (likewise unwrapped)
    replaced: Any  # the raw attribute in owner's own __dict__, or _MISSING when it was inherited


_lock = threading.RLock()  # re-entrant: a make_wrapper may itself patch
_registry: dict[tuple[int, str], Patch] = {}  # (id(owner), name); the Patch keeps the owner alive


def _hide_code(code: types.CodeType) -> types.CodeType:
    """The same code under a filename that warnings treat as internal (nested code too)."""
    if _HIDDEN_MARK in code.co_filename:
        return code
    consts = tuple(_hide_code(c) if isinstance(c, types.CodeType) else c for c in code.co_consts)
    return code.replace(co_filename=code.co_filename + _HIDDEN_MARK, co_consts=consts)


def _invisible(wrapper: Callable[..., Any], original: Callable[..., Any]) -> types.FunctionType:
    """The wrapper, rebuilt so that warnings skip its frame, dressed as the original."""
    if not isinstance(wrapper, types.FunctionType):
        raise TypeError(f"make_wrapper must return a Python function, not {type(wrapper).__name__}")
    hidden = types.FunctionType(
        _hide_code(wrapper.__code__),
        wrapper.__globals__,
        wrapper.__name__,
        wrapper.__defaults__,
        wrapper.__closure__,
    )
    hidden.__kwdefaults__ = wrapper.__kwdefaults__
    hidden.__dict__.update(wrapper.__dict__)
    # __module__, __name__, __qualname__, __doc__, __annotations__ (and
    # __type_params__ from 3.12), the original's __dict__, and __wrapped__,
    # which `inspect.signature` follows to the original's signature.
    return functools.update_wrapper(hidden, original)


def _lookup(owner: Any, name: str) -> tuple[Any, Any]:
    """(raw attribute as the owner resolves it, raw attribute in its own __dict__ or _MISSING)."""
    own = vars(owner).get(name, _MISSING)
    if own is not _MISSING:
        return own, own
    for klass in getattr(owner, "__mro__", ())[1:]:
        if name in vars(klass):
            return vars(klass)[name], _MISSING
    raise AttributeError(f"{owner!r} has no attribute {name!r}")


def patch(owner: Any, name: str, make_wrapper: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Patch:
    """Replace `owner.<name>` with `make_wrapper(original)`, invisibly; once per (owner, name).

    `owner` is a class (the attribute a plain function, classmethod, staticmethod
    or builtin method, own or inherited) or a module (a function attribute).
    `make_wrapper` returns a Python function that calls `original` itself, in its
    own body: that frame is the one hidden from warnings (a helper that calls
    `original` for it would show). The descriptor kind is kept; a second call
    for the same (owner, name) returns the first Patch and wraps nothing.
    """
    key = (id(owner), name)
    with _lock:
        done = _registry.get(key)
        if done is not None:
            return done
        raw, replaced = _lookup(owner, name)
        if isinstance(raw, (classmethod, staticmethod)):
            original = raw.__func__
            wrapper = _invisible(make_wrapper(original), original)
            installed: Any = type(raw)(wrapper)
        elif callable(raw) and not isinstance(raw, type):
            original = raw
            wrapper = installed = _invisible(make_wrapper(original), original)
        else:
            # A property or a class swapped for a function would not stay invisible.
            raise TypeError(f"cannot patch {name!r} of {owner!r}: {type(raw).__name__} is not a function")
        setattr(owner, name, installed)
        done = Patch(owner=owner, name=name, original=original, wrapper=wrapper, replaced=replaced)
        _registry[key] = done
        return done


def patches() -> tuple[Patch, ...]:
    """Every patch in place, oldest first."""
    with _lock:
        return tuple(_registry.values())


def unpatch(done: Patch) -> None:
    """Put one original back (tests; a patch needed only until the model is found, `RootWatch.watch_at_eval`);
    a patch no longer in place is left alone."""
    key = (id(done.owner), done.name)
    with _lock:
        if _registry.get(key) is done:
            _restore(done)
            del _registry[key]


def unpatch_all() -> None:
    """Put every original back, newest first (for tests)."""
    with _lock:
        for done in reversed(list(_registry.values())):
            _restore(done)
        _registry.clear()


def _restore(done: Patch) -> None:
    if done.replaced is _MISSING:
        delattr(done.owner, done.name)  # it was inherited: uncover the base's again
    else:
        setattr(done.owner, done.name, done.replaced)
