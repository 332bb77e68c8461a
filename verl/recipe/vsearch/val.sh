#!/usr/bin/env bash
# Evaluate a vSearcher under verl with the API vReasoner (accuracy_reward, critical_failure_ratio,
# has_answer). Run from verl/:
#   bash recipe/vsearch/val.sh [extra hydra overrides]        (DRY_RUN=1 or --cfg job: print config only)
# NUM_VAL_TRIALS=<n> repeats every item n times (verl reports mean@n). The latest checkpoint under
# $WORK_DIR/ckpts/$PROJECT_NAME/$EXP_NAME is loaded if there is one (trainer.resume_mode=disable
# evaluates MODEL_PATH itself).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_base.sh"
NUM_VAL_TRIALS="${NUM_VAL_TRIALS:-1}"
[[ "$NUM_VAL_TRIALS" =~ ^[1-9][0-9]*$ ]] || vsearch_die "NUM_VAL_TRIALS must be a positive integer, got '$NUM_VAL_TRIALS'"

# verl builds a train dataloader (and its sampler) even with val_only; it is never iterated. The weighted
# sampler of train.sh needs +data.batch_sampler.weights.*, which an evaluation has no reason to set: use verl's
# default sampler here.
# Without TRAIN_FILES that train dataloader is built from VAL_FILES with drop_last: at the training batch size
# (24) an evaluation set of fewer rows would stop verl with "Train dataloader is empty!". Its batch is 1 then
# (data.gen_batch_size, what verl's dataloader reads first; never iterated).
VAL_TRAIN_LOADER=()
if [[ -z "${TRAIN_FILES:-}" ]]; then VAL_TRAIN_LOADER=(+data.gen_batch_size=1); fi
vsearch_run "${ARGS[@]}" "${VAL_TRAIN_LOADER[@]}" \
    "data.train_files=${TRAIN_FILES:-$VAL_FILES}" \
    data.sampler.class_path=null \
    data.sampler.class_name=null \
    data.max_prompt_length=17408 \
    data.max_response_length=32768 \
    actor_rollout_ref.rollout.val_kwargs.temperature=0 \
    actor_rollout_ref.rollout.val_kwargs.do_sample=False \
    "actor_rollout_ref.rollout.val_kwargs.n=$NUM_VAL_TRIALS" \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=51200 \
    vsearch.stage=eval \
    trainer.val_only=True \
    trainer.val_before_train=True
