"""Provides how pitstop starts a training command with its agent injected.

The child gets our bootstrap directory first on PYTHONPATH (its
sitecustomize decides whether to start the agent) and one environment
variable, PITSTOP_SESSION, carrying the session settings as JSON. Every
process the command starts inherits both; the bootstrap's start decision
keeps the agent out of launchers and workers. The settings' parts a person
types (a --prometheus address, a --record path) are checked here before anything
starts, each with a one-line error.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from pitstop.errors import LaunchError, RecordError, UsageError
from pitstop.profiling.record import default_record_root, is_record_name

SESSION_ENV = "PITSTOP_SESSION"
# Sections of a tuned config, and what each one's settings apply to.
CONFIG_SCOPES = {
    "compute": "process-wide",
    "dataloader": "training DataLoader",
    "eval_dataloader": "evaluation DataLoaders",
}
BOOTSTRAP_DIR = Path(__file__).resolve().parent / "bootstrap"
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
# What a command needs to run again as it ran: where its imports come from (minGPT's
# projects/adder/adder.py fails "No module named 'mingpt'" without PYTHONPATH=.) and the
# frameworks' variables it was started with (transformers' run_clm reads HF_HUB_OFFLINE=1: a
# line without it, pasted in another shell, tries to download). Never a secret: a printed line
# is pasted into chats and tickets, and HF_TOKEN or WANDB_API_KEY has no place there.
COMMAND_ENV = ("PYTHONPATH",)
COMMAND_ENV_PREFIXES = ("HF_", "TRANSFORMERS_", "TORCH_", "PYTORCH_", "CUDA_", "NCCL_", "OMP_", "MKL_", "KERAS_",
                        "WANDB_")
SECRET_WORDS = ("TOKEN", "KEY", "SECRET", "PASSWORD", "PASSWD", "AUTH", "CREDENTIAL")


@dataclass(frozen=True)
class Target:
    """What the user asked to run: a script, a module, or any launcher command."""

    script: str | None = None
    module: str | None = None
    launcher: tuple[str, ...] = ()
    args: tuple[str, ...] = ()

    @property
    def label(self) -> str:
        """Short name for headers and record names."""
        if self.script:
            return Path(self.script).name
        if self.module:
            return f"-m {self.module}"
        for part in self.launcher:
            if part.endswith(".py"):
                return Path(part).name
        return Path(self.launcher[0]).name if self.launcher else "?"

    @property
    def stem(self) -> str:
        """File-name-safe short name."""
        name = self.module or self.label
        stem = Path(name).stem if name.endswith(".py") else name
        return "".join(c if c.isalnum() or c in "-_." else "_" for c in stem.replace("-m ", ""))

    def command(self, python: str | None = None) -> list[str]:
        """The argv to execute."""
        python = python or sys.executable
        if self.script:
            return [python, self.script, *self.args]
        if self.module:
            return [python, "-m", self.module, *self.args]
        return [*self.launcher, *self.args]

    def describe(self) -> str:
        """The command as a person would type it (for reports and provenance)."""
        return " ".join(self.command("python"))

    def words(self) -> list[str]:
        """The target as `pitstop run` and `pitstop tune` take it: `SCRIPT ARGS`, `-m MODULE ARGS`, `-- COMMAND...`."""
        if self.script:
            return [self.script, *self.args]
        if self.module:
            return ["-m", self.module, *self.args]
        return ["--", *self.launcher, *self.args]

    def check(self, cwd: Path | None = None) -> None:
        """Fail early, with one line, when the target cannot start at all."""
        base = cwd or Path.cwd()
        if self.script:
            path = Path(self.script)
            path = path if path.is_absolute() else base / path
            if not path.exists():
                raise LaunchError(f"no such script: {self.script}")
            if path.is_dir():
                raise LaunchError(f"{self.script} is a directory, not a script")
            if not os.access(path, os.R_OK):
                raise LaunchError(f"cannot read script: {self.script}")
        elif self.module:
            old = list(sys.path)
            sys.path.insert(0, str(base))
            try:
                spec = importlib.util.find_spec(self.module)
            except (ImportError, ValueError) as err:
                raise LaunchError(f"module not found: {self.module} ({err})") from err
            finally:
                sys.path[:] = old
            if spec is None:
                raise LaunchError(f"module not found: {self.module}")
        elif self.launcher:
            if shutil.which(self.launcher[0]) is None and not Path(self.launcher[0]).exists():
                raise LaunchError(f"launcher not found: {self.launcher[0]}")
        else:
            raise LaunchError("nothing to run: give a script, -m MODULE, or -- COMMAND")


@dataclass(frozen=True)
class SessionSettings:
    """What the agent in every process of one session is told (JSON in PITSTOP_SESSION)."""

    session: str
    record: str  # a record base: a directory, or a `.jsonl[.gz]` file name (see record.record_path_for)
    script: str = ""
    mode: str = "run"  # "run" | "trial"
    socket: bool = True
    config: dict[str, Any] | None = None  # pitstop.config.Config.to_dict()
    trial_steps: int | None = None  # trial mode: end the process after this many steps
    profile: dict[str, int | None] | None = field(
        default_factory=lambda: {"every": 500, "active": 5, "first": 50}
    )
    trace_dir: str | None = None
    prometheus: int | None = None  # base port: rank with LOCAL_RANK r serves metrics on port + r
    prometheus_host: str | None = None  # where metrics listen: None is 127.0.0.1; wider only when asked (--prometheus HOST:PORT)
    listen: str | None = None  # "HOST:PORT" for TCP viewers (port + LOCAL_RANK), token required
    token_file: str | None = None  # where the TCP token lives (0600)
    started: float = field(default_factory=time.time)
    # The command as the user typed it (Target.words), where, and the environment it needs
    # (typed_env): every fix line and suggestion prints it so that it runs as printed.
    command: list[str] | None = None
    command_cwd: str | None = None
    command_env: dict[str, str] | None = None
    config_path: str | None = None  # `--config FILE` as typed (the Hello says it: a report's command row)
    stall_after: float | None = None  # --stall-after SECONDS; None: max(60 s, 20x the p95 step)

    def to_env(self) -> str:
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_env(cls, text: str) -> SessionSettings:
        data = json.loads(text)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def new_session_id(stem: str) -> str:
    """Sortable, unique, readable: 20261122-101502-train-3f9a."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{stem}-{secrets.token_hex(2)}"


