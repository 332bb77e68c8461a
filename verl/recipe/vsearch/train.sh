#!/usr/bin/env bash
# Train the vSearcher with hybrid in-loop / out-of-loop GRPO (paper §4.1, D.1). Run from verl/:
#   bash recipe/vsearch/train.sh [extra hydra overrides]      (DRY_RUN=1 or --cfg job: print config only)
# Environment: see _base.sh. Auto-resumes from $WORK_DIR/ckpts/$PROJECT_NAME/$EXP_NAME.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/_base.sh"
vsearch_need TRAIN_FILES

vsearch_run "${ARGS[@]}" \
    "data.train_files=$TRAIN_FILES" \
    data.train_batch_size=24 \
    data.max_prompt_length=8192 \
    data.max_response_length=9216 \
    actor_rollout_ref.rollout.n=8 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.use_kl_loss=True \
    actor_rollout_ref.actor.kl_loss_coef=0.01 \
    actor_rollout_ref.actor.kl_loss_type=low_var_kl \
    actor_rollout_ref.actor.freeze_vision_tower=True \
    algorithm.adv_estimator=vsearch_hybrid_grpo \
    algorithm.inloop_norm_scope=inloop \
    vsearch.stage=train \
    trainer.total_training_steps=150 \
    trainer.val_before_train=False \
    +data.batch_sampler.weights.info_vqa_region_localization=0.5 \
    +data.batch_sampler.weights.visual_cot_vstar_collage=0.5
