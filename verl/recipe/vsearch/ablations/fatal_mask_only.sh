#!/usr/bin/env bash
# Fatal-aware GRPO (OpenSearch-VL, not the InSight-o3 protocol), vsearch.fatal.mode=fatal_mask: the fatal mask without the one-sided clamp (OpenSearch-VL's ablation: 69.1).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Fatal-aware GRPO"); run from verl/.
# vsearch.fatal.k=<K> after it changes K.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.fatal.mode=fatal_mask \
    "$@"
