#!/usr/bin/env bash
# Single-GPU smoke test of the recipe's GPU path: train.sh end to end on one CUDA GPU with verl 0.7.0's own
# vLLM rollout, in sleep mode, on a tiny random Qwen2.5-VL with a scripted vReasoner/judge on 127.0.0.1.
#
#   pip install -e ".[train]"                      # the GPU stack (vllm 0.12.0, torch 2.9.0, verl 0.7.0)
#   bash verl/recipe/vsearch/smoke_gpu.sh [WORK_DIR]   # from the repository root; ~5-10 min, no internet needed
#
# Runs `tests/support/recipe_cpu_run.py --device cuda`: the same two train.sh runs as the CPU driver test
# (tests/test_recipe_driver_vllm.py): 2 steps + validation + checkpoint, then resume, step 3 + validation,
# with one FSDP2 rank and one vLLM replica on the GPU, sleep mode on (verl's default; CPU runs turn it off),
# SDPA attention (flash-attn not needed for the smoke test), gpu_memory_utilization 0.3. Then the verdict of
# recipe/vsearch/rollout_checks.py on each run, the same checks as the CPU test:
#   * after every actor -> vLLM sync, every vLLM parameter equals the actor's within bf16 rounding;
#   * the frozen vision tower + merger are bit-identical across syncs; the rest changes after each update;
#   * vLLM ran exactly the recipe's prompt token ids on every generate (count and ids);
#   * actor/grad_norm finite and non-zero every step;
#   * GPU only: each rollout sleep (vLLMAsyncRollout.release) leaves more free GPU memory than before it.
# Exit status 0 when both runs finish and every check holds. Logs, metrics and check records stay in WORK_DIR.
#
# HONEST STATUS: written and run on CPU only. No GPU was available when this script was written, so it has
# NEVER RUN ON A GPU; the CPU driver test exercises the same code except CUDA, NCCL, sleep/wake and the
# memory check. Expect to fix small things on the first GPU run and please report them
# (recipe/vsearch/README.md, "GPU path: what has run where").
#
# Environment: PYTHON (default python3; the interpreter with the train extra), CUDA_VISIBLE_DEVICES (one GPU is
# used). HF_HUB_OFFLINE=1 is set: nothing is downloaded. If the nodes are offline and vllm is 0.12.0, stage the
# harmony vocab or install the start-up hook first (README, "Offline nodes"); the run stops with that advice.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
PYTHON="${PYTHON:-python3}"
WORK="${1:-$(mktemp -d "${TMPDIR:-/tmp}/vsearch-smoke-gpu.XXXXXX")}"
"$PYTHON" - <<'PY'
import sys, torch
if not torch.cuda.is_available():
    sys.exit("smoke_gpu.sh: no CUDA GPU visible to torch")
import vllm, verl
print(f"[smoke_gpu] torch {torch.__version__}, vllm {vllm.__version__}, verl {verl.__version__}, "
      f"GPU {torch.cuda.get_device_name(0)}", flush=True)
PY
mkdir -p "$WORK"
echo "[smoke_gpu] work dir: $WORK" >&2
cd "$ROOT"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
PYTHONPATH="$ROOT:$ROOT/verl${PYTHONPATH:+:$PYTHONPATH}" \
    "$PYTHON" -m tests.support.recipe_cpu_run --device cuda --python "$PYTHON" --work "$WORK"
