"""Guards the user's files inside a `pitstop tune` trial (standard library only).

Trials run the script in the user's own directory, as `pitstop run` does, so
relative paths, `PYTHONPATH=.` imports and downloads into ./data work. The
tuner puts this directory on the trial's PYTHONPATH after pitstop's bootstrap
(which imports it as the next sitecustomize); with PITSTOP_GUARD set, every
Python process of the trial (ranks, DataLoader workers, helpers) gets an audit
hook that, before an existing file under the working directory is first
opened for writing, truncated, replaced, renamed or removed, keeps its
original in the guard's store, and notes every path the trial creates. The
tuner puts the originals back and removes what the trial made once the
trial's processes are gone (pitstop/tuning/guard.py). Audit hooks patch
nothing the script can see; torch.save to a path and safetensors write from
C++/Rust, which raise no audit event, get a thin wrapper that reports the
path first. Nothing here may fail the script: every error is swallowed.
"""

import os
import sys

GUARD_ENV = "PITSTOP_GUARD"
_WRITE = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC | os.O_CREAT
_EVENTS = frozenset({"open", "os.rename", "os.remove", "os.truncate", "shutil.rmtree", "os.mkdir",
                     "os.rmdir", "os.link", "os.symlink", "import"})
# Writers below Python: (module, function, index of the path argument, its keyword).
_NATIVE_WRITERS = (
    ("torch.serialization", "_open_zipfile_writer", 0, "name_or_buffer"),
    ("safetensors.torch", "serialize_file", 1, "filename"),
)


