#!/usr/bin/env bash
# The first GPU run's acceptance kit: one command, about 10 minutes on one H100/H200, no internet, no 7B weights (the
# tiny Qwen2.5-VL the tests build offline). From the repository root:
#
#   PYTHON=/path/to/train-venv/bin/python bash scripts/gpu_acceptance.sh [WORK_DIR]
#
# PYTHON: the interpreter with the GPU stack (pip install -e ".[train]", flash-attn built for its torch, pytest).
# Steps, each check one line (PASS / FAIL / SKIP / INFO) and all of them in WORK_DIR/acceptance.json:
#   0 preflight      (tests/support/gpu_acceptance.py, ~30 s): the GPU, the pinned versions (torch 2.9.0, vllm 0.12.0,
#                    verl 0.7.0, transformers 4.57.3), one flash-attn varlen call against PyTorch's attention, a C
#                    compiler (Triton, torch.compile), pytest. A missing GPU stack stops here.
#   1 unit           (tests/gpu, no Ray, ACCEPT_UNIT_S 150 s): rebuilt pixels equal the processor's and reach the
#                    FSDP2 model in bf16 on cuda; log-probs of recipe-shaped multi-turn rows (4-row mrope ids) agree
#                    across eager / SDPA (trimmed or not) / flash-attention-2 + remove-padding within bf16 bounds; vLLM's
#                    prompt log-probs on the recipe's ids and images vs the trainer's; sleep -> wake -> same output
#   2 smoke          (verl/recipe/vsearch/smoke_gpu.sh on one GPU, ACCEPT_SMOKE_S 360 s: its own lines, harmony to
#                    serve) and the metrics its runs must show (grad norm finite and > 0, no old-log-prob pass, image
#                    inputs as references, memory and pixel-cache counters logged, the resume)
# Exit 0 when no line is FAIL. Without a CUDA GPU it prints "SKIP gpu_acceptance: no GPU" and exits 0 (CI runs it so;
# its CPU-checkable parts are tests/recipe/test_gpu_acceptance.py and the CPU driver test). ACCEPT_PLAN=1 prints what
# it would run (and the budget) without running anything.
# HONEST STATUS: written without a GPU (none was lent to its developers); never run on one.
set -uo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="${1:-${TMPDIR:-/tmp}/gpu-acceptance.$$}"
UNIT_S="${ACCEPT_UNIT_S:-150}"
SMOKE_S="${ACCEPT_SMOKE_S:-360}"
cd "$ROOT"
export PYTHONPATH="$ROOT:$ROOT/verl${PYTHONPATH:+:$PYTHONPATH}" HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
START=$SECONDS

summary() {  # summary <extra status line>: the JSON of every step's lines
    python3 -m tests.support.gpu_acceptance summary "$WORK/acceptance.json" "$WORK"/preflight.tsv "$WORK"/unit.tsv \
        "$WORK"/smoke.tsv "$WORK"/smoke_metrics.tsv --wall_s "$((SECONDS - START))" >/dev/null
    echo "[gpu_acceptance] $1; summary: $WORK/acceptance.json ($((SECONDS - START)) s)" >&2
}

if [[ "${ACCEPT_PLAN:-0}" == "1" ]]; then
    echo "PLAN preflight   $PYTHON -m tests.support.gpu_acceptance preflight $WORK/preflight.tsv"
    echo "PLAN unit        timeout ${UNIT_S} $PYTHON -m pytest -q -p no:cacheprovider -m gpu tests/gpu"
    echo "PLAN smoke       CUDA_VISIBLE_DEVICES=0 SMOKE_BUDGET_S=$SMOKE_S timeout $SMOKE_S bash verl/recipe/vsearch/smoke_gpu.sh $WORK/smoke"
    echo "PLAN metrics     $PYTHON -m tests.support.gpu_acceptance metrics $WORK/smoke/run $WORK/smoke_metrics.tsv"
    echo "PLAN budget      $((30 + UNIT_S + SMOKE_S)) s of steps (the device tool's limit: 600 s)"
    exit 0
fi
mkdir -p "$WORK" && WORK="$(cd "$WORK" && pwd)"
rm -f "$WORK"/*.tsv

# no GPU: a clean skip (CI, a laptop); the GPU stack's own torch decides, else nvidia-smi
if ! "$PYTHON" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null \
    && ! nvidia-smi -L >/dev/null 2>&1; then
    echo "SKIP gpu_acceptance: no GPU (torch in $PYTHON sees no CUDA device and nvidia-smi finds none)"
    printf 'gpu\tSKIP\tno GPU\n' >"$WORK/preflight.tsv"
    summary "skipped: no GPU"
    exit 0
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/INFO nvidia-smi         /'

# 0. preflight: without the stack, nothing else can say anything
"$PYTHON" -m tests.support.gpu_acceptance preflight "$WORK/preflight.tsv"
if grep -qE $'^(gpu|versions)\tFAIL' "$WORK/preflight.tsv"; then
    summary "stopped: the GPU or the pinned stack is missing"
    exit 1
fi

# 1. GPU unit checks (no Ray)
if grep -qE $'^pytest\tFAIL' "$WORK/preflight.tsv"; then
    printf 'unit\tSKIP\tpytest missing\n' >"$WORK/unit.tsv"
    echo "SKIP unit               pytest missing in $PYTHON"
else
    t0=$SECONDS
    timeout "$UNIT_S" "$PYTHON" -m pytest -q -p no:cacheprovider -m gpu tests/gpu -rA >"$WORK/unit.log" 2>&1
    rc=$?
    if (( rc == 124 )); then
        printf 'unit\tFAIL\ttimed out after %s s (see %s)\n' "$UNIT_S" "$WORK/unit.log" >>"$WORK/unit.tsv"
    fi
    "$PYTHON" -m tests.support.gpu_acceptance pytest-lines "$WORK/unit.log" "$WORK/unit.tsv"
    grep -E '^\[(cpu|cuda|vllm)\]' "$WORK/unit.log" | sed 's/^/INFO /'
    echo "INFO unit               $((SECONDS - t0)) s (budget $UNIT_S s)"
fi

# 2. the smoke test of the recipe's GPU path, then what its runs must show
CUDA_VISIBLE_DEVICES="${CUDA_VISIBLE_DEVICES:-0}" SMOKE_BUDGET_S="$SMOKE_S" PYTHON="$PYTHON" \
    timeout "$SMOKE_S" bash verl/recipe/vsearch/smoke_gpu.sh "$WORK/smoke"
rc=$?
if [[ -f "$WORK/smoke/smoke_lines.tsv" ]]; then cp "$WORK/smoke/smoke_lines.tsv" "$WORK/smoke.tsv"; fi
if (( rc == 124 )); then
    printf 'smoke\tFAIL\ttimed out after %s s: the lines above it stand (see %s)\n' "$SMOKE_S" "$WORK/smoke" \
        | tee -a "$WORK/smoke.tsv"
fi
if [[ -f "$WORK/smoke/run/run1.metrics.jsonl" ]]; then
    "$PYTHON" -m tests.support.gpu_acceptance metrics "$WORK/smoke/run" "$WORK/smoke_metrics.tsv"
fi
if grep -qE $'\tFAIL\t' "$WORK"/*.tsv; then
    summary "FAIL"
    exit 1
fi
summary "all PASS"
exit 0
