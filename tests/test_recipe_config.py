"""train.sh / val.sh override sets compose and validate with verl's own config machinery (no Ray)."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO, require_module

require_module("verl")

from omegaconf import OmegaConf  # noqa: E402

VERL_DIR = REPO / "verl"
RECIPE = VERL_DIR / "recipe" / "vsearch"
CONFIG_DIR = RECIPE / "config"
SECRET = "sk-test-must-not-appear-0123456789"


def _env(tmp_path, **extra) -> dict:
    env = dict(os.environ)
    env.update(VERL_PROJ_DIR=str(VERL_DIR), MODEL_PATH="Qwen/Qwen2.5-VL-7B-Instruct", WORK_DIR=str(tmp_path / "work"),
               PROJECT_NAME="proj", EXP_NAME="exp", API_MODEL_FOR_AGENT="gpt-5-mini", JUDGE_MODEL="gpt-5-nano",
               OPENAI_BASE_URL="http://127.0.0.1:9/v1", OPENAI_API_KEY=SECRET,
               TRAIN_FILES="[/d/a.parquet,/d/b.parquet]", VAL_FILES="/d/v.parquet", PYTHON=sys.executable,
               DRY_RUN="1")
    env.pop("RESUME_FROM_STEP", None)
    env.update(extra)
    return env


def _dry_run(script: str, tmp_path, *args: str, **extra):
    return subprocess.run(["bash", str(RECIPE / script), *args], cwd=REPO, env=_env(tmp_path, **extra),
                          capture_output=True, text=True, timeout=120)


def _validate(cfg) -> None:
    """What verl checks before training: the dataclass conversions and validate_config."""
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo.utils import need_critic
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    from verl.workers.config import RolloutConfig

    OmegaConf.resolve(cfg)
    assert isinstance(omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout), RolloutConfig)
    # inloop_norm_scope is the recipe's own algorithm key (read by the estimator from the DictConfig that
    # RayPPOTrainer passes); verl never converts `algorithm` to AlgoConfig at run time, so check the rest.
    algo = OmegaConf.to_container(cfg.algorithm)
    assert algo.pop("inloop_norm_scope") in ("inloop", "batch")
    assert isinstance(omega_conf_to_dataclass(algo, AlgoConfig), AlgoConfig)
    validate_config(cfg, use_reference_policy=True, use_critic=need_critic(cfg))


def test_train_sh_composes_and_validates(tmp_path):
    r = _dry_run("train.sh", tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path / "work").exists(), "a dry run must not create the checkpoint dir"
    cfg = OmegaConf.create(r.stdout)
    a, ro = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.data.train_batch_size == 24 and ro.n == 8 and ro.temperature == 1.0
    assert a.optim.lr == pytest.approx(1e-6) and a.use_kl_loss and a.kl_loss_coef == pytest.approx(0.01)
    assert a.freeze_vision_tower and cfg.data.max_response_length == 9216
    assert cfg.trainer.total_training_steps == 150 and cfg.algorithm.adv_estimator == "vsearch_hybrid_grpo"
    assert dict(cfg.data.batch_sampler.weights) == {"info_vqa_region_localization": 0.5,
                                                    "visual_cot_vstar_collage": 0.5}
    assert ro.name == "vllm" and ro.mode == "async" and ro.multi_turn.enable
    assert ro.limit_images == 7  # the whole image + up to 6 crops in one vSearcher trajectory
    assert ro.agent.agent_loop_config_path == str(CONFIG_DIR / "agent_loops.yaml")
    assert ro.agent.agent_loop_manager_class == "recipe.vsearch.episodes.VSearchAgentLoopManager"
    assert cfg.trainer.default_local_dir == str(tmp_path / "work/ckpts/proj/exp")
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.vsearch.agent_config_path == str(CONFIG_DIR / "agent_gpt-5-mini.yaml")
    assert cfg.data.custom_cls.name == "VSearchDataset" and cfg.custom_reward_function.name == "compute_score"
    _validate(cfg)


def test_val_sh_composes_and_validates(tmp_path):
    r = _dry_run("val.sh", tmp_path, "--cfg", "job", DRY_RUN="0", NUM_VAL_TRIALS="3", RESUME_FROM_STEP="40",
                 API_MODEL_FOR_AGENT="gemini-2.5-flash")
    assert r.returncode == 0, r.stderr[-3000:]
    assert SECRET not in r.stdout + r.stderr
    cfg = OmegaConf.create(r.stdout)
    vk = cfg.actor_rollout_ref.rollout.val_kwargs
    assert vk.temperature == 0 and vk.n == 3 and cfg.data.max_response_length == 32768
    assert cfg.trainer.val_only and cfg.vsearch.stage == "eval"
    assert cfg.trainer.resume_mode == "resume_path"
    assert cfg.trainer.resume_from_path == str(tmp_path / "work/ckpts/proj/exp/global_step_40")
    _validate(cfg)


def test_agent_configs_load():
    sys.path.insert(0, str(VERL_DIR))
    from recipe.vsearch.agent_config import load_agent_config

    for model, px in [("gpt-5-mini", 1280 * 1280), ("gpt-5-nano", 1280 * 1280), ("gemini-2.5-flash", 3500 * 3500)]:
        c = load_agent_config(CONFIG_DIR / f"agent_{model}.yaml")
        assert c.vreasoner.model == model and c.vreasoner.max_pixels == px
        assert c.vreasoner.max_search_calls == 6 and c.vsearcher.max_tool_calls == 6
        assert c.vsearcher.max_pixels("train") == 4096 * 28 * 28 and c.vsearcher.max_pixels("eval") == 16384 * 28 * 28
    loops = OmegaConf.load(CONFIG_DIR / "agent_loops.yaml")
    assert {e.name: e._target_ for e in loops} == {
        "vsearcher": "recipe.vsearch.agent_loops.VSearcherAgentLoop",
        "vreasoner": "recipe.vsearch.agent_loops.VReasonerAgentLoop"}


def test_bad_agent_config_names_file_and_field(tmp_path):
    sys.path.insert(0, str(VERL_DIR))
    from recipe.vsearch.agent_config import load_agent_config

    p = tmp_path / "agent_x.yaml"
    p.write_text("vreasoner:\n  model: m\n  max_pixels: 100\n  max_serch_calls: 6\n")
    with pytest.raises(ValueError, match=r"agent_x.yaml.vreasoner: unknown key\(s\) \['max_serch_calls'\]"):
        load_agent_config(p)
    p.write_text("vreasoner:\n  model: m\n  max_pixels: -5\n")
    with pytest.raises(ValueError, match=r"vreasoner.max_pixels: expected a positive int"):
        load_agent_config(p)


def test_typo_in_an_override_fails():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=["algorithm.inloop_norm_scope=batch"])
        assert cfg.algorithm.inloop_norm_scope == "batch"
        for typo in ["actor_rollout_ref.rollout.multi_turn.enabled=True", "algorithm.inloop_norm_scop=batch",
                     "vsearch.agent_cfg=x"]:
            with pytest.raises(ConfigCompositionException, match="not in struct|Could not override"):
                compose(config_name="qwen_2_5_vl_7b_async", overrides=[typo])


def test_missing_env_is_a_clear_error(tmp_path):
    env = _env(tmp_path)
    del env["MODEL_PATH"]
    r = subprocess.run(["bash", str(RECIPE / "train.sh")], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "MODEL_PATH is not set" in r.stderr
    r = _dry_run("train.sh", tmp_path, DRY_RUN="0", OPENAI_API_KEY="")
    assert r.returncode == 2 and "OPENAI_API_KEY is not set" in r.stderr and SECRET not in r.stderr
    r = _dry_run("train.sh", tmp_path, RESUME_FROM_STEP="latest")
    assert r.returncode == 2 and "RESUME_FROM_STEP must be a step number" in r.stderr
