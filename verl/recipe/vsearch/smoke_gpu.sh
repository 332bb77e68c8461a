#!/usr/bin/env bash
# GPU smoke test of the path train.sh takes, on one node, in about 10 minutes, one PASS/FAIL line per check:
#
#   pip install -e ".[train]" && pip install flash-attn ...   # the GPU stack + flash-attn (README, "flash-attn")
#   bash verl/recipe/vsearch/smoke_gpu.sh [WORK_DIR]          # from anywhere; no internet needed
#
# Checks, in order (a failed check skips the ones that need it):
#   harmony     the venv starts offline: verl 0.7.0 loads openai_harmony's vocab when it imports its vLLM 0.12.0
#               server (every Ray process, vLLM's EngineCore); unless a vocab is staged (TIKTOKEN_RS_CACHE_DIR) or it
#               loads, `python -m recipe.vsearch.offline ensure` installs the start-up hook that tolerates its absence
#               (recipe/vsearch/README.md, Offline nodes), then a fresh interpreter must pass the start-up check
#   gpu         torch sees CUDA; 2 FSDP ranks when 2+ GPUs are visible, else 1
#   flash_attn  `import flash_attn` (train.sh's default attention and remove-padding need it)
#   train       train.sh end to end (tests/support/recipe_cpu_run.py --device cuda): tiny random Qwen2.5-VL,
#               scripted vReasoner/judge on 127.0.0.1, verl 0.7.0's vLLM rollout in sleep mode, flash_attention_2 +
#               remove-padding, 2 steps + validation + checkpoint
#   resume      a second train.sh resumes the checkpoint: step 3 + validation
#   rollout     recipe/vsearch/rollout_checks.py --gpu on both runs (vLLM holds the actor's weights after every
#               sync, frozen tower bit-identical, vLLM ran the recipe's prompt ids, finite non-zero grad norm, each
#               sleep frees GPU memory)
#   export      export_hf.sh of the last checkpoint
#   serve       vLLM serves the export and answers one request with 7 images (the whole image at the training
#               size, ~3.2M pixels, + 6 crops: tests/support/smoke_serve.py)
#   time        INFO only: the wall time against SMOKE_BUDGET_S (600). A cold node spends minutes in vLLM's
#               torch.compile and CUDA-graph capture (three engine starts: run1, run2, serve); they share one compile
#               cache (VLLM_CACHE_ROOT, TORCHINDUCTOR_CACHE_DIR, TRITON_CACHE_DIR under SMOKE_CACHE, default
#               WORK_DIR/cache; keep SMOKE_CACHE across runs to start warm), and going over the budget fails nothing
# Exit status 0 when every functional line is PASS. Logs and check records stay in WORK_DIR; WORK_DIR/smoke_summary.json
# holds every line (check, status, detail), the wall time and the verdict.
#
# What it does NOT cover: the 7B model, D.1 batch sizes, multi-node, TP > 1; the training episodes use the tiny
# policy's 224x168 images (real sizes and 7 images per request are checked by `serve`).
# HONEST STATUS: never run on a GPU (none was available); its non-GPU parts are tested (SMOKE_PLAN=1 prints the
# commands it would run: tests/recipe/test_gpu_start.py).
#
# Environment: PYTHON (default python3; the interpreter with the train extra), CUDA_VISIBLE_DEVICES,
# SMOKE_ATTN (flash_attention_2; sdpa to smoke-test the documented switch without flash-attn), SMOKE_PLAN=1,
# SMOKE_BUDGET_S, SMOKE_CACHE.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="${1:-${TMPDIR:-/tmp}/vsearch-smoke-gpu.$$}"
mkdir -p "$WORK" && WORK="$(cd "$WORK" && pwd)"
ATTN="${SMOKE_ATTN:-flash_attention_2}"
BUDGET="${SMOKE_BUDGET_S:-600}"
START=$SECONDS
FAILED=0
declare -A STATE=()

