#!/usr/bin/env bash
# Runs the GPU acceptance (benchmarks/gpu_acceptance.py) on a lent GPU machine in one device call.
#
#   benchmarks/gpu_acceptance.sh fetch                  # HERE, once (needs PyPI): the wheels pitstop needs there, into .whl/
#   benchmarks/gpu_acceptance.sh run "$OUT" [--quick]   # THERE: install the carried wheels, run, tee the log into $OUT
#
# The GPU machine has torch (CUDA), nvidia-ml-py, psutil, numpy, prometheus-client, pytest and
# rich's own needs, and no network: textual and the rest below travel as wheels (~1.4 MB) in
# .whl/ (ignored by .gitignore; name it in the device call's `carry`). The device call:
#   command: bash benchmarks/gpu_acceptance.sh run "$OUT"     carry: [".whl"]     timeout_s: 600
# Exit code: gpu_acceptance.py's (0 all met, 1 a target missed or a part failed, 3 no CUDA device);
# 4 when the wheels are missing.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=(textual==8.2.8 textual-plotext==1.0.1 plotext==5.3.2 platformdirs==4.14.7 linkify-it-py==2.2.0
        uc-micro-py==2.0.0 mdit-py-plugins==0.7.0 rich==15.0.0 tomli-w==1.2.0)
case "${1:-}" in
  fetch)
    python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${WHEELS[@]}"
    ls .whl ;;
  run)
    out="${2:?usage: gpu_acceptance.sh run OUT [ARGS...]}"
    shift 2
    if ! ls .whl/textual-*.whl >/dev/null 2>&1; then
      echo "no wheels in .whl/: run 'benchmarks/gpu_acceptance.sh fetch' here first and carry .whl" >&2
      exit 4
    fi
    mkdir -p "$out"
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    # The checkout first (pitstop itself), then the wheels; `pitstop run` hands both to the training process.
    export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
    nvidia-smi --query-gpu=name,driver_version,memory.used,memory.total --format=csv >"$out/nvidia-smi.csv" 2>&1 || true
    set +e
    python3 benchmarks/gpu_acceptance.py --out "$out" "$@" 2>&1 | tee "$out/acceptance.log"
    exit "${PIPESTATUS[0]}" ;;
  *)
    echo "usage: benchmarks/gpu_acceptance.sh fetch | run OUT [--quick] [--budget SECONDS]" >&2
    exit 2 ;;
esac
