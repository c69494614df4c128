#!/usr/bin/env bash
# Sets up a local virtual environment and runs pitstop's demo or its tests.
#   ./dev.sh demo [ARGS...]   pitstop demo on the embedded workload (TUI in a terminal)
#   ./dev.sh test [ARGS...]   the whole test suite (what CI runs), on PITSTOP_TEST_WORKERS (2) workers
#   ./dev.sh test-busy [ARGS...]  the same with one core kept busy by a CPU hog (PITSTOP_HOGS=N for more)
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
  # An editable install leaves pitstop's bytecode to the first import, and with
  # PYTHONDONTWRITEBYTECODE set (as on the shared machines) none is ever written: every
  # `pitstop run` then compiled its front and its agent from source, 0.45 s of CPU of a
  # tiny run's 4.3 s. compileall writes it whatever that variable says, and only what changed.
  "$PY" -m compileall -q pitstop
}

# ray[train] for the Ray tests (tests/integration/test_ray.py), apart from the test extra: where it
# cannot install (no wheel for this Python or platform) the rest of the suite still runs, and the
# Ray tests skip with pip's reason, kept in $VENV/.pitstop-no-ray. Never a dependency of pitstop.
# 16 packages, ~150 MB of wheels: 76 s from PyPI, 64 s from wheels already on disk (2 cores, load 6-10).
# Tried by the test commands only (the demo never needs it), once per change of pyproject.toml.
install_ray() {
  local log="$VENV/.pitstop-ray-install.log" stamp="$VENV/.pitstop-ray-tried"
  if [ -f "$stamp" ] && [ ! pyproject.toml -nt "$stamp" ]; then
    return 0
  fi
  touch "$stamp"
  if "$PY" -m pip install -q -e ".[ray]" >"$log" 2>&1; then
    rm -f "$VENV/.pitstop-no-ray"
  else
    { grep '^ERROR' "$log" || grep -v '^WARNING' "$log"; } | tail -n 2 >"$VENV/.pitstop-no-ray"
    echo "dev.sh: ray[train] not installed, the Ray tests will skip: $(cat "$VENV/.pitstop-no-ray")" >&2
  fi
}

# Two pytest-xdist workers on the 2-core CI box; the tuners run one at a time (xdist_group "tune").
pytest_args() {
  local workers="${PITSTOP_TEST_WORKERS:-2}"
  if [ "$workers" = 0 ]; then
    echo "-q"
  else
    echo "-q -n $workers --dist loadgroup"
  fi
}

# A shared CI machine keeps other work running beside the suite (at load 9-13 it failed
# twice and took 20.5 minutes). The hogs are spinning Python processes, killed on any exit.
HOGS=()  # global: the EXIT trap runs after test_busy's locals are gone
test_busy() {
  local i
  trap 'if [ ${#HOGS[@]} -gt 0 ]; then kill "${HOGS[@]}" 2>/dev/null || true; fi' EXIT
  for i in $(seq "${PITSTOP_HOGS:-1}"); do
    "$PY" -c "while True: pass" &
    HOGS+=("$!")
  done
  echo "dev.sh: ${#HOGS[@]} CPU hog(s) running (pid ${HOGS[*]}), killed when the suite ends" >&2
  # shellcheck disable=SC2046
  "$PY" -m pytest $(pytest_args) "$@"
}

cmd="${1:-}"
shift || true
case "$cmd" in
  setup) setup; install_ray ;;
  demo) setup; exec "$VENV/bin/pitstop" demo "$@" ;;
  # shellcheck disable=SC2046
  test) setup; install_ray; exec "$PY" -m pytest $(pytest_args) "$@" ;;
  test-busy) setup; install_ray; test_busy "$@" ;;
  *) echo "usage: ./dev.sh demo|test|test-busy|setup [ARGS...]" >&2; exit 2 ;;
esac