report() {  # report <check> <PASS|FAIL|SKIP|PLAN|INFO> <detail>  (PLAN: SMOKE_PLAN=1, counts as passed)
    STATE[$1]=$2
    [[ "$2" == PLAN ]] && STATE[$1]=PASS
    [[ "$2" == FAIL ]] && FAILED=1
    printf '%s %-10s %s\n' "$2" "$1" "$3"
    printf '%s\t%s\t%s\n' "$1" "$2" "${3//$'\t'/ }" >>"$LINES"
}
needs() { local c; for c in "$@"; do [[ "${STATE[$c]:-}" == PASS ]] || return 1; done; }
run_check() {  # run_check <check> <needs...> -- <command...>
    local name="$1"; shift
    local deps=()
    while [[ "$1" != "--" ]]; do deps+=("$1"); shift; done
    shift
    if (( ${#deps[@]} )) && ! needs "${deps[@]}"; then report "$name" SKIP "needs ${deps[*]}"; return; fi
    if [[ "${SMOKE_PLAN:-0}" == "1" ]]; then report "$name" PLAN "$*"; STATE[$name]=PASS; return; fi
    local log="$WORK/$name.out" t0=$SECONDS
    "$@" >"$log" 2>&1
    LAST_RC=$?
    if (( LAST_RC == 0 )); then
        report "$name" PASS "$((SECONDS - t0)) s"
    else
        report "$name" FAIL "$((SECONDS - t0)) s, see $log: $(tail -n 1 "$log")"
    fi
}

mkdir -p "$WORK"
LINES="$WORK/smoke_lines.tsv"
: >"$LINES"
echo "[smoke_gpu] work dir: $WORK" >&2
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$ROOT:$ROOT/verl${PYTHONPATH:+:$PYTHONPATH}"
# one compile cache for the three vLLM engine starts (run1, run2, serve) and Inductor / Triton: the second and third
# start read what the first compiled (VLLM_* is forwarded to every Ray worker; the local Ray inherits the rest)
CACHE="${SMOKE_CACHE:-$WORK/cache}"
mkdir -p "$CACHE" && CACHE="$(cd "$CACHE" && pwd)"
export VLLM_CACHE_ROOT="${VLLM_CACHE_ROOT:-$CACHE/vllm}" TORCHINDUCTOR_CACHE_DIR="${TORCHINDUCTOR_CACHE_DIR:-$CACHE/inductor}"
export TRITON_CACHE_DIR="${TRITON_CACHE_DIR:-$CACHE/triton}"

# offline start: the first line (every later check starts vLLM / verl's server module in this venv)
run_check harmony -- bash -c '"$0" -m recipe.vsearch.offline ensure && "$0" -m recipe.vsearch.offline check' "$PYTHON"

if [[ "${SMOKE_PLAN:-0}" == "1" ]]; then
    RANKS="${SMOKE_RANKS:-2}"
    report gpu PLAN "torch.cuda.device_count() -> $RANKS rank(s)"; STATE[gpu]=PASS
else
    RANKS="$("$PYTHON" -c 'import torch; n = torch.cuda.device_count(); print(min(n, 2) if torch.cuda.is_available() else 0)' 2>"$WORK/gpu.out")"
    if [[ "${RANKS:-0}" =~ ^[12]$ ]]; then
        report gpu PASS "$RANKS rank(s): $("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)"
    else
        report gpu FAIL "no CUDA GPU visible to torch (see $WORK/gpu.out)"
        echo "smoke_gpu.sh: no CUDA GPU visible to torch" >&2
    fi
fi
if [[ "$ATTN" == flash_attention_2 ]]; then
    run_check flash_attn gpu -- "$PYTHON" -c "import flash_attn; print(flash_attn.__version__)"
    TRAIN_NEEDS=(harmony gpu flash_attn)
else
    report flash_attn SKIP "SMOKE_ATTN=$ATTN"
    TRAIN_NEEDS=(harmony gpu)
fi
run_check train "${TRAIN_NEEDS[@]}" -- "$PYTHON" -m tests.support.recipe_cpu_run --device cuda --python "$PYTHON" \
    --work "$WORK/run" --ranks "${RANKS:-1}" --attn "$ATTN" --summary "$WORK/summary.json"
# recipe_cpu_run does both runs and the rollout verdicts (status 1 if any fails): one line each, from its summary
if [[ "${SMOKE_PLAN:-0}" == "1" ]]; then
    report resume PLAN "(run2 of the command above)"; report rollout PLAN "(rollout_checks --gpu on run1, run2)"
elif [[ -f "$WORK/summary.json" ]]; then
    STATE[train]=SKIP
    for run in run1 run2; do
        rc="$("$PYTHON" -c 'import json, sys; s = json.load(open(sys.argv[1]))[sys.argv[2]]; print(s["rc"] if s else "none")' "$WORK/summary.json" "$run")"
        check=$([[ $run == run1 ]] && echo train || echo resume)
        if [[ "$rc" == 0 ]]; then report "$check" PASS "$run: see $WORK/run/$run.log"; else report "$check" FAIL "$run: rc $rc, see $WORK/run/$run.log"; fi
    done
    if needs train resume && (( LAST_RC == 0 )); then report rollout PASS "both runs"; else report rollout FAIL "see $WORK/train.out"; fi
else
    report resume SKIP "needs train"; report rollout SKIP "needs train"
fi
CKPT="$WORK/run/work/ckpts/cpu/driver/global_step_3"
run_check export resume -- bash "$ROOT/verl/recipe/vsearch/export_hf.sh" "$CKPT" "$WORK/export"
run_check serve export -- "$PYTHON" -m tests.support.smoke_serve "$WORK/export" --python "$PYTHON"
if (( SECONDS - START <= BUDGET )); then
    report time INFO "$((SECONDS - START)) s (budget $BUDGET s)"
else
    report time INFO "$((SECONDS - START)) s > budget $BUDGET s (not a failure: cold compile caches; SMOKE_CACHE=$CACHE)"
fi
# the summary: every line, the wall time, the verdict (python3: the one interpreter every node has)
python3 - "$LINES" "$WORK/smoke_summary.json" "$((SECONDS - START))" "$BUDGET" "$FAILED" <<'PY'
import json, sys
lines, out, wall, budget, failed = sys.argv[1:]
checks = [dict(zip(("check", "status", "detail"), ln.rstrip("\n").split("\t", 2))) for ln in open(lines) if ln.strip()]
json.dump({"checks": checks, "wall_s": int(wall), "budget_s": int(budget), "ok": failed == "0"}, open(out, "w"), indent=1)
PY
echo "[smoke_gpu] summary: $WORK/smoke_summary.json" >&2
exit "$FAILED"
