#!/usr/bin/env bash
# Export the actor of a training checkpoint as a Hugging Face model directory (safetensors weights, config,
# tokenizer / processor), for evaluation outside verl (vLLM serving, insight_o3.scripts.evaluate). Uses verl's
# own merger (python -m verl.model_merger merge --backend fsdp) on the sharded FSDP checkpoint.
#
#   bash recipe/vsearch/export_hf.sh <checkpoint dir>/global_step_<N> <target dir>
#   bash recipe/vsearch/export_hf.sh <step number> <target dir>    # with WORK_DIR, PROJECT_NAME, EXP_NAME set
#
# PYTHON (default python3) is the interpreter of the training environment.
set -euo pipefail

die() { echo "[vsearch] error: $*" >&2; exit 2; }
[[ $# -eq 2 ]] || die "usage: bash recipe/vsearch/export_hf.sh <ckpt_dir>/global_step_<N> | <N>  <target_dir>"
STEP="$1"
TARGET="$2"
if [[ "$STEP" =~ ^[0-9]+$ ]]; then
    for name in WORK_DIR PROJECT_NAME EXP_NAME; do
        [[ -n "${!name:-}" ]] || die "a step number needs $name set (or pass the global_step_<N> directory)"
    done
    STEP="$WORK_DIR/ckpts/$PROJECT_NAME/$EXP_NAME/global_step_$STEP"
fi
ACTOR="$STEP/actor"
[[ -d "$ACTOR" ]] || die "no actor checkpoint at $ACTOR"
ls "$ACTOR"/model_world_size_*_rank_0.pt >/dev/null 2>&1 || die "$ACTOR has no FSDP model shards (model_world_size_*_rank_*.pt)"
[[ -f "$ACTOR/fsdp_config.json" ]] || die "$ACTOR/fsdp_config.json is missing (not a verl FSDP checkpoint?)"
[[ ! -e "$TARGET" || -z "$(ls -A "$TARGET")" ]] || die "target $TARGET exists and is not empty"

"${PYTHON:-python3}" -m verl.model_merger merge --backend fsdp --local_dir "$ACTOR" --target_dir "$TARGET"
echo "[vsearch] exported $ACTOR -> $TARGET" >&2
