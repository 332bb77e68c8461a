#!/usr/bin/env bash
# Fatal-aware GRPO (OpenSearch-VL, not the InSight-o3 protocol), vsearch.fatal.mode=fatal_mask_clamp: the full method: a vSearcher episode stops after K = 3 consecutive tool errors, its tokens from the
# fatal step on are masked and its advantage is max(A, 0) (OpenSearch-VL's ablation: 71.8).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Fatal-aware GRPO"); run from verl/.
# vsearch.fatal.k=<K> after it changes K.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.fatal.mode=fatal_mask_clamp \
    "$@"
