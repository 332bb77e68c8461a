#!/usr/bin/env bash
# Shared part of train.sh / val.sh (sourced). Builds ARGS, the Hydra overrides common to both, from
# the environment documented in the project README:
#   VERL_PROJ_DIR MODEL_PATH WORK_DIR PROJECT_NAME EXP_NAME API_MODEL_FOR_AGENT JUDGE_MODEL
#   OPENAI_BASE_URL OPENAI_API_KEY TRAIN_FILES VAL_FILES [RESUME_FROM_STEP] [NUM_VAL_TRIALS]
# Optional: AGENT_CONFIG (an agent YAML of your own; default config/agent_${API_MODEL_FOR_AGENT}.yaml),
# NNODES (1), N_GPUS_PER_NODE (8), PYTHON (python3), DRY_RUN=1 (print the composed config on
# stdout and the effective settings the agent loops / reward / actor update will use on stderr, then exit;
# no Ray; the same as passing --cfg job). Extra arguments are passed to Hydra as overrides.
# Secrets are only checked for presence and are never printed: the OpenAI SDK reads them from the env.
set -euo pipefail

vsearch_die() { echo "[vsearch] error: $*" >&2; exit 2; }
vsearch_need() {
    local name
    for name in "$@"; do
        [[ -n "${!name:-}" ]] || vsearch_die "environment variable $name is not set (see recipe/vsearch/README.md)"
    done
}

