"""Decides, at interpreter start, whether this process gets pitstop's agent (stdlib only).

`pitstop run` puts this directory first on PYTHONPATH, so every Python
process of the launched command imports this file at start. It must never
fail and never slow a process down noticeably: the decision is one pure
function over the environment and argv; starting the agent is wrapped so any
error becomes one line on stderr. The user's own sitecustomize (further along
sys.path) still runs afterwards.
"""

import os
import sys

SESSION_ENV = "PITSTOP_SESSION"
OWNER_ENV = "PITSTOP_OWNER_PID"  # pid of the process that owns the agent; inherited by its children
OWNER_RANK_ENV = "PITSTOP_OWNER_LOCAL_RANK"  # LOCAL_RANK of that process ("" when it had none)

# Modules and scripts that launch training processes rather than train.
LAUNCHER_MODULES = (
    "torch.distributed.run",
    "torch.distributed.launch",
    "torch.distributed.elastic",
    "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli",
    "deepspeed.launcher",
)
LAUNCHER_SCRIPTS = ("torchrun", "accelerate", "deepspeed")
# `python -c` programs that multiprocessing uses for its helper processes.
MP_MARKERS = (
    "multiprocessing.spawn",
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "multiprocessing.popen",
    "--multiprocessing-fork",
    "--multiprocessing-forkserver",
    "joblib.externals.loky",
)


def should_start(env, argv, pid):
    """Return (start, reason): whether this process gets the agent, and why (for diagnostics).

    env: the process environment; argv: sys.orig_argv (the interpreter's
    own argv, available before sys.argv is set); pid: os.getpid().
    """
    if not env.get(SESSION_ENV):
        return False, "not under pitstop"
    if env.get("PITSTOP_DISABLE", "").lower() in ("1", "true", "yes"):
        return False, "PITSTOP_DISABLE is set"
    owner = env.get(OWNER_ENV)
    if owner:
        if owner == str(pid):
            return False, "agent already started in this process"
        # A training script that starts its other ranks itself (Lightning's DDP
        # launcher re-runs the script with LOCAL_RANK=1..N-1) makes children that
        # are ranks, not helpers: they get their own agent. Helpers (DataLoader
        # workers, subprocesses) inherit their parent's LOCAL_RANK.
        local = env.get("LOCAL_RANK", "")
        if not (local and local != "0" and local != env.get(OWNER_RANK_ENV, "")):
            return False, "child of the agent process %s (a worker or subprocess)" % owner
    args = list(argv[1:]) if argv else []
    for arg in args:
        for marker in MP_MARKERS:
            if marker in arg:
                return False, "multiprocessing helper process (%s)" % marker
    # Skip interpreter options to find what runs: `-m MOD`, `-c CMD` or a script.
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            module = args[i + 1]
            for launcher in LAUNCHER_MODULES:
                if module == launcher or module.startswith(launcher + "."):
                    return False, "launcher process (-m %s)" % module
            return True, "module %s" % module
        if arg.startswith("-m") and len(arg) > 2:
            return should_start(env, [argv[0], "-m", arg[2:]] + args[i + 1 :], pid)
        if arg == "-c":
            return True, "command string"
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        name = os.path.basename(arg)
        if name in LAUNCHER_SCRIPTS or name.split("-")[0] in LAUNCHER_SCRIPTS and not name.endswith(".py"):
            return False, "launcher process (%s)" % name
        return True, "script %s" % name
    return False, "interactive interpreter"


def _start():
    start, reason = should_start(os.environ, getattr(sys, "orig_argv", sys.argv), os.getpid())
    if os.environ.get("PITSTOP_DEBUG_BOOTSTRAP"):
        sys.stderr.write("pitstop bootstrap pid %d: %s (%s)\n" % (os.getpid(), start, reason))
    if not start:
        return
    os.environ[OWNER_ENV] = str(os.getpid())
    os.environ[OWNER_RANK_ENV] = os.environ.get("LOCAL_RANK", "")
    try:
        import importlib.util

        if importlib.util.find_spec("pitstop") is None and os.environ.get("PITSTOP_PATH"):
            sys.path.append(os.environ["PITSTOP_PATH"])
        from pitstop.profiling import agent

        agent.start_from_env(reason)
    except Exception as err:  # the training run comes first: say it once and step aside
        sys.stderr.write("pitstop: agent not started: %s: %s\n" % (type(err).__name__, err))


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


if not getattr(sys, "_pitstop_bootstrapped", False):
    sys._pitstop_bootstrapped = True
    try:
        _start()
    except BaseException as err:  # cannot fail: not even SystemExit from a broken import
        try:
            sys.stderr.write("pitstop: bootstrap error: %r\n" % (err,))
        except Exception:
            pass
    _chain_user_sitecustomize()
