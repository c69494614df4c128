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
    "lightning.fabric.cli",  # `fabric run`: runs torchrun's elastic agent in its own process
    "lightning_fabric.cli",
)
LAUNCHER_SCRIPTS = ("torchrun", "accelerate", "deepspeed", "fabric", "lightning")
# `python -c` programs that multiprocessing uses for its helper processes: never an agent.
MP_HELPERS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "--multiprocessing-forkserver",
    "joblib.externals.loky",
)
# A process multiprocessing spawned to run a target: a DataLoader worker, a pool
# worker, or a trainer (pytorch/examples' mnist_hogwild steps an optimizer in each).
MP_CHILD = ("multiprocessing.spawn", "--multiprocessing-fork")
START, DORMANT, SKIP = "start", "dormant", "skip"
# Ray's worker processes, started by a raylet: a RayTrainWorker trains (TorchTrainer's workers), the
# others (tasks, Ray Data's, the dashboard's) never step. A local cluster `ray.init()` starts from the
# driver inherits the driver's environment, so its workers see the driver's agent as their owner.
RAY_WORKER = "ray/_private/workers/default_worker.py"


def decide(env, argv, pid):
    """Return (action, reason): START the agent, arm a DORMANT one, or SKIP this process.

    env: the process environment; argv: sys.orig_argv (the interpreter's own
    argv, available before sys.argv is set); pid: os.getpid(). A dormant agent
    (a multiprocessing child of an agent process) hooks torch and starts for
    real at the child's first backward or optimizer step: DataLoader workers
    never step, so they never record, bind or start a thread.
    """
    if not env.get(SESSION_ENV):
        return SKIP, "not under pitstop"
    if env.get("PITSTOP_DISABLE", "").lower() in ("1", "true", "yes"):
        return SKIP, "PITSTOP_DISABLE is set"
    owner = env.get(OWNER_ENV)
    if owner == str(pid):
        return SKIP, "agent already started in this process"
    args = list(argv[1:]) if argv else []
    for arg in args:
        for marker in MP_HELPERS:
            if marker in arg:
                return SKIP, "multiprocessing helper process (%s)" % marker
    for arg in args:
        for marker in MP_CHILD:
            if marker in arg:
                if owner:
                    return DORMANT, "multiprocessing child of the agent process %s (measured from its first step)" % owner
                return SKIP, "multiprocessing child of a process without an agent (a launcher's)"
    for arg in args:
        if arg.endswith(RAY_WORKER):
            if owner:
                return DORMANT, "Ray worker of the agent process %s (measured from its first step)" % owner
            return SKIP, "Ray worker of a process without an agent"
    if owner:
        # A training script that starts its other ranks itself (Lightning's DDP
        # launcher re-runs the script with LOCAL_RANK=1..N-1) makes children that
        # are ranks, not helpers: they get their own agent. Helpers (DataLoader
        # workers, subprocesses) inherit their parent's LOCAL_RANK.
        local = env.get("LOCAL_RANK", "")
        # A launcher pitstop does not know that runs torch's elastic agent in its own process
        # got the agent and starts every rank, rank 0 too (TORCHELASTIC_RUN_ID): under `fabric
        # run` rank 0 trained 192 steps with no record before `fabric` was known as a launcher.
        elastic = env.get("TORCHELASTIC_RUN_ID") and not env.get(OWNER_RANK_ENV, "")
        if not (local and (local != "0" or elastic) and local != env.get(OWNER_RANK_ENV, "")):
            return SKIP, "child of the agent process %s (a subprocess)" % owner
    # Skip interpreter options to find what runs: `-m MOD`, `-c CMD` or a script.
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "-m" and i + 1 < len(args):
            module = args[i + 1]
            for launcher in LAUNCHER_MODULES:
                if module == launcher or module.startswith(launcher + "."):
                    return SKIP, "launcher process (-m %s)" % module
            return START, "module %s" % module
        if arg.startswith("-m") and len(arg) > 2:
            return decide(env, [argv[0], "-m", arg[2:]] + args[i + 1 :], pid)
        if arg == "-c":
            return START, "command string"
        if arg in ("-W", "-X", "--check-hash-based-pycs"):
            i += 2
            continue
        if arg.startswith("-"):
            i += 1
            continue
        name = os.path.basename(arg)
        if name in LAUNCHER_SCRIPTS or name.split("-")[0] in LAUNCHER_SCRIPTS and not name.endswith(".py"):
            return SKIP, "launcher process (%s)" % name
        return START, "script %s" % name
    return SKIP, "interactive interpreter"


