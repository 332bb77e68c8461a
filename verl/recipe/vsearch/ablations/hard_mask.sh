#!/usr/bin/env bash
# Fatal-aware GRPO (OpenSearch-VL, not the InSight-o3 protocol), vsearch.fatal.mode=hard_mask: the hard-masking baseline (Vision-DeepResearch): a fatal episode trains nothing, it still enters the
# group statistics (OpenSearch-VL's ablation: 67.7).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Fatal-aware GRPO"); run from verl/.
# vsearch.fatal.k=<K> after it changes K.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.fatal.mode=hard_mask \
    "$@"
