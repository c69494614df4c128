"""Provides the per-user socket directory: where agents put their sockets and viewers look for them."""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from pitstop.errors import TransportError


@dataclass(frozen=True)
class RuntimeDir:
    """The directory this user's agents put their sockets in, and why a preferred one was passed over."""

    path: Path
    warning: str | None = None  # "/tmp/pitstop-1000 is not usable (...); live viewers use ... instead"


def candidates() -> list[Path]:
    """Where this user's sockets may live, most preferred first.

    PITSTOP_RUNTIME_DIR is a choice, so it is the only candidate. Otherwise
    $XDG_RUNTIME_DIR/pitstop, then /tmp/pitstop-<uid>, then a directory under
    the user's own cache: any local user can create /tmp/pitstop-<uid> first,
    and a private fallback keeps live viewers working then.
    """
    explicit = os.environ.get("PITSTOP_RUNTIME_DIR")
    if explicit:
        return [Path(explicit)]
    out = []
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if xdg and os.path.isdir(xdg):
        out.append(Path(xdg) / "pitstop")
    out.append(Path(tempfile.gettempdir()) / f"pitstop-{os.getuid()}")
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    out.append(Path(cache) / "pitstop" / "run")
    return out


def _unusable(path: Path, create: bool) -> str | None:
    """Why `path` cannot hold our sockets (None: it can); creates it 0700 when asked."""
    try:
        if create:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            try:
                path.mkdir(mode=0o700)
            except FileExistsError:
                pass
        st = os.lstat(path)
    except FileNotFoundError:
        return "it does not exist"
    except OSError as err:
        return f"cannot create it: {err.strerror or err}"
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a directory"
    if st.st_uid != os.getuid():
        return f"it belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o077:
        try:
            os.chmod(path, 0o700)
        except OSError as err:
            return f"others may enter it (mode {stat.S_IMODE(st.st_mode):o}) and it cannot be fixed: {err.strerror}"
    return None


def resolve_runtime_dir() -> RuntimeDir:
    """The socket directory to use now (created 0700, checked to be ours), or a TransportError."""
    passed: list[tuple[Path, str]] = []
    for path in candidates():
        why = _unusable(path, create=True)
        if why is None:
            warning = None
            if passed:
                first, reason = passed[0]
                warning = f"{first} is not usable ({reason}); live viewers use {path} instead"
            return RuntimeDir(path, warning)
        passed.append((path, why))
    if len(passed) == 1:
        path, why = passed[0]
        raise TransportError(f"{path} cannot hold pitstop's sockets: {why}; set PITSTOP_RUNTIME_DIR")
    tried = "; ".join(f"{p}: {why}" for p, why in passed)
    raise TransportError(f"no private directory for pitstop's sockets ({tried}); set PITSTOP_RUNTIME_DIR")


def runtime_dir(create: bool = True) -> Path:
    """The per-user socket directory (see `resolve_runtime_dir`); without `create`, the first that exists."""
    if create:
        return resolve_runtime_dir().path
    dirs = runtime_dirs()
    return dirs[0] if dirs else candidates()[0]


def runtime_dirs() -> list[Path]:
    """Every candidate socket directory that exists and is ours: where viewers look for agents."""
    return [path for path in candidates() if _unusable(path, create=False) is None]
