#!/usr/bin/env bash
# Table 3 "w/o outcome": in-loop pseudo IoU = 1[s = 1], vReasoner feedback only (the fork: pseudo_iou_reward_type=caller_feedback_no_outcome).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Ablations"); run from verl/.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    vsearch.reward.pseudo_iou_reward_type=caller_feedback_no_outcome \
    "$@"
