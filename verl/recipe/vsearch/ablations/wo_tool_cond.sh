#!/usr/bin/env bash
# Table 3 "w/o tool cond.": the tool gate is an added term (weight vsearch.reward.tool_weight) instead of a factor (the fork: reward_type=basic_weighted_addition).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Ablations"); run from verl/.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.reward.reward_type=basic_weighted_addition \
    "$@"
