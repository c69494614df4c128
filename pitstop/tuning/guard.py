"""Provides the file guard: trials run in the user's directory, and what a trial changes there is put back.

Trials run where `pitstop run` would run the script (relative paths, imports
and downloads work), so a trial could overwrite a checkpoint or a log the
user made. The guard has two halves:

- inside every Python process of a trial (guardsite/sitecustomize.py, an
  audit hook): before an existing file under the working directory is first
  opened for writing, truncated, renamed or removed, its original goes to the
  store (a copy for writes, a hard link for renames and removals: no data
  copied); every path the trial creates is listed;
- here, in the tuner, once the trial's processes are gone: created paths are
  removed, originals put back (bytes and times), removed directories remade,
  and a walk of the tree compared with the one taken before the trial finds
  anything changed by code the hook cannot see (a C library, a shell
  command): that is reported, never silently left.

Only files a trial touches are copied, once per tune: a dataset that is only
read costs nothing. The store lives until the tune ends; a tune killed
mid-trial leaves it, and the next `pitstop tune` puts things back first.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path

from pitstop.profiling.launch import BOOTSTRAP_DIR

GUARD_ENV = "PITSTOP_GUARD"
SITE_DIR = Path(__file__).resolve().with_name("guardsite")
# Not the user's work, or regenerated: never walked, never restored.
SKIP_NAMES = frozenset({".git", ".hg", ".svn", "__pycache__", "node_modules"})
# The walk that catches writes the hook cannot see stops after this many entries
# (~0.3 s on the 2-core CI box); beyond it, only writes made through Python are guarded.
MAX_ENTRIES = 100_000


@dataclass
class Inventory:
    """The guarded tree as it stood: files (and links) by relative path, directories, and which were listed whole."""

    files: dict[str, tuple[int, int]] = field(default_factory=dict)  # rel -> (size, mtime_ns)
    dirs: set[str] = field(default_factory=set)
    complete: set[str] = field(default_factory=set)  # directories whose every entry is above
    truncated: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"files": self.files, "dirs": sorted(self.dirs), "complete": sorted(self.complete),
                "truncated": self.truncated}

    @classmethod
    def from_dict(cls, data: dict[str, object]) -> Inventory:
        files = data.get("files") or {}
        assert isinstance(files, dict)
        return cls({k: (int(v[0]), int(v[1])) for k, v in files.items()}, set(data.get("dirs") or ()),  # type: ignore[arg-type]
                   set(data.get("complete") or ()), bool(data.get("truncated")))  # type: ignore[arg-type]


@dataclass(frozen=True)
class Restored:
    """What putting the tree back after one trial did."""

    restored: tuple[str, ...] = ()  # originals put back
    removed: tuple[str, ...] = ()  # paths the trial created, removed
    lost: tuple[str, ...] = ()  # changed or removed by something the hook does not see (or another process)
    kept: tuple[str, ...] = ()  # made before the first training step (a download): kept until the tune ends

    def summary(self) -> str:
        parts = []
        if self.restored:
            parts.append(f"put back {len(self.restored)} file(s) it changed ({_few(self.restored)})")
        if self.removed:
            parts.append(f"removed {len(self.removed)} path(s) it created ({_few(self.removed)})")
        if self.kept:
            parts.append(f"kept {len(self.kept)} file(s) it made before its first step until the tune ends "
                         f"({_few(self.kept)})")
        return "; ".join(parts)


def _few(paths: tuple[str, ...], n: int = 3) -> str:
    shown = ", ".join(paths[:n])
    return shown + (f" and {len(paths) - n} more" if len(paths) > n else "")


def walk(root: Path, skip: tuple[Path, ...] = (), limit: int = MAX_ENTRIES,
         exclude: frozenset[tuple[int, int]] = frozenset()) -> Inventory:
    """Stat every entry under `root` (symlinks not followed), at most `limit` of them; files whose
    (device, inode) is in `exclude` are left out."""
    inv = Inventory()
    skipped = {str(p) for p in skip}
    stack = [""]
    seen = 0
    while stack:
        rel = stack.pop()
        path = root / rel if rel else root
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        if rel and any(e.name == "pyvenv.cfg" for e in entries):
            continue  # a virtual environment: installed packages, not the user's work
        whole = True
        for entry in entries:
            if seen >= limit:
                inv.truncated, whole = True, False
                break
            seen += 1
            child = f"{rel}/{entry.name}" if rel else entry.name
            try:
                if entry.is_dir(follow_symlinks=False):
                    if entry.name in SKIP_NAMES or str(Path(entry.path).resolve()) in skipped:
                        continue
                    inv.dirs.add(child)
                    stack.append(child)
                else:
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in exclude:
                        continue
                    inv.files[child] = (st.st_size, st.st_mtime_ns)
            except OSError:
                continue
        if whole:
            inv.complete.add(rel)
    return inv


class FileGuard:
    """Guards the tree under `root` for the trials of one tune, with its store at `store`."""

    def __init__(self, root: Path, store: Path, skip: tuple[Path, ...] = ()) -> None:
        self.root = root.resolve()
        self.store = store.resolve()
        self.skip = tuple(p.resolve() for p in skip) + (self.store,)
        # The tuner's own output redirected into the tree (`pitstop tune ... > tune.log`)
        # grows during every trial: it is the tuner's, not the trial's.
        self.exclude = _own_outputs()
        self.before: Inventory | None = None
        self.kept: set[str] = set()  # made by a trial before its first step (downloads): removed at the end
        self.dirs_at_start: set[str] = set()

    # -- the trial's side ------------------------------------------------------------
    def env(self, pythonpath: str) -> dict[str, str]:
        """What a trial's environment needs: the hook's settings, and its directory after the bootstrap."""
        parts = [p for p in pythonpath.split(os.pathsep) if p]
        at = parts.index(str(BOOTSTRAP_DIR)) + 1 if str(BOOTSTRAP_DIR) in parts else 0
        parts.insert(at, str(SITE_DIR))
        settings = {"root": str(self.root), "store": str(self.store), "skip": [str(p) for p in self.skip]}
        return {"PYTHONPATH": os.pathsep.join(parts), GUARD_ENV: json.dumps(settings)}

    # -- around each trial -------------------------------------------------------------
    def prepare(self) -> None:
        """Before a trial: take the inventory (kept in the store, for a tune killed mid-trial)."""
        fresh = not self.store.exists()
        self.store.mkdir(parents=True, exist_ok=True)
        self.before = walk(self.root, self.skip, exclude=self.exclude)
        if fresh:
            self.dirs_at_start = set(self.before.dirs)
            (self.store / "dirs_at_start.json").write_text(json.dumps(sorted(self.dirs_at_start)))
        (self.store / "inventory.json").write_text(json.dumps(self.before.to_dict()))

    def restore(self, setup_until: float | None = None) -> Restored:
        """After a trial (its processes gone): remove what it made, put back what it changed.

        Files it made before `setup_until` (its first training step: a download, a
        preprocessed cache) stay until the tune ends, so the next trials find them.
        """
        before = self.before or self._saved_inventory() or Inventory()
        stored = set(self._stored())
        # Paths the trial created: from the hook's lists, and new entries the walk finds
        # in directories it listed whole (a path beyond the walk's limit is left alone).
        now = walk(self.root, self.skip, exclude=self.exclude)
        new = {p for p in (now.files.keys() | now.dirs)
               if p not in before.files and p not in before.dirs and _parent(p) in before.complete}
        created = {p for p in self._listed("created") | new
                   if p not in before.files and p not in before.dirs and p not in stored}
        kept = self._setup_files(created, setup_until)
        self.kept |= kept
        removed: list[str] = []
        for rel in sorted(created, key=lambda p: -p.count("/")):
            if rel in self.kept:
                continue
            path = self.root / rel
            if any(k.startswith(rel + "/") for k in self.kept):
                removed += self._prune(rel)
            elif _remove(path):
                removed.append(rel)
        restored = []
        for rel in sorted(stored):
            if self._put_back(rel):
                restored.append(rel)
        for rel in sorted(before.dirs | self._listed("dirs")):
            (self.root / rel).mkdir(parents=True, exist_ok=True)
        lost = []
        after = walk(self.root, self.skip, exclude=self.exclude)
        for rel, (size, mtime) in before.files.items():
            if rel in stored:
                continue
            cur = after.files.get(rel)
            if cur is None and after.truncated and _parent(rel) not in after.complete:
                continue  # beyond the walk's limit this time
            if cur != (size, mtime):
                lost.append(rel)
        self._clear_trial_notes()
        self.store.mkdir(parents=True, exist_ok=True)
        (self.store / "kept.json").write_text(json.dumps(sorted(self.kept)))
        self.before = None
        return Restored(tuple(restored), tuple(sorted(removed)), tuple(sorted(lost)), tuple(sorted(kept)))

    def _setup_files(self, created: set[str], until: float | None) -> set[str]:
        """The created files (those inside created directories too) last written before `until`."""
        if until is None:
            return set()
        limit = int(until * 1e9)
        found = set()
        for rel in created:
            path = self.root / rel
            paths = [path]
            if path.is_dir() and not path.is_symlink():
                paths = [Path(top) / n for top, _d, names in os.walk(path) for n in names]
            for p in paths:
                try:
                    if p.lstat().st_mtime_ns < limit:
                        found.add(p.relative_to(self.root).as_posix())
                except OSError:
                    continue
        return found

    def _prune(self, rel: str) -> list[str]:
        """Remove what a created directory holds, except the files kept until the tune ends."""
        removed = []
        for entry in list((self.root / rel).iterdir()):
            child = f"{rel}/{entry.name}"
            if child in self.kept:
                continue
            if entry.is_dir() and not entry.is_symlink() and any(k.startswith(child + "/") for k in self.kept):
                removed += self._prune(child)
            elif _remove(entry):
                removed.append(child)
        return removed

    def recover(self) -> Restored | None:
        """A store left by a tune killed mid-trial: put its trial's changes back now."""
        if not self.store.exists():
            return None
        self.before = self._saved_inventory()
        self.kept = self._saved_kept()
        try:
            self.dirs_at_start = set(json.loads((self.store / "dirs_at_start.json").read_text()))
        except (OSError, ValueError, TypeError):
            self.dirs_at_start = set(self.before.dirs) if self.before else set()
        done = self.restore()
        self.close()
        return done

    def close(self) -> list[str]:
        """The tune is over and the tree is back: remove the files kept for it, then the originals.

        A trial whose restore did not finish (a second Ctrl+C during it) leaves the
        store in place: the next tune in this directory puts the files back first.
        """
        if self.before is not None:
            return []
        removed = []
        for rel in sorted(self.kept, key=lambda p: -p.count("/")):
            if _remove(self.root / rel):
                removed.append(rel)
            parent = _parent(rel)
            while parent and parent not in self.dirs_at_start:
                try:
                    (self.root / parent).rmdir()  # only when empty: made for the kept files
                except OSError:
                    break
                parent = _parent(parent)
        self.kept = set()
        shutil.rmtree(self.store, ignore_errors=True)
        return removed

    def _saved_kept(self) -> set[str]:
        try:
            return set(json.loads((self.store / "kept.json").read_text()))
        except (OSError, ValueError, TypeError):
            return set()

    # -- helpers ------------------------------------------------------------------------
    def _stored(self) -> list[str]:
        files = self.store / "files"
        if not files.is_dir():
            return []
        out = []
        for top, _dirs, names in os.walk(files):
            for name in names:
                out.append(os.path.relpath(os.path.join(top, name), files).replace(os.sep, "/"))
        return out

    def _listed(self, kind: str) -> set[str]:
        found: set[str] = set()
        folder = self.store / kind
        if not folder.is_dir():
            return found
        for f in folder.iterdir():
            for line in f.read_text(encoding="utf-8", errors="surrogateescape").splitlines():
                path = Path(line)
                try:
                    found.add(path.relative_to(self.root).as_posix())
                except ValueError:
                    continue
        return found

    def _saved_inventory(self) -> Inventory | None:
        try:
            return Inventory.from_dict(json.loads((self.store / "inventory.json").read_text()))
        except (OSError, ValueError, AssertionError, TypeError, IndexError):
            return None

    def _put_back(self, rel: str) -> bool:
        """The original of `rel` at its place, bytes and times; False when it is there unchanged."""
        src = self.store / "files" / rel
        dst = self.root / rel
        if _unchanged(src, dst):
            return False
        if dst.is_symlink() or (dst.exists() and not dst.is_file()):
            _remove(dst)
        for parent in reversed(dst.relative_to(self.root).parents):
            p = self.root / parent
            if p.is_symlink() or (p.exists() and not p.is_dir()):
                _remove(p)  # the trial put a file where the user had a directory
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            os.symlink(os.readlink(src), dst)
            return True
        # In place when the path is a file: the user's own hard links to it keep seeing it.
        shutil.copyfile(src, dst)
        shutil.copystat(src, dst)
        return True

    def _clear_trial_notes(self) -> None:
        for kind in ("created", "dirs", "born", "tmp"):
            shutil.rmtree(self.store / kind, ignore_errors=True)


def _own_outputs() -> frozenset[tuple[int, int]]:
    found = set()
    for fd in (1, 2):
        try:
            st = os.fstat(fd)
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            found.add((st.st_dev, st.st_ino))
    return frozenset(found)


def _parent(rel: str) -> str:
    return rel.rsplit("/", 1)[0] if "/" in rel else ""


def _unchanged(src: Path, dst: Path) -> bool:
    try:
        a, b = src.lstat(), dst.lstat()
    except OSError:
        return False
    if (a.st_ino, a.st_dev) == (b.st_ino, b.st_dev):
        return True
    if src.is_symlink() or dst.is_symlink():
        return src.is_symlink() and dst.is_symlink() and os.readlink(src) == os.readlink(dst)
    return dst.is_file() and (a.st_size, a.st_mtime_ns) == (b.st_size, b.st_mtime_ns)


def _remove(path: Path) -> bool:
    try:
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        else:
            return False
    except FileNotFoundError:
        return False
    return True
