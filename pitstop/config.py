"""Provides the tuned configuration: load, validate and save `pitstop.toml` (and JSON), with clear errors.

Standard library plus tomllib/tomli_w only: scripts call `pitstop.load_config`
at import time, and the agent reads a config in someone else's training
process, so this module never imports torch. The format is documented for
users in docs/config.md; keep the two in step.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from pitstop.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 ships no tomllib
    import tomli as tomllib

AMP_MODES = ("bf16", "fp16", "off")
# Upper bounds of sense, past which a value is a typo, not a setting (one-line errors, file:line).
# Each worker keeps ~4 open files in the training process (6 with no worker, 72 with 16,
# measured with torch 2.13): 256 of them fill Linux's usual soft limit of 1024 open files.
MAX_WORKERS = 256
# Batches each worker loads ahead, held in (shared) memory until a step takes them; torch's
# default is 2 and the tuner tries twice the script's own.
MAX_PREFETCH = 256
# Samples in one batch: past 2**31 - 1 a batch's first dimension alone overflows the 32-bit
# indexing of many CUDA kernels.
MAX_BATCH = 2**31 - 1
_MAX = {"num_workers": MAX_WORKERS, "prefetch_factor": MAX_PREFETCH, "batch_size": MAX_BATCH}


@dataclass(frozen=True)
class DataLoaderSettings:
    """DataLoader keyword arguments; None means "keep what the script passes"."""

    num_workers: int | None = None
    pin_memory: bool | None = None
    persistent_workers: bool | None = None
    prefetch_factor: int | None = None
    batch_size: int | None = None


@dataclass(frozen=True)
class ComputeSettings:
    """Process-wide compute switches; None means "leave the script's choice alone"."""

    amp: str | None = None  # "bf16" | "fp16" | "off"
    cudnn_benchmark: bool | None = None
    channels_last: bool | None = None
    threads: int | None = None  # torch.set_num_threads and OMP_NUM_THREADS


# One line of documentation per key, written above it in a saved file.
_DOCS: dict[str, dict[str, str]] = {
    "dataloader": {
        "num_workers": "worker processes loading batches (0: load in the training process)",
        "pin_memory": "page-locked host batches, for faster and asynchronous copies to the GPU",
        "persistent_workers": "keep workers alive between epochs instead of restarting them",
        "prefetch_factor": "batches each worker loads ahead (needs num_workers > 0)",
        "batch_size": "samples per batch; changing it changes training dynamics (see [guidance])",
    },
    "eval_dataloader": {
        "num_workers": "worker processes of evaluation DataLoaders ([dataloader] targets the training one)",
        "pin_memory": "page-locked host batches in evaluation DataLoaders",
        "persistent_workers": "keep evaluation workers alive between evaluation passes",
        "prefetch_factor": "batches each evaluation worker loads ahead (needs num_workers > 0)",
        "batch_size": "samples per evaluation batch",
    },
    "compute": {
        "amp": 'autocast dtype: "bf16", "fp16" (only with a GradScaler) or "off"',
        "cudnn_benchmark": "torch.backends.cudnn.benchmark: pick the fastest conv algorithms",
        "channels_last": "channels-last memory format for Conv2d models and their 4-D inputs",
        "threads": "CPU threads: torch.set_num_threads(N), and OMP_NUM_THREADS=N for child processes",
    },
}

# Expected Python type per settings key, and the words an error uses for it.
_TYPES: dict[str, dict[str, tuple[type, str]]] = {
    "dataloader": {
        "num_workers": (int, "an integer"),
        "pin_memory": (bool, "true or false"),
        "persistent_workers": (bool, "true or false"),
        "prefetch_factor": (int, "an integer"),
        "batch_size": (int, "an integer"),
    },
    "eval_dataloader": {
        "num_workers": (int, "an integer"),
        "pin_memory": (bool, "true or false"),
        "persistent_workers": (bool, "true or false"),
        "prefetch_factor": (int, "an integer"),
        "batch_size": (int, "an integer"),
    },
    "compute": {
        "amp": (str, 'a string ("bf16", "fp16" or "off")'),
        "cudnn_benchmark": (bool, "true or false"),
        "channels_last": (bool, "true or false"),
        "threads": (int, "an integer"),
    },
}
_FREE_SECTIONS = ("provenance", "guidance")  # free-form tables written by the tuner


@dataclass(frozen=True)
class Config:
    """A tuned configuration: what to apply, where it came from, what to keep in mind."""

    dataloader: DataLoaderSettings = field(default_factory=DataLoaderSettings)  # the training loader
    compute: ComputeSettings = field(default_factory=ComputeSettings)
    eval_dataloader: DataLoaderSettings = field(default_factory=DataLoaderSettings)  # evaluation loaders
    provenance: dict[str, Any] = field(default_factory=dict)
    guidance: dict[str, Any] = field(default_factory=dict)

    def dataloader_kwargs(self) -> dict[str, Any]:
        """The DataLoader keyword arguments this config sets (only the keys set)."""
        return {k: v for k, v in dataclasses.asdict(self.dataloader).items() if v is not None}

    def eval_dataloader_kwargs(self) -> dict[str, Any]:
        """The keyword arguments this config sets for evaluation DataLoaders (only the keys set)."""
        return {k: v for k, v in dataclasses.asdict(self.eval_dataloader).items() if v is not None}

    def section(self, name: str) -> dict[str, Any]:
        """The keys set in one applied section ("dataloader", "eval_dataloader", "compute")."""
        return {"dataloader": self.dataloader_kwargs, "eval_dataloader": self.eval_dataloader_kwargs,
                "compute": self.compute_settings}[name]()

    def compute_settings(self) -> dict[str, Any]:
        """The compute switches this config sets (only the keys set)."""
        return {k: v for k, v in dataclasses.asdict(self.compute).items() if v is not None}

    def to_dict(self) -> dict[str, Any]:
        """Plain data (TOML/JSON-ready: unset keys are left out, as TOML has no null)."""
        data: dict[str, Any] = {}
        if self.dataloader_kwargs():
            data["dataloader"] = self.dataloader_kwargs()
        if self.compute_settings():
            data["compute"] = self.compute_settings()
        if self.eval_dataloader_kwargs():
            data["eval_dataloader"] = self.eval_dataloader_kwargs()
        if self.provenance:
            data["provenance"] = dict(self.provenance)
        if self.guidance:
            data["guidance"] = dict(self.guidance)
        return data

    @classmethod
    def from_dict(cls, data: Any, source: str = "<config>") -> Config:
        """Validate plain data; raises ConfigError naming `source` and the key."""
        try:
            return _validate(data)
        except _Invalid as err:
            raise ConfigError(f"{source}: {err.message}") from None


class _Invalid(Exception):
    """A validation problem at one key path ("dataloader.num_workers"), before we know the line."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key
        self.message = message


