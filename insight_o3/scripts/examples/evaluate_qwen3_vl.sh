#!/usr/bin/env bash
# Evaluate a self-hosted Qwen3-VL-8B-Instruct (vLLM) on O3-Bench, judged by gpt-5-nano.
#
#   export JUDGE_API_KEY=...                       # judge key (never put it on the command line)
#   [export JUDGE_API_BASE_URL=...]                # default: the OpenAI API
#   bash insight_o3/scripts/examples/evaluate_qwen3_vl.sh
#
# Environment knobs: MODEL (Qwen/Qwen3-VL-8B-Instruct), PORT (8000), TP_SIZE (1), BENCHMARK (o3_bench),
# NUM_TRIALS (3), JUDGE_MODEL (gpt-5-nano), OUTPUT_DIR (./outputs/eval), KEEP_SERVER=1 (leave vLLM up),
# VLLM_API_KEY (optional: the server then requires it; it is passed to evaluate through the environment),
# DRY_RUN=1 (print the commands instead of running them).
# Settings follow the paper for non-GPT models: images resized to at most 3500x3500 px, 16K-token budget,
# the model's default system prompt on O3-Bench (`--sys_prompt think` on the other benchmarks).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"

MODEL="${MODEL:-Qwen/Qwen3-VL-8B-Instruct}"
PORT="${PORT:-8000}"
TP_SIZE="${TP_SIZE:-1}"
BENCHMARK="${BENCHMARK:-o3_bench}"
NUM_TRIALS="${NUM_TRIALS:-3}"
JUDGE_MODEL="${JUDGE_MODEL:-gpt-5-nano}"
OUTPUT_DIR="${OUTPUT_DIR:-./outputs/eval}"
PYTHON="${PYTHON:-python}"
SYS_PROMPT=think
[ "$BENCHMARK" = o3_bench ] && SYS_PROMPT=model_default

run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

if [ "${DRY_RUN:-0}" != 1 ] && [ -z "${JUDGE_API_KEY:-}" ] && [ -z "${OPENAI_API_KEY:-}" ]; then
  echo "evaluate_qwen3_vl: export JUDGE_API_KEY (the key for $JUDGE_MODEL) first" >&2
  exit 2
fi
# OPENAI_API_KEY is replaced below by the vLLM server's key, so a judge key given only as
# OPENAI_API_KEY is handed to the judge explicitly (through the environment, never printed).
if [ -z "${JUDGE_API_KEY:-}" ] && [ -n "${OPENAI_API_KEY:-}" ]; then export JUDGE_API_KEY="$OPENAI_API_KEY"; fi

run bash scripts/vllm_serve_bg.sh start --model "$MODEL" --port "$PORT" --tensor-parallel-size "$TP_SIZE" \
  --max-model-len 40960 --limit-mm-per-prompt '{"image":1}'
if [ "${KEEP_SERVER:-0}" != 1 ]; then
  trap 'run bash scripts/vllm_serve_bg.sh stop --port "$PORT"' EXIT
fi

# The served model needs no real key unless VLLM_API_KEY is set; evaluate reads it from OPENAI_API_KEY.
# The judge uses JUDGE_API_KEY / JUDGE_API_BASE_URL from the environment.
OPENAI_API_KEY="${VLLM_API_KEY:-EMPTY}" run "$PYTHON" -m insight_o3.scripts.evaluate \
  --eval_name "${MODEL##*/}/$BENCHMARK" \
  --model "$MODEL" \
  --api_base_url "http://127.0.0.1:$PORT/v1" \
  --judge_model "$JUDGE_MODEL" \
  --benchmark "$BENCHMARK" \
  --img_max_pixels $((3500 * 3500)) \
  --sys_prompt "$SYS_PROMPT" \
  --num_trials "$NUM_TRIALS" \
  --output_dir "$OUTPUT_DIR"

run "$PYTHON" -m insight_o3.scripts.gather_eval_results --settings "${MODEL##*/}" --datasets "$BENCHMARK" \
  --output_dir "$OUTPUT_DIR"
