#!/usr/bin/env bash
# GPU smoke test of iterative DPO on one node, one PASS/FAIL line per check (about 10-15 minutes without `real`):
#
#   pip install -e ".[train,dpo]"                            # the GPU stack + TRL/DeepSpeed (README, Iterative DPO)
#   bash training/dpo/smoke_gpu.sh [WORK_DIR]                # from anywhere; no internet needed
#   SMOKE_MODEL=/path/to/Qwen2.5-VL-7B-Instruct bash training/dpo/smoke_gpu.sh   # + the real-checkpoint step
#
# Checks, in order (a failed check skips the ones that need it):
#   gpu     torch sees CUDA; SMOKE_GPUS processes (default: every visible GPU, at most 8)
#   stack   trl 1.16.0, deepspeed 0.19.8, accelerate and vLLM import (the dpo and train extras)
#   train   tests/support/dpo_train_run.py --device cuda: the tiny random Qwen2.5-VL, accelerate + DeepSpeed ZeRO-3
#           (training/dpo/configs) over SMOKE_GPUS GPUs, bf16 + gradient checkpointing, two fixed pairs evaluated every
#           step; killed after checkpoint-2 and resumed: the loss falls and the reward margin grows at every step,
#           each step logged once, ZeRO shards written, the export complete
#   rounds  tests/support/dpo_rounds_run.py --device cuda: two rounds of training.dpo.rounds, the policy served by
#           vLLM on the GPU through scripts/vllm_serve_bg.sh, the data engine's generation, scripted assessment on
#           127.0.0.1, the trainer under accelerate + ZeRO-3; round 1 killed mid-training and resumed
#   real    (SMOKE_MODEL set) two optimiser steps of the release's settings — bf16, gradient checkpointing, 2 pairs
#           per device, 12,288-token sequences (chains of ~10,500 tokens) — on that checkpoint under ZeRO-3: it fits
#           in memory and the losses are finite; the step time is printed
#   time    all of the above within SMOKE_BUDGET_S (1800; 5400 with SMOKE_MODEL)
# Exit status 0 when every line is PASS. Logs and each check's facts.json stay in WORK_DIR.
#
# HONEST STATUS: never run on a GPU (none was lent to the session that wrote it); its CPU halves run in the test-suite
# (tests/training/test_dpo_train.py, test_dpo_rounds.py), SMOKE_PLAN=1 prints the commands (tests/training/test_smoke_gpu.py).
#
# Environment: PYTHON (default python3: the interpreter with the train and dpo extras), CUDA_VISIBLE_DEVICES,
# SMOKE_GPUS, SMOKE_MODEL, SMOKE_BUDGET_S, SMOKE_PLAN=1.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="${1:-${TMPDIR:-/tmp}/dpo-smoke-gpu.$$}"
mkdir -p "$WORK" && WORK="$(cd "$WORK" && pwd)"
BUDGET="${SMOKE_BUDGET_S:-$([[ -n "${SMOKE_MODEL:-}" ]] && echo 5400 || echo 1800)}"
START=$SECONDS
FAILED=0
declare -A STATE=()

report() {  # report <check> <PASS|FAIL|SKIP|PLAN> <detail>  (PLAN: SMOKE_PLAN=1, counts as passed)
    STATE[$1]=$2
    [[ "$2" == PLAN ]] && STATE[$1]=PASS
    [[ "$2" == FAIL ]] && FAILED=1
    printf '%s %-7s %s\n' "$2" "$1" "$3"
}
needs() { local c; for c in "$@"; do [[ "${STATE[$c]:-}" == PASS ]] || return 1; done; }
run_check() {  # run_check <check> <needs...> -- <command...>
    local name="$1"; shift
    local deps=()
    while [[ "$1" != "--" ]]; do deps+=("$1"); shift; done
    shift
    if (( ${#deps[@]} )) && ! needs "${deps[@]}"; then report "$name" SKIP "needs ${deps[*]}"; return; fi
    if [[ "${SMOKE_PLAN:-0}" == "1" ]]; then report "$name" PLAN "$*"; return; fi
    local log="$WORK/$name.out" t0=$SECONDS
    "$@" >"$log" 2>&1
    if (( $? == 0 )); then
        report "$name" PASS "$((SECONDS - t0)) s: $(grep -E '^(PASS|ok)' "$log" | tail -n 1)"
    else
        report "$name" FAIL "$((SECONDS - t0)) s, see $log: $(grep -E '^FAIL' "$log" | head -n 3 | tr '\n' ' ')$(tail -n 1 "$log")"
    fi
}

echo "[smoke_gpu] work dir: $WORK" >&2
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

if [[ "${SMOKE_PLAN:-0}" == "1" ]]; then
    export SMOKE_GPUS="${SMOKE_GPUS:-8}"
    report gpu PLAN "torch.cuda.device_count() -> $SMOKE_GPUS process(es)"
else
    N="$("$PYTHON" -c 'import torch; print(min(torch.cuda.device_count(), 8) if torch.cuda.is_available() else 0)' 2>"$WORK/gpu.out")"
    if [[ "${N:-0}" =~ ^[1-8]$ ]]; then
        export SMOKE_GPUS="${SMOKE_GPUS:-$N}"
        report gpu PASS "$SMOKE_GPUS process(es): $("$PYTHON" -c 'import torch; print(torch.cuda.get_device_name(0))' 2>/dev/null)"
    else
        report gpu FAIL "no CUDA GPU visible to torch (see $WORK/gpu.out)"
    fi
fi
run_check stack gpu -- "$PYTHON" -c "
import importlib.metadata as md, accelerate, deepspeed, trl, vllm
assert md.version('trl') == '1.16.0' and md.version('deepspeed') == '0.19.8', (md.version('trl'), md.version('deepspeed'))
print('ok trl', trl.__version__, 'deepspeed', deepspeed.__version__, 'accelerate', accelerate.__version__, 'vllm', vllm.__version__)"
run_check train stack -- "$PYTHON" -m tests.support.dpo_train_run --device cuda --work "$WORK/train"
run_check rounds train -- "$PYTHON" -m tests.support.dpo_rounds_run --device cuda --work "$WORK/rounds"
if [[ -n "${SMOKE_MODEL:-}" ]]; then
    run_check real train -- "$PYTHON" -m tests.support.dpo_train_run --device cuda --work "$WORK/real" --real "$SMOKE_MODEL"
else
    report real SKIP "SMOKE_MODEL not set (a Qwen2.5-VL checkpoint directory)"
fi
if (( SECONDS - START <= BUDGET )); then report time PASS "$((SECONDS - START)) s"; else report time FAIL "$((SECONDS - START)) s > $BUDGET s"; fi
exit "$FAILED"
