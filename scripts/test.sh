#!/usr/bin/env bash
# Run the test-suite with the project venv (README command 2). Extra args go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PY="${VENV:-$ROOT/.venv}/bin/python"
[ -x "$PY" ] || { echo "no venv at ${VENV:-$ROOT/.venv}; run: bash scripts/setup.sh" >&2; exit 1; }
exec "$PY" -m pytest -q "$@"
