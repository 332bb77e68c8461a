#!/usr/bin/env bash
# Run the test-suite with the project venv (README command 2). Extra args go to pytest.
#
# Parallel by default: pytest-xdist workers (INSIGHT_O3_TEST_WORKERS, default 3: the tests wait on servers and
# subprocesses, so a 2-core machine keeps 3 busy); a test module, or a group of modules that must not overlap, is
# one worker's unit of work (tests/support/parallel.py). INSIGHT_O3_TEST_WORKERS=0 (or `-n 0`) runs serially, in
# one process; so does a venv without pytest-xdist.
# The tests marked `timing` (a wall-clock bound that a machine loaded by the other workers breaks) are held out of
# the workers and run after them, alone and serially (--timing-phase; tests/support/parallel.py). A JUnit report
# asked for with --junitxml=X (argument or PYTEST_ADDOPTS) gets their cases in X's sibling X.timing.xml.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${VENV:-$ROOT/.venv}/bin/python"
[ -x "$PY" ] || { echo "no venv at ${VENV:-$ROOT/.venv}; run: bash scripts/setup.sh" >&2; exit 1; }
WORKERS="${INSIGHT_O3_TEST_WORKERS:-3}"
case "$WORKERS" in auto|[0-9]|[0-9][0-9]) ;; *) echo "INSIGHT_O3_TEST_WORKERS must be a number or auto, got '$WORKERS'" >&2; exit 2 ;; esac
PARALLEL=()
if [ "$WORKERS" != 0 ]; then
  if "$PY" -c "import xdist" 2>/dev/null; then
    PARALLEL=(-n "$WORKERS" --dist loadfile)
  else
    echo "[test] pytest-xdist is not installed in $("$PY" -c 'import sys; print(sys.prefix)'): running serially" >&2
  fi
fi
[ ${#PARALLEL[@]} = 0 ] && exec "$PY" -m pytest -q "$@"

timing_junit() {  # $1: one argument; a --junitxml/--junit-xml path gets the timing phase's own file
  case "$1" in
    --junitxml=*.xml|--junit-xml=*.xml) printf '%s' "${1%.xml}.timing.xml" ;;
    --junitxml=*|--junit-xml=*) printf '%s' "$1.timing.xml" ;;
    *) printf '%s' "$1" ;;
  esac
}
TIMING_ARGS=()
for a in "$@"; do TIMING_ARGS+=("$(timing_junit "$a")"); done
TIMING_ADDOPTS=()
for a in ${PYTEST_ADDOPTS:-}; do TIMING_ADDOPTS+=("$(timing_junit "$a")"); done

# Each worker, and what it starts, gets one OpenMP/BLAS thread unless the caller set a count: the workers are the
# parallelism. With a thread per core in each of them, OpenMP's spin-waits for threads the busy cores had put aside
# burned most of the CPU (the CPU driver's warm start beside 3 busy processes: 112 CPU s, 38 with one thread).
RC=0
OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-1}" \
  MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}" "$PY" -m pytest -q "${PARALLEL[@]}" --timing-phase=skip "$@" || RC=$?
echo "[test] the tests marked timing, alone on the machine (serially, after the workers)"
TIMING_RC=0
PYTEST_ADDOPTS="${TIMING_ADDOPTS[*]+${TIMING_ADDOPTS[*]}}" "$PY" -m pytest -q --timing-phase=only \
  ${TIMING_ARGS[@]+"${TIMING_ARGS[@]}"} -n 0 || TIMING_RC=$?
# 5: no test selected in that part (a selection without timing tests, or with nothing else)
if [ "$RC" = 5 ] && [ "$TIMING_RC" = 5 ]; then exit 5; fi
[ "$RC" = 5 ] && RC=0
[ "$TIMING_RC" = 5 ] && TIMING_RC=0
[ "$RC" != 0 ] && exit "$RC"
exit "$TIMING_RC"
