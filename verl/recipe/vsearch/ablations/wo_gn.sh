#!/usr/bin/env bash
# Table 3 "w/o GN": in-loop advantages are the raw rewards, no global normalisation (the fork: subagent_advantage_estimator=no_global_norm).
# Same environment and arguments as train.sh (recipe/vsearch/README.md, "Ablations"); run from verl/.
set -euo pipefail
exec bash "$(dirname "${BASH_SOURCE[0]}")/../train.sh" \
    algorithm.subagent_advantage_estimator=no_global_norm \
    "$@"