def typed_env(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The variables of COMMAND_ENV and COMMAND_ENV_PREFIXES the user's command runs with, secrets left out.

    PYTHONPATH loses pitstop's bootstrap directory (child_env prepends it; a
    `pitstop run` inside a `pitstop run` would otherwise print it back).
    """
    env = os.environ if environ is None else environ
    out = {name: value for name, value in env.items()
           if value and (name in COMMAND_ENV or name.startswith(COMMAND_ENV_PREFIXES))
           and not any(word in name for word in SECRET_WORDS)}
    if "PYTHONPATH" in out:
        parts = [p for p in out["PYTHONPATH"].split(os.pathsep) if p != str(BOOTSTRAP_DIR)]
        if any(parts):
            out["PYTHONPATH"] = os.pathsep.join(parts)
        else:
            del out["PYTHONPATH"]
    return out


def child_env(settings: SessionSettings, base: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of the launched command."""
    env = dict(os.environ if base is None else base)
    parts = [str(BOOTSTRAP_DIR)]
    # The package must be importable in the child even when the child's Python
    # differs (a torchrun from another venv): the bootstrap appends PITSTOP_PATH
    # to sys.path only if `import pitstop` would otherwise fail.
    env["PITSTOP_PATH"] = str(PACKAGE_PARENT)
    if env.get("PYTHONPATH"):
        parts.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env[SESSION_ENV] = settings.to_env()
    env.pop("PITSTOP_OWNER_PID", None)  # a pitstop run inside a pitstop run starts afresh
    return env


def launch(
    target: Target,
    settings: SessionSettings,
    *,
    cwd: Path | None = None,
    new_session: bool = False,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    extra_env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start the target with the agent injected; `new_session` detaches it from our terminal."""
    env = child_env(settings)
    if extra_env:
        env.update(extra_env)
    try:
        return subprocess.Popen(
            target.command(),
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=new_session,
        )
    except OSError as err:
        raise LaunchError(f"cannot start {target.describe()}: {err.strerror or err}") from err


# -- preparing a session's settings (pitstop run / demo) ------------------------
def parse_prometheus(text: str | None, flag: str = "--prometheus") -> tuple[str, int] | None:
    """--prometheus [HOST:]PORT -> (host, base port), loopback when no host is given; one-line errors.
    `flag`: the option read (--prometheus-front: one port, pitstop run's own)."""
    if text is None:
        return None
    host, sep, port = text.rpartition(":")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        each = "rank r serves PORT + LOCAL_RANK" if flag == "--prometheus" else "pitstop run serves it"
        raise UsageError(f"{flag} {text!r}: give a TCP port from 1 to 65535 ({each})")
    if not sep:
        return "127.0.0.1", int(port)  # loopback: the endpoint has no authentication
    host = host.strip("[]")
    try:
        socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (OSError, UnicodeError) as err:
        raise UsageError(f"{flag} {text!r}: unknown host {host!r} (give HOST:PORT, e.g. 0.0.0.0:{port})") from err
    return host, int(port)


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def describe_config(data: dict[str, object]) -> str:
    """What a config applies, by scope: "amp=bf16 (process-wide); num_workers=4 (training DataLoader)"."""
    parts = []
    for section, scope in CONFIG_SCOPES.items():
        values = data.get(section)
        if isinstance(values, dict) and values:
            knobs = ", ".join(f"{k}={_toml_value(v)}" for k, v in values.items())
            parts.append(f"{knobs} ({scope})")
    return "; ".join(parts) if parts else "nothing (no setting in it)"


def prepare_record(record: str | None, session: str, shared: bool = False) -> str:
    """The record base for a session; fails early, in one line, if it cannot be written.

    `shared`: this front is one of a job's fronts on several nodes (`jobenv.multi_node`), whose
    ranks write their own `rank{r}` files into one directory (`srun pitstop run --record /shared/run`):
    the other nodes' records may already be there.
    """
    if record:
        path = Path(record).expanduser().resolve()
        if is_record_name(path):
            if path.exists():
                raise RecordError(f"record file exists: {path} (choose another --record; pitstop never overwrites)")
            directory = path.parent
        else:
            if not shared and path.exists() and any(is_record_name(p) for p in path.iterdir()):
                raise RecordError(f"record directory already holds records: {path} (choose another --record)")
            directory = path
    else:
        directory = default_record_root() / session
        path = directory
    try:
        directory.mkdir(parents=True, exist_ok=True)
        probe = directory / f".pitstop-write-test-{os.getpid()}"
        probe.write_text("")
        probe.unlink()
    except OSError as err:
        hint = "" if record else " (set PITSTOP_RECORD_DIR or use --record)"
        raise RecordError(f"cannot write records to {directory}: {err.strerror or err}{hint}") from err
    return str(path)


def exit_code_of(returncode: int) -> int:
    """A shell's view of a child's exit: 128+N for death by signal N."""
    return 128 - returncode if returncode < 0 else returncode
