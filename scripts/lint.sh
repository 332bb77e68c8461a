#!/usr/bin/env bash
# Lint, format check, type check and the import contract with the project venv (.ci/run runs this
# before the tests). The contract (layers, no cycles, sans-IO sessions, a light library, the recipe on
# top) is [tool.importlinter] in pyproject.toml, explained in docs/architecture.md.
#   bash scripts/lint.sh          # check only
#   bash scripts/lint.sh --fix    # apply ruff's safe fixes and format, then check
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
BIN="${VENV:-$ROOT/.venv}/bin"
[ -x "$BIN/ruff" ] && [ -x "$BIN/mypy" ] && [ -x "$BIN/lint-imports" ] || { echo "no ruff/mypy/lint-imports in ${VENV:-$ROOT/.venv}; run: bash scripts/setup.sh" >&2; exit 1; }
PATHS=(insight_o3 scripts tests verl/recipe training)
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
echo "[lint] import contract (lint-imports)"
PYTHONPATH="$ROOT:$ROOT/verl${PYTHONPATH:+:$PYTHONPATH}" "$BIN/lint-imports" --config pyproject.toml --no-cache