class Guard:
    """Keeps originals of files under `root` in `store` before a trial changes them."""

    def __init__(self, root, store, skip=()):
        import threading

        self.root = os.path.realpath(root)
        self.prefix = self.root.rstrip(os.sep) + os.sep
        self.store = os.path.realpath(store)
        self.files = os.path.join(self.store, "files")
        self.skip = tuple(os.path.realpath(p).rstrip(os.sep) + os.sep for p in skip) + (self.store + os.sep,)
        self.local = threading.local()
        self.pending = list(_NATIVE_WRITERS)
        self.count = 0

    # -- the audit hook ---------------------------------------------------------------
    def hook(self, event, args):
        if event not in _EVENTS:
            return
        if event == "open":
            flags = args[2] if len(args) > 2 else None
            if not (isinstance(flags, int) and flags & _WRITE):
                return  # a read: the common case, decided in two comparisons
        if getattr(self.local, "busy", False):
            return  # our own copies and notes raise events too
        self.local.busy = True
        try:
            if self.pending:
                self.patch_native()
            self.handle(event, args)
        except Exception:
            pass  # the training run comes first: a failed backup must not fail its write
        finally:
            self.local.busy = False

    def handle(self, event, args):
        if event == "open":
            self.before_write(args[0])
        elif event == "os.truncate":
            self.before_write(args[0])
        elif event == "os.rename":
            if _no_fd(args, 2) and _no_fd(args, 3):
                self.before_move_away(args[0])
                self.before_replace(args[1])
        elif event in ("os.remove", "os.rmdir", "shutil.rmtree"):
            if _no_fd(args, 1):
                self.before_move_away(args[0])
        elif event == "os.mkdir":
            if _no_fd(args, 2):
                self.note_created(args[0])
        elif event in ("os.link", "os.symlink"):
            self.note_created(args[1])

    def patch_native(self):
        """Wrap writers that open files below Python once their modules are loaded."""
        import functools

        for item in list(self.pending):
            name, attr, index, keyword = item
            module = sys.modules.get(name)
            original = getattr(module, attr, None) if module is not None else None
            if original is None:
                continue  # not imported (or still importing): an "import" event comes later
            self.pending.remove(item)
            if getattr(original, "_pitstop_guarded", False):
                continue
            guard = self

            @functools.wraps(original)
            def wrapper(*a, __original=original, __index=index, __keyword=keyword, **kw):
                target = a[__index] if len(a) > __index else kw.get(__keyword)
                if isinstance(target, (str, bytes, os.PathLike)):
                    guard.hook("open", (os.fspath(target), "wb", os.O_WRONLY | os.O_CREAT | os.O_TRUNC))
                return __original(*a, **kw)

            wrapper._pitstop_guarded = True
            setattr(module, attr, wrapper)

    # -- what each operation needs ------------------------------------------------------
    def inside(self, path, follow):
        """The real path of `path` when it lies in the guarded tree, else None."""
        if isinstance(path, int):
            return None  # an open descriptor: its file was guarded when it was opened
        full = os.path.abspath(os.fsdecode(path))
        if follow:
            real = os.path.realpath(full)
        else:  # the entry itself (a symlink is removed, not its target)
            real = os.path.join(os.path.realpath(os.path.dirname(full)), os.path.basename(full))
        if not real.startswith(self.prefix) or real.startswith(self.skip):
            return None
        parts = real[len(self.prefix):].split(os.sep)
        if "__pycache__" in parts or ".git" in parts:
            return None  # bytecode caches and version control: not the user's work, regenerated
        return real

    def stored(self, real):
        return os.path.join(self.files, os.path.relpath(real, self.root))

    def before_write(self, path):
        real = self.inside(path, follow=True)
        if real is None:
            return
        if not os.path.lexists(real):
            self.note_born(real)
            return
        if not os.path.isfile(real) or self.born(real):
            return  # a directory, or a file this trial made: nothing of the user's to keep
        dest = self.stored(real)
        if os.path.lexists(dest) and not _same_inode(dest, real):
            return  # the original is kept already (this trial or an earlier one)
        self.copy(real, dest)

    def before_replace(self, path):
        real = self.inside(path, follow=False)
        if real is None:
            return
        if os.path.lexists(real):
            self.before_move_away(path)
        else:
            self.note_born(real)

    def before_move_away(self, path):
        """The entry leaves its path unchanged in content: a hard link keeps it (no data copied)."""
        real = self.inside(path, follow=False)
        if real is None or not os.path.lexists(real) or self.born(real):
            return
        if os.path.isdir(real) and not os.path.islink(real):
            self.note(real, "dirs")
            for top, dirs, files in os.walk(real):
                dirs[:] = [d for d in dirs if d not in ("__pycache__", ".git")]
                for d in dirs:
                    self.note(os.path.join(top, d), "dirs")
                for f in files:
                    self.keep(os.path.join(top, f))
            return
        self.keep(real)

    def keep(self, real):
        dest = self.stored(real)
        if os.path.lexists(dest) or self.born(real):
            return
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        try:
            os.link(real, dest, follow_symlinks=False)
        except OSError:  # another file system, or links not allowed: a real copy
            if os.path.islink(real):
                os.symlink(os.readlink(real), dest)
            else:
                self.copy(real, dest)

    def copy(self, real, dest):
        import shutil

        os.makedirs(os.path.dirname(dest), exist_ok=True)
        self.count += 1
        tmp = os.path.join(self.store, "tmp", "%d-%d-%d" % (os.getpid(), id(self.local), self.count))
        os.makedirs(os.path.dirname(tmp), exist_ok=True)
        shutil.copy2(real, tmp)
        os.replace(tmp, dest)  # whole or not at all: a killed trial never leaves half an original

    def note(self, real, kind):
        """Append a path to this process's list (`created`: the tuner removes it; `dirs`: recreates it)."""
        folder = os.path.join(self.store, kind)
        os.makedirs(folder, exist_ok=True)
        fd = os.open(os.path.join(folder, "%d.txt" % os.getpid()), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.write(fd, (real + "\n").encode("utf-8", "surrogateescape"))
        finally:
            os.close(fd)

    def note_born(self, real):
        """A path this trial creates: listed for removal, and marked so it is never kept as an original."""
        self.note(real, "created")
        marker = self.marker(real)
        os.makedirs(os.path.dirname(marker), exist_ok=True)
        os.close(os.open(marker, os.O_WRONLY | os.O_CREAT, 0o600))

    def marker(self, real):
        import hashlib  # flat names: a made directory and the files made inside it each get one

        digest = hashlib.sha1(os.path.relpath(real, self.root).encode("utf-8", "surrogateescape")).hexdigest()
        return os.path.join(self.store, "born", digest)

    def born(self, real):
        return os.path.lexists(self.marker(real))

    def note_created(self, path):
        real = self.inside(path, follow=False)
        if real is not None and not os.path.lexists(real):
            self.note_born(real)


def _no_fd(args, index):
    return len(args) <= index or args[index] in (None, -1)


def _same_inode(a, b):
    try:
        sa, sb = os.stat(a), os.stat(b)
    except OSError:
        return False
    return (sa.st_ino, sa.st_dev) == (sb.st_ino, sb.st_dev)


def install(environ=None):
    """Start guarding when the tuner asked for it; returns the guard (or None)."""
    import json

    raw = (environ if environ is not None else os.environ).get(GUARD_ENV)
    if not raw:
        return None
    cfg = json.loads(raw)
    guard = Guard(cfg["root"], cfg["store"], cfg.get("skip", ()))
    sys.addaudithook(guard.hook)
    return guard


def _chain_user_sitecustomize():
    """Import the next sitecustomize on sys.path (the user's), as Python would have."""
    here = os.path.dirname(os.path.abspath(__file__))
    saved_path = list(sys.path)
    saved_module = sys.modules.pop("sitecustomize", None)
    try:
        sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
        import importlib

        try:
            importlib.import_module("sitecustomize")
        except ImportError as err:
            if getattr(err, "name", None) != "sitecustomize":
                raise
    except Exception as err:
        sys.stderr.write("pitstop: your sitecustomize failed: %s: %s\n" % (type(err).__name__, err))
    finally:
        sys.path[:] = saved_path
        if saved_module is not None:
            sys.modules["sitecustomize"] = saved_module


def _interrupted():
    """End this process by SIGINT (exit code 130), as Python ends on a Ctrl-C that nothing catches.

    A KeyboardInterrupt raised out of a sitecustomize makes Python abort with
    "Failed to import the site module" (exit code 1); swallowed, it left the
    trial to run its script unguarded. pitstop's bootstrap, when it chained us,
    ends the process itself: the interrupt goes back to it.
    """
    if getattr(sys, "_pitstop_bootstrapped", False):
        raise KeyboardInterrupt
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # SIGINT blocked by whoever started us: the exit code says it all the same


if __name__ == "sitecustomize" and not getattr(sys, "_pitstop_guarded", False):
    sys._pitstop_guarded = True
    try:
        try:
            install()
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # cannot fail the interpreter's start (not even SystemExit)
            try:
                sys.stderr.write("pitstop: file guard not started: %r\n" % (err,))
            except Exception:
                pass
        _chain_user_sitecustomize()
    except KeyboardInterrupt:  # the user's Ctrl-C: never the guard's to swallow
        _interrupted()
