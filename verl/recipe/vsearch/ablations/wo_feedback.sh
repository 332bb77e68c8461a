#!/usr/bin/env bash
# Table 3 "w/o feedback": in-loop pseudo IoU = 1[c = 1], outcome only (the fork: pseudo_iou_reward_type=outcome_no_caller_feedback).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Ablations"); run from verl/.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.reward.pseudo_iou_reward_type=outcome_no_caller_feedback \
    "$@"
