"""Import hygiene: each headless room imports only what the house plan allows."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

FORBIDDEN = {
    "pitstop.events": ("torch", "textual", "rich"),
    "pitstop.errors": ("torch", "textual", "rich"),
    "pitstop.config": ("torch", "textual", "rich"),
    "pitstop.analysis": ("torch", "textual", "rich"),
    "pitstop.headless": ("torch", "textual", "rich"),
    "pitstop.profiling.agent": ("torch", "textual", "rich"),
    "pitstop.profiling.record": ("torch", "textual", "rich"),
    "pitstop.profiling.transport": ("torch", "textual", "rich"),
    "pitstop.profiling.sources": ("torch", "textual", "rich"),
    "pitstop.profiling.windows": ("textual", "rich"),
    "pitstop.profiling.stepclock": ("torch", "textual", "rich"),  # pure: unit-tested without torch
    "pitstop.profiling._patch": ("torch", "textual", "rich"),
    "pitstop.compare": ("torch", "textual", "rich"),
    "pitstop.report": ("torch", "textual", "rich"),
    "pitstop.tuning.command": ("textual", "rich", "pitstop.tui"),
    "pitstop.tui": ("torch",),
    "pitstop.cli": ("torch", "textual", "rich"),
}


@pytest.mark.parametrize("module", sorted(FORBIDDEN))
def test_module_imports_stay_in_their_room(module: str) -> None:
    code = f"import json, sys; import {module}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = set(json.loads(out))
    bad = [m for m in FORBIDDEN[module] if m in loaded]
    assert not bad, f"{module} imports {bad}"


def test_bootstrap_imports_only_the_standard_library() -> None:
    from pitstop.profiling.launch import BOOTSTRAP_DIR

    source = (BOOTSTRAP_DIR / "sitecustomize.py").read_text()
    imports = {line.split()[1].split(".")[0] for line in source.splitlines()
               if line.strip().startswith(("import ", "from ")) and "pitstop" not in line}
    assert imports <= set(sys.stdlib_module_names), imports - set(sys.stdlib_module_names)
