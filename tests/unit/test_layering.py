"""Import hygiene: every module of each room imports only what the house plan allows (DESIGN.md, issue 13).

Two views of the same rules. At run time, every module of a room (found with
pkgutil) is imported in a fresh interpreter and `sys.modules` is checked: that
is what a user pays for, transitive imports included. Statically, the import
graph of the whole package is built with `ast`, imports inside functions
included (they run, only later) and `if TYPE_CHECKING:` blocks left out (they
never run): that is where a cycle or a front reaching into another front shows
even when the import is lazy.

The fronts render one event stream each their own way, and none imports
another: `tui`, `headless`, `report`, `compare` and `doctor`. `tuning` is not a
front but a room (search, trials, journal) that both the `pitstop tune` command
and the TUI's Trials view use, so the TUI may import it and it never imports
the TUI. `cli` (the entry point) and `runflow` (one `pitstop run`) choose a
front and are not fronts themselves.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import json
import pkgutil
import subprocess
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

import pitstop

from .forked import run_forked

# Every room's import check reads one batch of forked children: on one xdist worker, it runs once.
pytestmark = pytest.mark.xdist_group("layering")
HEAVY = ("torch", "textual", "rich")
# What importing every module of a room must not load (DESIGN.md "Layering").
# Every room is listed, so a new room is classified when it is added.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "pitstop": HEAVY,  # `import pitstop; pitstop.step()` in a user's script costs nothing
    "_version": HEAVY,
    "errors": HEAVY,
    "events": HEAVY,
    "config": HEAVY,
    "analysis": HEAVY,
    "profiling": ("textual", "rich"),
    "tuning": ("textual", "rich", "pitstop.tui"),
    "tui": ("torch",),
    "headless": HEAVY,
    "recorded": HEAVY,
    "compare": HEAVY,
    "report": HEAVY,
    "runflow": HEAVY,  # the TUI is imported only once it is chosen
    "cli": HEAVY,  # `pitstop ls` or `pitstop --help` must not pay for torch or textual
    "doctor": ("textual", "rich"),
    "_doctor_probes": ("textual", "rich"),
    "demo": (),  # the training workload itself: torch is the point
    "docs": HEAVY,  # `pitstop docs` prints shipped files (stdlib only)
    "streams": HEAVY,  # StreamBatch: what every source yields, below analysis and profiling
    "jsonshape": HEAVY,  # the type checks of decoding
    "stepcolumns": HEAVY,  # a record's `steps` lines, encoded by the agent's writer
    "charts": HEAVY,  # text charts with plotext (no rich, no textual)
    "keeper": HEAVY,  # the index keeper beside a run: reads records, folds them, never torch
    "stackscmd": HEAVY,  # `pitstop stacks`: records, sockets and py-spy, never torch
}
# The agent's parts that a viewer also imports (launch, sources, record) or that
# import torch only once the user's script has (agent, stepclock, _patch).
TORCH_FREE_PROFILING = (
    "pitstop.profiling.agent", "pitstop.profiling._hello", "pitstop.profiling.stepclock",
    "pitstop.profiling._stepcut", "pitstop.profiling._patch",
    "pitstop.profiling.launch", "pitstop.profiling.cmdline", "pitstop.profiling.record",
    "pitstop.profiling.rundir", "pitstop.profiling.sources", "pitstop.profiling.transport",
)
FRONTS = ("tui", "headless", "report", "compare", "doctor")
ENTRY_POINT = "pitstop.cli"
# Analysis runs in the viewers, not inside the user's training process (issue 13,
# seam 7), and the readers the viewers share sit below it.
SITECUSTOMIZE = ("profiling/bootstrap/sitecustomize.py", "tuning/guardsite/sitecustomize.py")
PACKAGE_DIR = Path(pitstop.__file__).parent


def room_of(module: str) -> str:
    """`pitstop.tui.screens.log` -> "tui"; the package itself is the room "pitstop"."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "pitstop"


