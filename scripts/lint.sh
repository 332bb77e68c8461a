#!/usr/bin/env bash
# Lint, format check and type check with the project venv (.ci/run runs this before the tests).
#   bash scripts/lint.sh          # check only
#   bash scripts/lint.sh --fix    # apply ruff's safe fixes and format, then check
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${VENV:-$ROOT/.venv}/bin"
[ -x "$BIN/ruff" ] && [ -x "$BIN/mypy" ] || { echo "no ruff/mypy in ${VENV:-$ROOT/.venv}; run: bash scripts/setup.sh" >&2; exit 1; }
PATHS=(insight_o3 scripts tests verl/recipe)
if [ "${1:-}" = "--fix" ]; then
  "$BIN/ruff" check --fix "${PATHS[@]}"
  "$BIN/ruff" format "${PATHS[@]}"
fi
echo "[lint] ruff check"
"$BIN/ruff" check "${PATHS[@]}"
echo "[lint] ruff format --check"
"$BIN/ruff" format --check "${PATHS[@]}"
echo "[lint] mypy"
"$BIN/mypy"
