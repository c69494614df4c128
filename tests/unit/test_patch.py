"""Patched callables look like the originals: signature, names, descriptor kind, warning lines."""

from __future__ import annotations

import importlib.util
import inspect
import sys
import traceback
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Callable

import pytest

from pitstop.profiling import _patch

CALLS: list[str] = []


def _here() -> int:
    """The caller's current line (a warning's expected line is the next one)."""
    frame = inspect.currentframe()
    assert frame is not None and frame.f_back is not None
    return frame.f_back.f_lineno


class Base:
    def inherited(self, x: int) -> int:
        """Defined on the base only."""
        return x + 1


class Loader(Base):
    """A stand-in for torch's classes."""

    def __init__(self, dataset: list[int], batch_size: int | None = 1, *, shuffle: bool = False, workers: int = 0) -> None:
        """Builds a loader."""
        self.dataset = dataset
        self.batch_size = batch_size
        self.shuffle = shuffle

    def method(self, x: int, /, y: int = 2, *rest: int, **options: Any) -> int:
        """Adds."""
        return x + y

    @classmethod
    def make(cls, size: int = 3) -> Loader:
        """Builds one from a size."""
        return cls(list(range(size)))

    @staticmethod
    def helper(a: str, b: str = "b") -> str:
        """Joins."""
        return a + b

    def warns(self, warn: Callable[..., None] = warnings.warn) -> int:
        """Warns about the caller's line."""
        warn("careful", UserWarning, stacklevel=2)
        return 7

    def fails(self, err: BaseException) -> None:
        raise err


