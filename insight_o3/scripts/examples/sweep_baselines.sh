#!/usr/bin/env bash
# Reproduce the paper's baseline table: every model in $MODELS on the six benchmarks.
#
#   export OPENAI_API_KEY=... OPENAI_BASE_URL=...   # the endpoint serving the models (e.g. a router)
#   export JUDGE_API_KEY=... [JUDGE_API_BASE_URL=...]
#   MODELS="gpt-5-mini gemini-2.5-flash" bash insight_o3/scripts/examples/sweep_baselines.sh
#
# Paper settings (Sec. 5, App. B.6): GPT models (any name containing "gpt", case-insensitive, so router
# names such as openai/gpt-5-mini count -- the original sweep's *"gpt"* test) get images of at most
# 1280x1280 px, every other model 3500x3500 px (insight_o3.imaging.geometry.api_image_max_pixels); detail "high"; max_completion_tokens 16384;
# `--sys_prompt think` on all benchmarks except O3-Bench (model default there); 3 trials, except
# MME-RealWorld-Lite (1 trial). Data layout: data/README.md.
# Environment knobs: MODELS, BENCHMARKS (the six), JUDGE_MODEL (gpt-5-nano), OUTPUT_DIR (./outputs/eval),
# CONCURRENCY (64), SEPARATE_TRIAL_REQUESTS=1 (for APIs that reject n>1), DRY_RUN=1 (print commands only).
# Keys are read from the environment by the evaluate CLI and never appear in the commands.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"

MODELS="${MODELS:-gpt-5-mini gpt-5-nano gemini-2.5-flash}"
BENCHMARKS="${BENCHMARKS:-vstar hr_bench_4k treebench visual_probe_hard mme_realworld_lite o3_bench}"
JUDGE_MODEL="${JUDGE_MODEL:-gpt-5-nano}"
OUTPUT_DIR="${OUTPUT_DIR:-./outputs/eval}"
CONCURRENCY="${CONCURRENCY:-64}"
PYTHON="${PYTHON:-python}"

run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

if [ "${DRY_RUN:-0}" != 1 ] && [ -z "${OPENAI_API_KEY:-}" ]; then
  echo "sweep_baselines: export OPENAI_API_KEY (and OPENAI_BASE_URL, JUDGE_API_KEY) first" >&2
  exit 2
fi

failed=()
for model in $MODELS; do
  case "${model,,}" in
    *gpt*) max_pixels=$((1280 * 1280)) ;;
    *) max_pixels=$((3500 * 3500)) ;;
  esac
  for bench in $BENCHMARKS; do
    sys_prompt=think; [ "$bench" = o3_bench ] && sys_prompt=model_default
    trials=3; [ "$bench" = mme_realworld_lite ] && trials=1
    extra=()
    [ "${SEPARATE_TRIAL_REQUESTS:-0}" = 1 ] && extra+=(--separate_trial_requests)
    if ! run "$PYTHON" -m insight_o3.scripts.evaluate \
        --eval_name "$model/$bench" --model "$model" --benchmark "$bench" \
        --judge_model "$JUDGE_MODEL" --img_max_pixels "$max_pixels" --sys_prompt "$sys_prompt" \
        --num_trials "$trials" --concurrency "$CONCURRENCY" --output_dir "$OUTPUT_DIR" "${extra[@]}"; then
      echo "sweep_baselines: $model/$bench failed; continuing (rerun to resume)" >&2
      failed+=("$model/$bench")
    fi
  done
done

# shellcheck disable=SC2086  # word splitting of the lists is intended
run "$PYTHON" -m insight_o3.scripts.gather_eval_results --settings $MODELS --datasets $BENCHMARKS \
  --output_dir "$OUTPUT_DIR" --markdown "$OUTPUT_DIR/baselines.md"
if [ ${#failed[@]} -gt 0 ]; then
  echo "sweep_baselines: ${#failed[@]} run(s) failed: ${failed[*]}" >&2
  exit 1
fi
