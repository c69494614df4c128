"""A wrapper that runs another training script (as `python steptime.py train.py ARGS` does): the command is the wrapper's."""

from __future__ import annotations

import runpy
import sys

if __name__ == "__main__":
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    print(f"steptime.py wraps {script}", flush=True)
    runpy.run_path(script, run_name="__main__")