def should_start(env, argv, pid):
    """Return (start, reason): whether this process starts an agent now (see `decide`)."""
    action, reason = decide(env, argv, pid)
    return action == START, reason


def _start():
    action, reason = decide(os.environ, getattr(sys, "orig_argv", sys.argv), os.getpid())
    if os.environ.get("PITSTOP_DEBUG_BOOTSTRAP"):
        sys.stderr.write("pitstop bootstrap pid %d: %s (%s)\n" % (os.getpid(), action, reason))
    if action == SKIP:
        return
    parent = os.environ.get(OWNER_ENV, "")
    if action == START:
        os.environ[OWNER_ENV] = str(os.getpid())
        os.environ[OWNER_RANK_ENV] = os.environ.get("LOCAL_RANK", "")
    try:
        import importlib.util

        if importlib.util.find_spec("pitstop") is None and os.environ.get("PITSTOP_PATH"):
            sys.path.append(os.environ["PITSTOP_PATH"])
        from pitstop.profiling import agent

        agent.start_from_env(reason, None if action == START else int(parent))
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


def _interrupted():
    """End this process as Python ends on a Ctrl-C that nothing catches: by SIGINT (exit code 130).

    A SIGINT that comes while the agent starts (importing pitstop takes ~0.3 s
    on a busy machine) raises KeyboardInterrupt here, before the script runs.
    Swallowed, it left the script to train its whole 60 s unmeasured with exit
    code 0; raised, it makes Python abort with "Failed to import the site
    module" (exit code 1). The agent, if it got that far, records the end first.
    """
    try:
        sys.stderr.write("KeyboardInterrupt (while pitstop's agent started; the script did not run)\n")
        agent = sys.modules.get("pitstop.profiling.agent")
        current = getattr(agent, "_current", None)
        if current is not None:
            current.stop("interrupted", 130)
    except BaseException:  # a second Ctrl-C while saying so: end all the same
        pass
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
    os._exit(130)  # SIGINT blocked by whoever started us: the exit code says it all the same


def _drop_empty_tail():
    """Undo the empty PYTHONPATH entry a Ray node without PYTHONPATH leaves ("BOOTSTRAP:").

    pitstop gives a Ray cluster's workers PYTHONPATH="BOOTSTRAP:${PYTHONPATH}" in the job's
    runtime_env; Ray expands the reference to "" where the node has none, and Python
    reads the empty entry as the working directory: it put the worker's cwd on sys.path.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    if os.environ.get("PYTHONPATH") != here + os.pathsep:
        return
    os.environ["PYTHONPATH"] = here
    if here in sys.path:
        at = sys.path.index(here) + 1
        if at < len(sys.path) and sys.path[at] == os.getcwd():
            del sys.path[at]


if not getattr(sys, "_pitstop_bootstrapped", False):
    sys._pitstop_bootstrapped = True
    try:
        try:
            _drop_empty_tail()
            _start()
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # cannot fail: not even SystemExit from a broken import
            try:
                sys.stderr.write("pitstop: bootstrap error: %r\n" % (err,))
            except Exception:
                pass
        _chain_user_sitecustomize()
    except KeyboardInterrupt:  # the user's Ctrl-C, never pitstop's to swallow
        _interrupted()