def _suggest(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _validate(data: Any) -> Config:
    if not isinstance(data, dict):
        raise _Invalid("", f"expected a table of sections, got {type(data).__name__}")
    sections = [*_TYPES, *_FREE_SECTIONS]
    for name, value in data.items():
        if name not in sections:
            raise _Invalid(str(name), f"unknown section {name!r}{_suggest(str(name), sections)}")
        if not isinstance(value, dict):
            raise _Invalid(str(name), f"{name!r} must be a table, got {_type_word(value)}")
    parts: dict[str, dict[str, Any]] = {}
    for section, types in _TYPES.items():
        values: dict[str, Any] = {}
        for key, value in data.get(section, {}).items():
            path = f"{section}.{key}"
            if key not in types:
                raise _Invalid(path, f"unknown key {path!r}{_suggest(str(key), list(types))}")
            if value is None:  # JSON null: the same as leaving the key out
                continue
            expected, words = types[key]
            # bool is a subclass of int: `num_workers = true` must not pass as 1.
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise _Invalid(path, f"{path!r} must be {words}, got {_type_word(value)} {value!r}")
            _check_range(path, key, value)
            values[key] = value
        parts[section] = values
    return Config(
        dataloader=DataLoaderSettings(**parts["dataloader"]),
        compute=ComputeSettings(**parts["compute"]),
        eval_dataloader=DataLoaderSettings(**parts["eval_dataloader"]),
        provenance=dict(data.get("provenance", {})),
        guidance=dict(data.get("guidance", {})),
    )


def _type_word(value: Any) -> str:
    return {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
            list: "an array", dict: "a table"}.get(type(value), type(value).__name__)


def _check_range(path: str, key: str, value: Any) -> None:
    if key == "num_workers" and value < 0:
        raise _Invalid(path, f"{path!r} must be >= 0, got {value}")
    if key in ("prefetch_factor", "batch_size", "threads") and value < 1:
        raise _Invalid(path, f"{path!r} must be >= 1, got {value}")
    if key in _MAX and value > _MAX[key]:
        raise _Invalid(path, f"{path!r} must be <= {_MAX[key]}, got {value}")
    if key == "amp" and value not in AMP_MODES:
        raise _Invalid(path, f"{path!r} must be one of {', '.join(AMP_MODES)}, got {value!r}")


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity), not the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def fit_to_cpus(cfg: Config, cpus: int) -> tuple[Config, list[str]]:
    """`cfg` with its threads at most the CPUs this process may use, and why, when cut.

    More threads than CPUs only wait for one another (torch's threads spin for a
    core they do not get), and `threads = 99999999999999999999` in a config was
    applied as given.
    """
    threads = cfg.compute.threads
    if threads is None or threads <= cpus:
        return cfg, []
    why = (f"threads={threads} cut to {cpus}: this process may use {cpus} CPU(s) "
           "(its affinity), and more threads than CPUs only wait for one another")
    return dataclasses.replace(cfg, compute=dataclasses.replace(cfg.compute, threads=cpus)), [why]


