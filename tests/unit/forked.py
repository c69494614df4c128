"""Fresh processes that share one `import torch`: each code runs in a child forked once the import is done.

`import torch` costs ~2.8 s of CPU on the 2-core CI VM. A test that needs several
processes, each starting from torch imported and nothing of pitstop installed yet,
pays it once: the interpreter imports the prelude, then forks a child per code, and
each child starts where a fresh `python -c "<prelude>; <code>"` would be. The
prelude must start no thread (`import torch` starts none; its thread pools start at
the first parallel op), or the children could inherit a lock held by it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

RUNNER = r'''
import json, os, sys, traceback
exec(compile(sys.argv[1], "<prelude>", "exec"), {"__name__": "__prelude__"})
outs = []
for code, argv in json.loads(sys.argv[2]):
    read, write = os.pipe()
    sys.stdout.flush()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        os.dup2(write, 1)
        sys.argv = ["-c", *argv]
        status = 0
        try:
            exec(compile(code, "<child>", "exec"), {"__name__": "__main__"})
        except SystemExit as stop:
            status = stop.code if isinstance(stop.code, int) else int(stop.code is not None)
        except BaseException:
            traceback.print_exc()
            status = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    os.close(write)
    with os.fdopen(read) as pipe:
        out = pipe.read()
    outs.append([os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), out])
print(json.dumps(outs))
'''


def run_forked(prelude: str, runs: list[tuple[str, list[str]]], timeout: float = 300) -> list[str]:
    """Each run's stdout, in order: `code` run as `__main__` with `sys.argv[1:] == argv`, after `prelude`.

    Every child must exit 0; a timeout kills the runner and the child it waits on."""
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, prelude, json.dumps(runs)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err
    results = json.loads(out.strip().splitlines()[-1])
    assert [code for code, _ in results] == [0] * len(runs), err
    return [text for _, text in results]