VSEARCH_DRY_RUN="${DRY_RUN:-0}"
VSEARCH_USER_ARGS=()
for a in "$@"; do
    if [[ "$a" == "--cfg" ]]; then VSEARCH_DRY_RUN=1; continue; fi
    if [[ "$a" == "job" && "$VSEARCH_DRY_RUN" == "1" && ${#VSEARCH_USER_ARGS[@]} -eq 0 ]]; then continue; fi
    VSEARCH_USER_ARGS+=("$a")
done

vsearch_need VERL_PROJ_DIR MODEL_PATH WORK_DIR PROJECT_NAME EXP_NAME API_MODEL_FOR_AGENT JUDGE_MODEL VAL_FILES

# Every path is made absolute against the caller's directory *before* the `cd "$VERL_PROJ_DIR"` below (a relative
# path that passed a check here must name the same file there). Data files may be a Hydra list "[a,b]". MODEL_PATH
# and AGENT_CONFIG are resolved only when they exist here (MODEL_PATH may be a hub id).
vsearch_abs() { if [[ "$1" == /* || -z "$1" ]]; then printf '%s' "$1"; else printf '%s/%s' "$PWD" "${1#./}"; fi; }
vsearch_abs_files() {
    local v="$1" item out=() IFS=,
    if [[ "$v" == \[*\] ]]; then
        for item in ${v:1:${#v}-2}; do out+=("$(vsearch_abs "$item")"); done
        printf '[%s]' "${out[*]}"
    else
        vsearch_abs "$v"
    fi
}
VERL_PROJ_DIR="$(vsearch_abs "$VERL_PROJ_DIR")"
WORK_DIR="$(vsearch_abs "$WORK_DIR")"
VAL_FILES="$(vsearch_abs_files "$VAL_FILES")"
if [[ -n "${TRAIN_FILES:-}" ]]; then TRAIN_FILES="$(vsearch_abs_files "$TRAIN_FILES")"; fi
if [[ -e "$MODEL_PATH" ]]; then MODEL_PATH="$(vsearch_abs "$MODEL_PATH")"; fi
if [[ -n "${AGENT_CONFIG:-}" && -e "$AGENT_CONFIG" ]]; then AGENT_CONFIG="$(vsearch_abs "$AGENT_CONFIG")"; fi
if [[ "$VSEARCH_DRY_RUN" != "1" ]]; then
    vsearch_need OPENAI_BASE_URL OPENAI_API_KEY
fi

RECIPE_DIR="$VERL_PROJ_DIR/recipe/vsearch"
if [[ -n "${AGENT_CONFIG:-}" ]]; then
    [[ -f "$AGENT_CONFIG" ]] || vsearch_die "AGENT_CONFIG=$AGENT_CONFIG does not exist"
fi
AGENT_CONFIG="${AGENT_CONFIG:-$RECIPE_DIR/config/agent_${API_MODEL_FOR_AGENT}.yaml}"
[[ -f "$AGENT_CONFIG" ]] || vsearch_die "no agent config for API_MODEL_FOR_AGENT=$API_MODEL_FOR_AGENT: $AGENT_CONFIG \
(available: $(cd "$RECIPE_DIR/config" && ls agent_*.yaml | grep -v agent_loops | sed 's/^agent_//; s/\.yaml$//' | tr '\n' ' '))"
CKPT_DIR="$WORK_DIR/ckpts/$PROJECT_NAME/$EXP_NAME"

# Resume: automatic from the latest global_step_* under CKPT_DIR, or RESUME_FROM_STEP=<k>.
if [[ -n "${RESUME_FROM_STEP:-}" ]]; then
    [[ "$RESUME_FROM_STEP" =~ ^[0-9]+$ ]] || vsearch_die "RESUME_FROM_STEP must be a step number, got '$RESUME_FROM_STEP'"
    RESUME_ARGS=(trainer.resume_mode=resume_path "trainer.resume_from_path=$CKPT_DIR/global_step_$RESUME_FROM_STEP")
    if [[ "$VSEARCH_DRY_RUN" != "1" && ! -d "$CKPT_DIR/global_step_$RESUME_FROM_STEP" ]]; then
        vsearch_die "RESUME_FROM_STEP=$RESUME_FROM_STEP but $CKPT_DIR/global_step_$RESUME_FROM_STEP does not exist"
    fi
else
    RESUME_ARGS=(trainer.resume_mode=auto)
fi

# NCCL's watchdog: a rank writing its ~12 GB checkpoint shard on a slow shared file system must not be declared hung
# (the fork's _base.sh:112,141: the heartbeat and verl's process-group timeout, 3600 s; forwarded to every Ray worker
# by main.py as a TORCH_NCCL_* variable)
export TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC="${TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC:-3600}"
[[ "$TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC" =~ ^[0-9]+$ ]] || vsearch_die "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC must be whole seconds, got '$TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC'"

# The recipe is imported as recipe.vsearch.* (PYTHONPATH=<project>/verl), the library as insight_o3.
export PYTHONPATH="$VERL_PROJ_DIR:$(dirname "$VERL_PROJ_DIR"):${PYTHONPATH:-}"
cd "$VERL_PROJ_DIR"

ARGS=(
    "actor_rollout_ref.model.path=$MODEL_PATH"
    "data.val_files=$VAL_FILES"
    "actor_rollout_ref.rollout.agent.agent_loop_config_path=$RECIPE_DIR/config/agent_loops.yaml"
    "actor_rollout_ref.rollout.agent.agent_loop_manager_class=recipe.vsearch.episodes.VSearchAgentLoopManager"
    "vsearch.agent_config_path=$AGENT_CONFIG"
    "vsearch.judge_model=$JUDGE_MODEL"
    "trainer.project_name=$PROJECT_NAME"
    "trainer.experiment_name=$EXP_NAME"
    "trainer.default_local_dir=$CKPT_DIR"
    "trainer.validation_data_dir=$CKPT_DIR/val_generations"
    "trainer.nnodes=${NNODES:-1}"
    "trainer.n_gpus_per_node=${N_GPUS_PER_NODE:-8}"
    "actor_rollout_ref.nccl_timeout=$TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"
    "${RESUME_ARGS[@]}"
)

vsearch_run() {
    # vsearch_run <overrides...>: run the recipe entry point, or under DRY_RUN print its composed config
    # (stdout) and the validated effective settings (stderr, recipe.vsearch.settings; fails on a bad value).
    if [[ "$VSEARCH_DRY_RUN" == "1" ]]; then
        local composed rc=0
        composed="$(mktemp "${TMPDIR:-/tmp}/vsearch_cfg.XXXXXX.yaml")"
        "${PYTHON:-python3}" -m recipe.vsearch.main --cfg job --resolve "$@" "${VSEARCH_USER_ARGS[@]}" > "$composed" || rc=$?
        if [[ $rc -eq 0 ]]; then
            cat "$composed"
            "${PYTHON:-python3}" -m recipe.vsearch.settings "$composed" >&2 || rc=$?
        fi
        rm -f "$composed"
        return $rc
    fi
    mkdir -p "$CKPT_DIR"
    echo "[vsearch] $EXP_NAME: checkpoints and logs under $CKPT_DIR" >&2
    "${PYTHON:-python3}" -m recipe.vsearch.main "$@" "${VSEARCH_USER_ARGS[@]}"
}
