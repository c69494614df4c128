#!/usr/bin/env bash
# Sets up a local virtual environment and runs pitstop's demo or its tests.
#   ./dev.sh demo [ARGS...]   pitstop demo on the embedded workload (TUI in a terminal)
#   ./dev.sh test [ARGS...]   the whole test suite (what CI runs)
#   ./dev.sh setup            only the set-up
set -euo pipefail
cd "$(dirname "$0")"
VENV="${PITSTOP_VENV:-.venv}"
PY="$VENV/bin/python"

setup() {
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
    "$PY" -m pip install -q --upgrade pip
  fi
  # torch first, pinned: on this project's CPU machines 2.13.0 comes from a local
  # file in seconds; on a GPU server the same pin brings PyPI's CUDA build.
  if ! "$PY" -c "import torch" 2>/dev/null; then
    "$PY" -m pip install -q "torch==2.13.0"
  fi
  local stamp="$VENV/.pitstop-installed"
  if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    "$PY" -m pip install -q -e ".[test]"
    touch "$stamp"
  fi
}

cmd="${1:-}"
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; exec "$VENV/bin/pitstop" demo "$@" ;;
  test) setup; exec "$PY" -m pytest -q "$@" ;;
  *) echo "usage: ./dev.sh demo|test|setup [ARGS...]" >&2; exit 2 ;;
esac