def load_config(path: str | os.PathLike[str]) -> Config:
    """Read and validate a TOML (or, by suffix, JSON) config; one-line ConfigError with file:line: key."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError(f"{file}: no such config file") from None
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"{file}: cannot read config ({err})") from None
    is_json = file.suffix.lower() == ".json"
    try:
        data = json.loads(text) if is_json else tomllib.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{file}:{err.lineno}: invalid JSON: {err.msg}") from None
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(_toml_error(file, err)) from None
    try:
        return _validate(data)
    except _Invalid as err:
        line = _find_line(text, err.key, is_json)
        where = f"{file}:{line}" if line else str(file)
        raise ConfigError(f"{where}: {err.message}") from None


def _toml_error(file: Path, err: Exception) -> str:
    # tomllib on 3.11/3.12 puts the position only in the message: "Invalid value (at line 3, column 9)".
    message = str(err)
    found = re.search(r"\s*\(at line (\d+), column \d+\)", message)
    line = getattr(err, "lineno", None) or (int(found.group(1)) if found else None)
    if found:
        message = message[: found.start()] + message[found.end():]
    return f"{file}:{line}: invalid TOML: {message}" if line else f"{file}: invalid TOML: {message}"


def _find_line(text: str, key: str, is_json: bool) -> int | None:
    """The 1-based line where `key` ("section.name" or "section") is written, found by scanning."""
    if not key:
        return None
    section, _, name = key.partition(".")
    lines = text.splitlines()
    if is_json:
        start = 0
        for i, line in enumerate(lines):
            if f'"{section}"' in line:
                start = i
                if not name:
                    return i + 1
                break
        for i in range(start, len(lines)):
            if name and f'"{name}"' in lines[i]:
                return i + 1
        return None
    header = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]")
    current = ""
    for i, line in enumerate(lines):
        match = header.match(line)
        if match:
            current = match.group(1).strip().strip("\"'")
            if not name and current == section:
                return i + 1
            continue
        stripped = line.split("#", 1)[0]
        assign = re.match(r"^\s*([A-Za-z0-9_.\"' -]+?)\s*=", stripped)
        if not assign:
            continue
        dotted = ".".join(p.strip().strip("\"'") for p in assign.group(1).split("."))
        full = f"{current}.{dotted}" if current else dotted
        if full == key or (not name and full.startswith(section + ".")):
            return i + 1
        # An inline table: `dataloader = { num_worker = 2 }`.
        if full == section and name and re.search(rf"\b{re.escape(name)}\s*=", stripped):
            return i + 1
    return None


_HEADER = """\
# pitstop tuned configuration, written by `pitstop tune`.
#
# Apply it with no change to the training code:
#     pitstop run --config {name} {script}
# or read it in a script:
#     cfg = pitstop.load_config("{name}")
#     loader = DataLoader(dataset, **cfg.dataloader_kwargs())
#
# A key that is left out (or commented out) keeps the script's own value.
# The format: `pitstop docs config` prints it (docs/config.md in the
# repository). A wrong key or value fails loading with the file, line and key.
"""


def save_config(cfg: Config, path: str | os.PathLike[str], force: bool = False) -> Path:
    """Write `cfg` as a commented TOML file; refuses to overwrite unless `force`."""
    file = Path(path)
    if file.exists() and not force:
        raise ConfigError(f"{file}: exists; use --force to overwrite it")
    script = cfg.provenance.get("script") or "train.py"
    out = [_HEADER.format(name=file.name, script=script)]
    for section, docs in _DOCS.items():
        values = cfg.section(section)
        if section == "eval_dataloader" and not values:
            continue  # written only when set: most configs tune the training loader alone
        out.append(f"\n[{section}]\n")
        for key, doc in docs.items():
            out.append(f"# {doc}\n")
            if key in values:
                out.append(tomli_w.dumps({key: values[key]}))
            else:
                out.append(f"# {key} = (not set: the script's own value is kept)\n")
    if cfg.guidance:
        out.append("\n# What to keep in mind when training with these settings.\n")
        out.append(tomli_w.dumps({"guidance": _no_nulls(cfg.guidance)}))
    if cfg.provenance:
        out.append("\n# Where these settings come from (informational; not applied).\n")
        out.append(tomli_w.dumps({"provenance": _no_nulls(cfg.provenance)}))
    text = "".join(out)
    Config.from_dict(tomllib.loads(text), source=str(file))  # never write a file we cannot read back
    tmp = file.with_name(f".{file.name}.tmp-{os.getpid()}")
    file.parent.mkdir(parents=True, exist_ok=True)
    tmp.write_text(text, encoding="utf-8")
    if not force and file.exists():  # created while we were writing: still never overwrite
        tmp.unlink()
        raise ConfigError(f"{file}: exists; use --force to overwrite it")
    os.replace(tmp, file)
    return file


def _no_nulls(value: Any) -> Any:
    """TOML has no null: an unknown provenance figure (no CUDA version on a CPU build) is left out."""
    if isinstance(value, dict):
        return {str(k): _no_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [_no_nulls(v) for v in value if v is not None]
    return value