@cache
def rooms() -> dict[str, tuple[str, ...]]:
    """Every room of the package and the modules in it, found with pkgutil."""
    found: dict[str, tuple[str, ...]] = {"pitstop": ("pitstop",)}
    for info in pkgutil.iter_modules(pitstop.__path__):
        name = f"pitstop.{info.name}"
        names = [name]
        if info.ispkg:
            package = importlib.import_module(name)
            names += [sub.name for sub in pkgutil.walk_packages(package.__path__, name + ".")]
        found[info.name] = tuple(names)
    return found


LOADED = """
import importlib, json, sys, traceback
try:
    for name in json.loads(sys.argv[1]):
        importlib.import_module(name)
except Exception:
    print(json.dumps({"error": traceback.format_exc()}))
else:
    print(json.dumps({"loaded": sorted(sys.modules)}))
"""


@cache
def loaded_after_importing_each() -> dict[tuple[str, ...], dict[str, object]]:
    """`sys.modules` of a fresh interpreter that imported each room's modules (and TORCH_FREE_PROFILING's).

    Each is a child forked from one interpreter that has imported only what a `python -c` of this code
    does (json, traceback): a room's imports are its own, as in a fresh process, where 37 interpreters
    had each started on their own (~1.3 s of CPU)."""
    groups = [rooms()[room] for room in sorted(FORBIDDEN)] + [TORCH_FREE_PROFILING]
    outs = run_forked("", [(LOADED, [json.dumps(list(modules))]) for modules in groups], timeout=120)
    return {modules: json.loads(out.strip().splitlines()[-1]) for modules, out in zip(groups, outs)}


def loaded_after_importing(modules: tuple[str, ...]) -> set[str]:
    """`sys.modules` of a fresh interpreter that imported `modules` (a room's, or TORCH_FREE_PROFILING)."""
    result = loaded_after_importing_each()[modules]
    assert "error" not in result, f"importing {modules}: {result['error']}"
    return set(result["loaded"])  # type: ignore[arg-type]


def hits(loaded: set[str], forbidden: tuple[str, ...]) -> list[str]:
    return sorted(f for f in forbidden if any(m == f or m.startswith(f + ".") for m in loaded))


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement that can run: inside functions too, never under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            yield from (n for child in node.orelse for n in _imports_in(child))
            continue
        yield from _imports_in(node)