def pass_through(original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS.append(original.__name__)
        return original(*args, **kwargs)

    return wrapper


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    mine = set(map(id, _patch.patches()))
    CALLS.clear()
    yield
    for done in reversed(_patch.patches()):
        if id(done) not in mine:
            _patch.unpatch(done)


@pytest.mark.parametrize("name", ["__init__", "method", "make", "helper", "warns"])
def test_patched_callable_looks_like_the_original(name: str) -> None:
    raw = vars(Loader)[name]
    func = getattr(raw, "__func__", raw)
    func.marker = "kept"  # type: ignore[attr-defined]
    signature = inspect.signature(getattr(Loader, name))

    done = _patch.patch(Loader, name, pass_through)

    now = getattr(Loader, name)
    assert type(vars(Loader)[name]) is type(raw)  # classmethod stays classmethod, staticmethod stays staticmethod
    assert inspect.signature(now) == signature
    assert list(inspect.signature(Loader).parameters) == ["dataset", "batch_size", "shuffle", "workers"]
    wrapper = getattr(vars(Loader)[name], "__func__", vars(Loader)[name])
    assert wrapper is done.wrapper and done.original is func
    assert wrapper.__wrapped__ is func
    assert inspect.unwrap(now) is func
    for attr in ("__name__", "__qualname__", "__doc__", "__module__", "__annotations__"):
        assert getattr(wrapper, attr) == getattr(func, attr), attr
    assert wrapper.marker == "kept"
    assert inspect.getsource(now) == inspect.getsource(func)
    del func.marker  # type: ignore[attr-defined]


def test_patched_callables_still_work_and_call_the_wrapper() -> None:
    for name in ("__init__", "method", "make", "helper"):
        _patch.patch(Loader, name, pass_through)

    loader = Loader([1, 2], 4, shuffle=True)
    assert (loader.dataset, loader.batch_size, loader.shuffle) == ([1, 2], 4, True)
    assert loader.method(1, y=5) == 6
    made = Loader.make(size=2)
    assert type(made) is Loader and made.dataset == [0, 1]
    assert Loader.helper("a") == "ab" and loader.helper("x", b="y") == "xy"
    assert CALLS == ["__init__", "method", "make", "__init__", "helper", "helper"]


def test_warning_inside_the_original_points_at_the_callers_line() -> None:
    _patch.patch(Loader, "warns", pass_through)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        line = _here() + 1
        Loader([]).warns()
    assert [(w.filename, w.lineno) for w in caught] == [(__file__, line)]


def _pure_python_warnings() -> types.ModuleType:
    """Lib/warnings.py without its C accelerator: the other implementation of `stacklevel`."""
    saved = sys.modules.get("_warnings")
    sys.modules["_warnings"] = None  # type: ignore[assignment]
    try:
        spec = importlib.util.spec_from_file_location("_pitstop_test_py_warnings", warnings.__file__)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if saved is None:
            del sys.modules["_warnings"]
        else:
            sys.modules["_warnings"] = saved
    assert module.warn is not warnings.warn
    return module


def test_pure_python_warnings_also_skip_the_wrapper() -> None:
    py_warnings = _pure_python_warnings()
    seen: list[tuple[str, int]] = []
    py_warnings.warn_explicit = lambda message, category, filename, lineno, *a, **k: seen.append((filename, lineno))
    _patch.patch(Loader, "warns", pass_through)
    line = _here() + 1
    Loader([]).warns(py_warnings.warn)
    assert seen == [(__file__, line)]


def test_a_plain_closure_would_report_its_own_line() -> None:
    """The control: what pitstop's wrappers did before, and why this module exists."""
    original = vars(Loader)["warns"]
    wrapper = pass_through(original)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        wrapper(Loader([]))
    assert caught[0].filename == __file__
    assert caught[0].lineno == inspect.getsourcelines(pass_through)[1] + 3  # `return original(...)`


def test_exceptions_propagate_unchanged() -> None:
    _patch.patch(Loader, "fails", pass_through)
    err = KeyError("mine")
    with pytest.raises(KeyError) as info:
        Loader([]).fails(err)
    assert info.value is err
    stop = StopIteration()
    with pytest.raises(StopIteration) as info_stop:
        Loader([]).fails(stop)
    assert info_stop.value is stop


def test_tracebacks_show_the_wrappers_source(tmp_path: Path) -> None:
    # A wrapper from an ordinary module file (pytest's rewriting loader has no get_source).
    path = tmp_path / "some_hooks.py"
    path.write_text("def make(original):\n    def hook(*args):\n        return original(*args)  # the wrapper's line\n    return hook\n")
    spec = importlib.util.spec_from_file_location("some_hooks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    _patch.patch(Loader, "fails", module.make)
    try:
        Loader([]).fails(ValueError("boom"))
    except ValueError as err:
        text = "".join(traceback.format_exception(err))
    assert f'File "{path} (pitstop patch' in text
    assert "return original(*args)  # the wrapper's line" in text


def test_patching_twice_wraps_once() -> None:
    first = _patch.patch(Loader, "method", pass_through)
    second = _patch.patch(Loader, "method", pass_through)
    assert second is first
    assert Loader([]).method(1) == 3
    assert CALLS == ["method"]
    assert [p for p in _patch.patches() if p.owner is Loader] == [first]


def test_unpatch_puts_the_originals_back() -> None:
    before = dict(vars(Loader))
    for name in ("__init__", "method", "make", "helper", "inherited"):
        _patch.patch(Loader, name, pass_through)
    assert "inherited" in vars(Loader)  # the inherited method is covered on the class patched
    assert Loader([]).inherited(1) == 2 and CALLS[-1] == "inherited"

    for done in [p for p in _patch.patches() if p.owner is Loader]:
        _patch.unpatch(done)

    assert dict(vars(Loader)) == before
    assert Loader.inherited is Base.inherited
    assert not [p for p in _patch.patches() if p.owner is Loader]


def test_unpatch_all_restores_everything() -> None:
    module = types.ModuleType("fake_torch_module")
    exec("def util(x, *, scale=2):\n    'Scales.'\n    return x * scale\n", module.__dict__)
    original = module.util
    before = dict(vars(Loader))
    _patch.patch(Loader, "method", pass_through)
    _patch.patch(module, "util", pass_through)
    assert module.util is not original and module.util(3) == 6
    assert inspect.signature(module.util) == inspect.signature(original)

    _patch.unpatch_all()

    assert module.util is original
    assert dict(vars(Loader)) == before
    assert _patch.patches() == ()


def test_what_cannot_stay_invisible_is_refused() -> None:
    class Owner:
        @property
        def prop(self) -> int:
            return 1

        class Inner:
            pass

    with pytest.raises(TypeError, match="property"):
        _patch.patch(Owner, "prop", pass_through)
    with pytest.raises(TypeError, match="type"):
        _patch.patch(Owner, "Inner", pass_through)
    with pytest.raises(TypeError, match="Python function"):
        _patch.patch(Loader, "method", lambda original: len)
    with pytest.raises(AttributeError):
        _patch.patch(Loader, "missing", pass_through)
    assert "Inner" in vars(Owner) and vars(Loader)["method"].__name__ == "method"
