#!/usr/bin/env bash
# The Table 1 agent baselines (DeepEyes, Mini-o3, Pixel-Reasoner) on the six benchmarks: each agent's protocol
# (`evaluate --agent NAME`) against its own served checkpoint (README "Baselines": one vLLM server per agent).
#
#   bash scripts/vllm_serve_bg.sh start --baseline deepeyes --port 8001      # and mini_o3 on 8002, pixel_reasoner 8003
#   export JUDGE_API_KEY=... [JUDGE_API_BASE_URL=...]
#   bash insight_o3/scripts/examples/sweep_agents.sh
#
# Each agent's model and endpoint: DEEPEYES_MODEL (ChenShawn/DeepEyes-7B) at DEEPEYES_BASE_URL
# (http://127.0.0.1:8001/v1), MINI_O3_MODEL (Mini-o3/Mini-o3-7B-v1) at MINI_O3_BASE_URL (:8002),
# PIXEL_REASONER_MODEL (TIGER-Lab/PixelReasoner-RL-v1) at PIXEL_REASONER_BASE_URL (:8003); the served
# models take no key (EMPTY). Trials: 3 (MME-RealWorld-Lite: 1), Mini-o3 32 (its paper's Avg@32; MINI_O3_TRIALS).
# Environment knobs: AGENTS (the three), BENCHMARKS (the six), JUDGE_MODEL (gpt-5-nano), OUTPUT_DIR
# (./outputs/eval), CONCURRENCY (64), DRY_RUN=1 (print commands only). Against the keyless demo's scripted model,
# which speaks every agent's protocol: set the three *_BASE_URL to the URL `python -m insight_o3.scripts.demo
# --serve` prints for the model (README "Baselines").
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cd "$ROOT"

AGENTS="${AGENTS:-deepeyes mini_o3 pixel_reasoner}"
BENCHMARKS="${BENCHMARKS:-vstar hr_bench_4k treebench visual_probe_hard mme_realworld_lite o3_bench}"
JUDGE_MODEL="${JUDGE_MODEL:-gpt-5-nano}"
OUTPUT_DIR="${OUTPUT_DIR:-./outputs/eval}"
CONCURRENCY="${CONCURRENCY:-64}"
PYTHON="${PYTHON:-python}"

run() {
  if [ "${DRY_RUN:-0}" = 1 ]; then printf '%q ' "$@"; echo; else "$@"; fi
}

model_of() {
  case "$1" in
    deepeyes) echo "${DEEPEYES_MODEL:-ChenShawn/DeepEyes-7B} ${DEEPEYES_BASE_URL:-http://127.0.0.1:8001/v1}" ;;
    mini_o3) echo "${MINI_O3_MODEL:-Mini-o3/Mini-o3-7B-v1} ${MINI_O3_BASE_URL:-http://127.0.0.1:8002/v1}" ;;
    pixel_reasoner) echo "${PIXEL_REASONER_MODEL:-TIGER-Lab/PixelReasoner-RL-v1} ${PIXEL_REASONER_BASE_URL:-http://127.0.0.1:8003/v1}" ;;
    *) echo "sweep_agents: unknown agent $1 (deepeyes, mini_o3, pixel_reasoner)" >&2; return 2 ;;
  esac
}

if [ "${DRY_RUN:-0}" != 1 ] && [ -z "${JUDGE_API_KEY:-}" ]; then
  echo "sweep_agents: export JUDGE_API_KEY (and JUDGE_API_BASE_URL) first" >&2
  exit 2
fi

failed=()
settings=()
for agent in $AGENTS; do
  read -r model url < <(model_of "$agent")
  settings+=("$model+$agent")
  for bench in $BENCHMARKS; do
    trials=3; [ "$bench" = mme_realworld_lite ] && trials=1
    [ "$agent" = mini_o3 ] && trials="${MINI_O3_TRIALS:-32}"
    if ! run "$PYTHON" -m insight_o3.scripts.evaluate --agent "$agent" \
        --eval_name "$model+$agent/$bench" --model "$model" --api_base_url "$url" --api_key EMPTY \
        --benchmark "$bench" --judge_model "$JUDGE_MODEL" --num_trials "$trials" --concurrency "$CONCURRENCY" \
        --output_dir "$OUTPUT_DIR"; then
      echo "sweep_agents: $agent/$bench failed; continuing (rerun to resume)" >&2
      failed+=("$agent/$bench")
    fi
  done
done

# shellcheck disable=SC2086  # word splitting of the benchmark list is intended
run "$PYTHON" -m insight_o3.scripts.gather_eval_results --settings "${settings[@]}" --datasets $BENCHMARKS \
  --output_dir "$OUTPUT_DIR" --markdown "$OUTPUT_DIR/agents.md"
if [ ${#failed[@]} -gt 0 ]; then
  echo "sweep_agents: ${#failed[@]} run(s) failed: ${failed[*]}" >&2
  exit 1
fi