def _imports_in(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        yield node
    else:
        yield from _imports(node)


def _every_import(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, those under `if TYPE_CHECKING:` included."""
    yield from (n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)))


@cache
def import_graph(typed: bool = False) -> dict[str, frozenset[str]]:
    """Module -> the pitstop modules it imports (a `from pkg import name` names pkg.name when that is a module).

    `typed`: type-only imports count too."""
    modules = {name for names in rooms().values() for name in names}
    graph: dict[str, frozenset[str]] = {}
    for module in modules:
        spec = importlib.util.find_spec(module)
        assert spec is not None and spec.origin is not None, module
        is_package = spec.submodule_search_locations is not None
        targets: set[str] = set()
        for node in (_every_import if typed else _imports)(ast.parse(Path(spec.origin).read_text(), spec.origin)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[: len(base) - node.level + 1] if node.level else []
                prefix = ".".join([*base, *([node.module] if node.module else [])])
                names = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in modules else prefix for a in node.names]
            for name in names:
                while name not in modules and "." in name:
                    name = name.rsplit(".", 1)[0]
                if name in modules and name != module:
                    targets.add(name)
        graph[module] = frozenset(targets)
    return graph


def cycles(graph: dict[str, frozenset[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def edges_between(component: list[str], graph: dict[str, frozenset[str]]) -> list[str]:
    members = set(component)
    return sorted(f"{a} -> {b}" for a in graph for b in graph[a] if a in members and b in members)


def test_every_room_is_classified() -> None:
    assert set(rooms()) == set(FORBIDDEN), "classify the new room in FORBIDDEN (and DESIGN.md)"


@pytest.mark.parametrize("room", sorted(FORBIDDEN))
def test_every_module_of_a_room_imports_only_what_the_plan_allows(room: str) -> None:
    fronts = [f"pitstop.{f}" for f in FRONTS if f != room] if room in FRONTS else []
    loaded = loaded_after_importing(rooms()[room])
    bad = hits(loaded, FORBIDDEN[room] + tuple(fronts))
    assert not bad, f"importing the modules of {room} loads {bad}"


def test_the_readers_and_the_agents_lifecycle_import_no_torch() -> None:
    assert not hits(loaded_after_importing(TORCH_FREE_PROFILING), ("torch",))


def test_a_pitstop_run_command_line_loads_neither_the_tuner_nor_the_doctor() -> None:
    # Their options were built for every command: 0.073 s of CPU a `pitstop run` paid before its script started.
    # `pitstop run` without a script: its whole command line is parsed, and nothing runs.
    code = ("import json, sys\nfrom pitstop.cli import main\n"
            "print(json.dumps([main(['run', '--headless']), sorted(sys.modules)]))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    exit_code, loaded = json.loads(result.stdout)
    assert exit_code == 2 and "give a script" in result.stderr, result.stderr
    assert not hits(set(loaded), ("pitstop.tuning.command", "pitstop.doctor"))
    from pitstop.cli import _parser

    # ...and each still has its own options where it runs.
    assert _parser("tune").parse_args(["tune", "--budget", "5", "--knobs", "threads"]).budget == "5"
    assert _parser("doctor").parse_args(["doctor", "--json"]).json is True


def test_no_front_imports_another() -> None:
    graph = import_graph()
    crossings = sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                       if room_of(a) in FRONTS and room_of(b) in FRONTS and room_of(a) != room_of(b))
    assert not crossings, "a front imports another front (move what they share below both): " + "; ".join(crossings)


def test_nothing_imports_the_cli_but_the_entry_point() -> None:
    graph = import_graph()
    importers = sorted(module for module, targets in graph.items() if ENTRY_POINT in targets)
    assert not importers, f"{ENTRY_POINT} is the entry point only; imported by {importers}"


def test_no_import_cycle_between_modules() -> None:
    graph = import_graph()
    found = [edges_between(c, graph) for c in cycles(graph)]
    assert not found, f"import cycles: {found}"


def test_no_import_cycle_between_modules_even_through_type_only_imports() -> None:
    # A cycle held up only by `if TYPE_CHECKING:` still makes two modules that cannot be read
    # apart: the tuner's confirmation took its state from the search that mixed it in.
    graph = import_graph(typed=True)
    found = [edges_between(c, graph) for c in cycles(graph)]
    assert not found, f"import cycles (type-only imports counted): {found}"


def test_no_import_cycle_between_rooms() -> None:
    graph = import_graph()
    by_room: dict[str, set[str]] = {}
    for module, targets in graph.items():
        by_room.setdefault(room_of(module), set()).update(room_of(t) for t in targets if room_of(t) != room_of(module))
    found = []
    for component in cycles({room: frozenset(targets) for room, targets in by_room.items()}):
        members = set(component)
        found.append(sorted(f"{a} -> {b}" for a, targets in graph.items() for b in targets
                            if room_of(a) in members and room_of(b) in members and room_of(a) != room_of(b)))
    assert not found, f"rooms that import each other: {found}"


def test_the_agent_room_does_not_import_analysis() -> None:
    graph = import_graph()
    reached = sorted((a, b) for a, targets in graph.items() for b in targets
                     if room_of(a) == "profiling" and room_of(b) == "analysis")
    bad = [f"{a} -> {b}" for a, b in reached]
    assert not bad, f"profiling imports analysis: {bad}"


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert cycles(graph) == [["a", "b", "c"]]


@pytest.mark.parametrize("relative", SITECUSTOMIZE)
def test_each_sitecustomize_imports_only_the_standard_library(relative: str) -> None:
    path = PACKAGE_DIR / relative
    outside = set()
    for node in _imports(ast.parse(path.read_text(), str(path))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
        outside.update(n.split(".")[0] for n in names if n.split(".")[0] not in ("pitstop", ""))
    assert outside <= set(sys.stdlib_module_names), outside - set(sys.stdlib_module_names)
