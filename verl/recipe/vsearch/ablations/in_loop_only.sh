#!/usr/bin/env bash
# Table 5, "I." only: in-loop RL alone; every training batch is drawn from the in-loop (collage QA) data (the fork has no switch: its data mixture weights).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Ablations"); run from verl/.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    ++data.batch_sampler.weights.info_vqa_region_localization=0 \
    ++data.batch_sampler.weights.visual_cot_vstar_collage=1 \
    "$@"
