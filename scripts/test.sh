#!/usr/bin/env bash
# Run the test-suite with the project venv (README command 2). Extra args go to pytest.
#
# Parallel by default: pytest-xdist workers (INSIGHT_O3_TEST_WORKERS, default 3: the tests wait on servers and
# subprocesses, so a 2-core machine keeps 3 busy); a test module, or a group of modules that must not overlap, is
# one worker's unit of work (tests/support/parallel.py). INSIGHT_O3_TEST_WORKERS=0 (or `-n 0`) runs serially, in
# one process; so does a venv without pytest-xdist.
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
exec "$PY" -m pytest -q ${PARALLEL[@]+"${PARALLEL[@]}"} "$@"
