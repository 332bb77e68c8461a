"""train.sh / val.sh override sets compose and validate with verl's own config machinery (no Ray)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

from omegaconf import OmegaConf  # noqa: E402

from tests.support.recipe_env import (  # noqa: E402
    SECRET,
    compose_dry_run,
    entry_point_recorder,
    run_at_once,
    script_env,
)

VERL_DIR = REPO / "verl"
RECIPE = VERL_DIR / "recipe" / "vsearch"
CONFIG_DIR = RECIPE / "config"


def _dry_run(script: str, tmp_path, *args: str, **extra):
    return subprocess.run(
        ["bash", str(RECIPE / script), *args],
        cwd=REPO,
        env=script_env(tmp_path, **extra),
        capture_output=True,
        text=True,
        timeout=120,
    )


#: the module's dry runs of the real scripts (each composes and validates the config in two Python starts that import
#: verl: ~10 s of one core), started together by :func:`dry_runs`: name -> (script, arguments, extra environment)
DRY_RUNS = {
    "train": ("train.sh", (), {}),
    "ppo_epochs": ("train.sh", ("actor_rollout_ref.actor.ppo_epochs=2",), {}),
    # the Gemini vReasoner, 3 trials, resume from step 40
    "val": (
        "val.sh",
        ("--cfg", "job"),
        {"DRY_RUN": "0", "NUM_VAL_TRIALS": "3", "RESUME_FROM_STEP": "40", "API_MODEL_FOR_AGENT": "gemini-2.5-flash"},
    ),
}


@pytest.fixture(scope="module")
def dry_runs(tmp_path_factory) -> dict[str, tuple]:
    """Every :data:`DRY_RUNS` entry, run at once (:func:`tests.support.recipe_env.run_at_once`): name -> (its tmp
    dir, its ``CompletedProcess``)."""
    tmps, commands = {}, {}
    for name, (script, args, extra) in DRY_RUNS.items():
        tmp = tmps[name] = tmp_path_factory.mktemp(f"dry_{name}")
        (tmp / "tmpdir").mkdir()
        env = script_env(tmp, TMPDIR=str(tmp / "tmpdir"), **extra)
        commands[name] = (["bash", str(RECIPE / script), *args], env, REPO)
    done = run_at_once(commands, tmp_path_factory.mktemp("dry_out"))
    return {name: (tmps[name], r) for name, r in done.items()}


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
    assert algo.pop("subagent_advantage_estimator") in (
        "global_norm",
        "no_global_norm",
        "broadcast",
        "broadcast_tool_only",
    )
    assert algo.pop("inloop_norm") in ("original", "paper")
    assert isinstance(omega_conf_to_dataclass(algo, AlgoConfig), AlgoConfig)
    validate_config(cfg, use_reference_policy=True, use_critic=need_critic(cfg))


@pytest.fixture(scope="module")
def train_dry(dry_runs):
    """``DRY_RUN=1 train.sh`` with train.sh's defaults."""
    return dry_runs["train"]


@pytest.fixture(scope="module")
def val_dry(dry_runs):
    """``val.sh --cfg job`` (Gemini vReasoner, 3 trials, resume from step 40)."""
    return dry_runs["val"]


def test_train_sh_composes_and_validates(train_dry):
    tmp_path, r = train_dry
    assert r.returncode == 0, r.stderr[-3000:]
    assert SECRET not in r.stdout + r.stderr
    assert not (tmp_path / "work").exists(), "a dry run must not create the checkpoint dir"
    assert not list((tmp_path / "tmpdir").iterdir()), "the composed config's temporary file is removed"
    cfg = OmegaConf.create(r.stdout)
    a, ro = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.data.train_batch_size == 24 and ro.n == 8 and ro.temperature == 1.0
    assert a.optim.lr == pytest.approx(1e-6) and a.use_kl_loss and a.kl_loss_coef == pytest.approx(0.01)
    assert a.freeze_vision_tower and cfg.data.max_response_length == 9216
    assert cfg.trainer.total_training_steps == 150 and cfg.algorithm.adv_estimator == "vsearch_hybrid_grpo"
    assert dict(cfg.data.batch_sampler.weights) == {
        "info_vqa_region_localization": 0.5,
        "visual_cot_vstar_collage": 0.5,
    }
    assert ro.name == "vllm" and ro.mode == "async" and ro.multi_turn.enable
    assert ro.limit_images == 7  # the whole image + up to 6 crops in one vSearcher trajectory
    assert ro.agent.agent_loop_config_path == str(CONFIG_DIR / "agent_loops.yaml")
    assert ro.agent.agent_loop_manager_class == "recipe.vsearch.episodes.VSearchAgentLoopManager"
    assert cfg.trainer.default_local_dir == str(tmp_path / "work/ckpts/proj/exp")
    assert cfg.trainer.resume_mode == "auto"
    assert cfg.vsearch.agent_config_path == str(CONFIG_DIR / "agent_gpt-5-mini.yaml")
    assert cfg.data.custom_cls.name == "VSearchDataset" and cfg.custom_reward_function.name == "compute_score"
    # operations: bounded checkpoints, validation generations written, API-failure abort, Eq. 2 loss settings
    assert cfg.trainer.max_actor_ckpt_to_keep == 3
    assert cfg.trainer.validation_data_dir == str(tmp_path / "work/ckpts/proj/exp/val_generations")
    # vsearch.variant=original (the default): the fork's loss, abort threshold and in-loop std
    assert cfg.vsearch.variant == "original" and cfg.vsearch.reward.variant == "original"
    assert cfg.vsearch.max_api_failure_ratio == 0.2 and cfg.algorithm.inloop_norm == "original"
    assert a.loss_agg_mode == "token-mean" and a.use_dynamic_bsz is True
    assert a.ppo_max_token_len_per_gpu == cfg.data.max_prompt_length + cfg.data.max_response_length
    assert ro.calculate_log_probs is False
    _validate(cfg)


def test_paper_variant_switches_the_whole_protocol(tmp_path):
    """``vsearch.variant=paper`` on train.sh's command line switches the reward rules, the loss and the failure
    handling together (one switch), and validates. train.sh's arguments to the entry point are recorded, then
    composed and validated as its dry run does (:func:`tests.support.recipe_env.compose_dry_run`; the dry run itself:
    :func:`test_train_sh_composes_and_validates`)."""
    from insight_o3.protocol.prompts import FORK_HINTS, PAPER_TRAIN_HINTS
    from recipe.vsearch.protocols import PROTOCOLS
    from recipe.vsearch.settings import RunSettings

    python, argv = entry_point_recorder(tmp_path)
    r = _dry_run("train.sh", tmp_path, "vsearch.variant=paper", PYTHON=str(python))
    assert r.returncode == 0, r.stderr[-3000:]
    args = argv.read_text().splitlines()
    assert args[-1] == "vsearch.variant=paper"  # after train.sh's own overrides
    cfg = compose_dry_run(args)
    a = cfg.actor_rollout_ref.actor
    assert cfg.vsearch.reward.variant == "paper" and cfg.custom_reward_function.reward_kwargs.variant == "paper"
    assert a.loss_agg_mode == "seq-mean-token-sum-norm" and a.use_dynamic_bsz is False
    assert cfg.vsearch.max_api_failure_ratio == 0.5 and cfg.algorithm.inloop_norm == "paper"
    s = RunSettings.from_config(cfg)
    table = s.describe()  # what the dry run prints on stderr
    assert s.protocol == PROTOCOLS["paper"] and "variant" in table and "mask_failed_episodes=True" in table
    # the F.1 training hints for training rollouts, the fork's (evaluation's) for validation rollouts
    assert s.reasoner_hints(validate=False) is PAPER_TRAIN_HINTS and s.reasoner_hints(validate=True) is FORK_HINTS
    assert re.search(r"vreasoner\.hints\.training_rollouts +paper_f1", table)
    _validate(cfg)


def test_val_sh_composes_and_validates(val_dry):
    tmp_path, r = val_dry
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
    from recipe.vsearch.agent_config import load_agent_config

    for model, px in [("gpt-5-mini", 1280 * 1280), ("gpt-5-nano", 1280 * 1280), ("gemini-2.5-flash", 3500 * 3500)]:
        c = load_agent_config(CONFIG_DIR / f"agent_{model}.yaml")
        assert c.vreasoner.model == model and c.vreasoner.max_pixels == px
        assert c.vreasoner.max_search_calls == 6 and c.vsearcher.max_tool_calls == 6
        assert c.vsearcher.max_pixels("train") == 4096 * 28 * 28 and c.vsearcher.max_pixels("eval") == 16384 * 28 * 28
    loops = OmegaConf.load(CONFIG_DIR / "agent_loops.yaml")
    assert {e.name: e._target_ for e in loops} == {
        "vsearcher": "recipe.vsearch.agent_loops.VSearcherAgentLoop",
        "vreasoner": "recipe.vsearch.agent_loops.VReasonerAgentLoop",
    }


def test_bad_agent_config_names_file_line_and_field(tmp_path):
    from recipe.vsearch.agent_config import load_agent_config

    p = tmp_path / "agent_x.yaml"

    def fails(text: str, match: str) -> None:
        p.write_text(text)
        with pytest.raises(ValueError, match=match):
            load_agent_config(p)

    fails(
        "vreasoner:\n  model: m\n  max_pixels: 100\n  max_serch_calls: 6\n",
        r"agent_x.yaml:4: vreasoner.max_serch_calls: unknown key; allowed: \[.*'max_search_calls'",
    )
    fails(
        "vreasoner:\n  model: m\n  max_pixels: -5\n",
        r"agent_x.yaml:3: vreasoner.max_pixels: Input should be greater than 0",
    )
    # the line of the key, below comments and other sections; strict types: no text for a number, no bool
    fails(
        "# agent\nvreasoner:\n  model: m\n  max_pixels: 5\n\njudge:\n  max_concurrency: 4\n  timeout_s: '60'\n",
        r"agent_x.yaml:8: judge.timeout_s: Input should be a valid number, got '60'",
    )
    fails(
        "vreasoner:\n  model: m\n  max_pixels: true\n",
        r"agent_x.yaml:3: vreasoner.max_pixels: Input should be a valid integer",
    )
    # a missing field: the line of the section that lacks it; a missing section: line 1
    fails("judge: {}\nvreasoner:\n  max_pixels: 5\n", r"agent_x.yaml:2: vreasoner.model: required")
    fails("vsearcher: {}\n", r"agent_x.yaml:1: vreasoner: required")
    fails("vreasoner:\n  model: m\n  max_pixels: [5\n", r"agent_x.yaml:4: not valid YAML")


def test_typo_in_an_override_fails():
    from hydra import compose, initialize_config_dir
    from hydra.errors import ConfigCompositionException

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=["algorithm.inloop_norm_scope=batch"])
        assert cfg.algorithm.inloop_norm_scope == "batch"
        for typo in [
            "actor_rollout_ref.rollout.multi_turn.enabled=True",
            "algorithm.inloop_norm_scop=batch",
            "vsearch.agent_cfg=x",
        ]:
            with pytest.raises(ConfigCompositionException, match="not in struct|Could not override"):
                compose(config_name="qwen_2_5_vl_7b_async", overrides=[typo])


def test_vsearch_section_types_and_keys_through_hydra_composition():
    """The ``vsearch`` section as Hydra composes it (an added key, a value of the wrong type) is refused by the
    structured merge into :class:`VSearchConfig`, naming the full key; a value of the right type that cannot work
    by the section's own check."""
    from hydra import compose, initialize_config_dir

    from insight_o3.protocol.fatal import FatalMode
    from recipe.vsearch.settings import RunSettings, SettingsError

    agent = f"vsearch.agent_config_path={CONFIG_DIR / 'agent_gpt-5-mini.yaml'}"
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        for override, match in [
            ("+vsearch.agent_cfg=x", r"^vsearch.agent_cfg: Key 'agent_cfg' not in 'VSearchConfig'; allowed: \["),
            ("+vsearch.fatal.kk=2", r"^vsearch.fatal.kk: Key 'kk' not in 'FatalSettings'; allowed: \['mode', 'k'\]$"),
            (
                "vsearch.fatal.k=three",
                r"^vsearch.fatal.k: Value 'three' of type 'str' could not be converted to Integer$",
            ),
            ("vsearch.reward.alpha=high", r"^vsearch.reward.alpha: Value 'high' of type 'str' could not be converted"),
            ("vsearch.max_api_failure_ratio=true", r"^vsearch.max_api_failure_ratio: Value 'True' of type 'bool'"),
            ("vsearch.fatal.k=0", r"^vsearch.fatal.k: expected a whole number of consecutive tool errors >= 1, got 0$"),
            ("vsearch.fatal.mode=clamp", r"^vsearch.fatal.mode must be one of \['off', 'hard_mask'"),
        ]:
            cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=[agent, override])
            with pytest.raises(SettingsError, match=match):
                RunSettings.from_config(cfg)
        s = RunSettings.from_config(compose(config_name="qwen_2_5_vl_7b_async", overrides=[agent, "vsearch.fatal.k=2"]))
    assert s.fatal.fatal_mode is FatalMode.OFF and s.fatal.k == 2
    assert (s.max_api_failure_ratio, s.reward.tool_weight) == (0.2, 1.0)


def test_missing_env_is_a_clear_error(tmp_path):
    env = script_env(tmp_path)
    del env["MODEL_PATH"]
    r = subprocess.run(["bash", str(RECIPE / "train.sh")], cwd=REPO, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "MODEL_PATH is not set" in r.stderr
    r = _dry_run("train.sh", tmp_path, DRY_RUN="0", OPENAI_API_KEY="")
    assert r.returncode == 2 and "OPENAI_API_KEY is not set" in r.stderr and SECRET not in r.stderr
    r = _dry_run("train.sh", tmp_path, RESUME_FROM_STEP="latest")
    assert r.returncode == 2 and "RESUME_FROM_STEP must be a step number" in r.stderr


# ----------------------------------------------------------------------------- effective values (DRY_RUN)
def _effective(r):
    """(composed config, RunSettings) of a DRY_RUN; the settings table is on stderr."""
    from recipe.vsearch.settings import RunSettings

    assert r.returncode == 0, r.stderr[-3000:]
    cfg = OmegaConf.create(r.stdout)
    return cfg, RunSettings.from_config(cfg)


def _loops(cfg, tiny_qwen_dir):
    """The two agent loops exactly as verl's AgentLoopWorker builds them from the composed config."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap
    from verl.utils import hf_tokenizer
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from recipe.vsearch.agent_loops import VReasonerAgentLoop, VSearcherAgentLoop

    tok = hf_tokenizer(str(tiny_qwen_dir))
    kw = dict(
        trainer_config=DictConfigWrap(cfg),
        server_manager=None,
        tokenizer=tok,
        processor=None,
        dataset_cls=RLHFDataset,
        dataset_config=cfg.data,
    )
    return VSearcherAgentLoop(**kw), VReasonerAgentLoop(**kw)


def _reasoner(loop, validate):
    import asyncio

    async def go():
        return loop.reasoner(None, validate)

    return asyncio.run(go())


def _updates_per_step(cfg, rows: int, dp: int = 8, on_policy: bool = True) -> int:
    """Optimizer steps verl's dp_actor.update_policy takes on one rank for a step of ``rows`` rows
    (ppo_mini_batch_size normalised as verl's FSDP worker does; the recipe's worker then sets it)."""
    from types import SimpleNamespace

    import torch
    from verl.utils.config import omega_conf_to_dataclass

    from recipe.vsearch.on_policy import set_whole_batch
    from verl import DataProto

    actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    actor_cfg.ppo_mini_batch_size = actor_cfg.ppo_mini_batch_size * cfg.actor_rollout_ref.rollout.n // dp
    share = DataProto.from_dict(tensors={"x": torch.zeros(rows // dp, 1)})
    if on_policy:
        set_whole_batch(SimpleNamespace(config=actor_cfg), share)
    return len(share.split(actor_cfg.ppo_mini_batch_size)) * actor_cfg.ppo_epochs


def test_train_sh_effective_settings_as_the_loops_see_them(train_dry, tmp_path, tiny_qwen_dir):
    from insight_o3.protocol.prompts import VREASONER_INFER_SYSTEM_PROMPT, VREASONER_TRAIN_SYSTEM_PROMPT

    r = train_dry[1]
    cfg, s = _effective(r)
    assert "[vsearch] effective settings (stage=train)" in r.stderr and SECRET not in r.stderr
    # D.1: ≈3.2M-pixel vSearcher images, 9K-token trajectories, ≤ 6 crops / ≤ 6 vSearcher calls
    assert s.vsearcher_max_pixels == 4096 * 28 * 28 and s.vsearcher_response_length == 9216
    assert s.vsearcher_max_tool_calls == 6 and s.agent.vreasoner.max_search_calls == 6
    # vReasoner: GPT-5-mini at 1280x1280, token cap, training prompts (feedback) for training rollouts only
    vr = s.agent.vreasoner
    assert (vr.model, vr.max_pixels, vr.max_completion_tokens) == ("gpt-5-mini", 1280 * 1280, 2048)
    assert s.reasoner_mode(validate=False) == "train" and s.reasoner_mode(validate=True) == "infer"
    assert s.judge_model == "gpt-5-nano"
    assert (s.reward.variant, s.reward.format_weight, s.reward.iou_weight, s.reward.alpha) == (
        "original",
        0.2,
        0.8,
        0.25,
    )
    assert dict(cfg.custom_reward_function.reward_kwargs) == dict(cfg.vsearch.reward)  # what the reward fn gets
    # fully on-policy: one optimizer step per step for any number of expanded rows (24 x 8 = 192 rows at
    # most out-of-loop; up to 12 x 8 x 6 + 96 = 672 with in-loop expansion); verl's split alone took 4
    assert s.ppo_epochs == 1
    assert [_updates_per_step(cfg, n) for n in (192, 400, 672)] == [1, 1, 1]
    assert _updates_per_step(cfg, 672, on_policy=False) == 4
    # the loops built from this config use exactly these values
    searcher, reasoner = _loops(cfg, tiny_qwen_dir)
    assert (searcher.searcher.max_pixels, searcher.searcher.max_tool_calls, searcher.searcher.response_length) == (
        4096 * 28 * 28,
        6,
        9216,
    )
    assert reasoner.policy.max_pixels == 4096 * 28 * 28
    train, val = _reasoner(reasoner, False), _reasoner(reasoner, True)
    assert (train.model, train.max_pixels, train.max_search_calls) == ("gpt-5-mini", 1280 * 1280, 6)
    assert train.completion_kwargs == {
        "max_completion_tokens": 2048,
        "temperature": 1.0,
        "reasoning_effort": None,
    } and train.image_url_extra == {"detail": "high"}
    assert (train.max_format_retries, val.max_format_retries) == (2, 4)
    assert _system_prompt(train, tmp_path) == VREASONER_TRAIN_SYSTEM_PROMPT
    assert _system_prompt(val, tmp_path) == VREASONER_INFER_SYSTEM_PROMPT


def _system_prompt(reasoner, tmp_path) -> str:
    """The system prompt of the first vReasoner request of an episode of ``reasoner``."""
    from PIL import Image

    p = tmp_path / "i.png"
    Image.new("RGB", (64, 48)).save(p)
    content = reasoner.session(str(p), "q").messages[0]["content"]
    return content if isinstance(content, str) else "".join(c.get("text", "") for c in content)


def test_val_sh_effective_settings_as_the_loops_see_them(val_dry, tiny_qwen_dir):
    r = val_dry[1]
    cfg, s = _effective(r)
    assert "[vsearch] effective settings (stage=eval)" in r.stderr
    # D.1 evaluation: ≈12.8M-pixel vSearcher images, 32K-token trajectories, temperature 0, mean@3
    assert s.vsearcher_max_pixels == 16384 * 28 * 28 and s.vsearcher_response_length == 32768
    assert s.vsearcher_prompt_length >= 16384 + 1024
    vk = cfg.actor_rollout_ref.rollout.val_kwargs
    assert vk.temperature == 0 and vk.do_sample is False and vk.n == 3
    # Gemini gets the 3500x3500 budget; inference prompts for every rollout
    assert (s.agent.vreasoner.model, s.agent.vreasoner.max_pixels) == ("gemini-2.5-flash", 3500 * 3500)
    assert s.reasoner_mode(False) == s.reasoner_mode(True) == "infer"
    searcher, reasoner = _loops(cfg, tiny_qwen_dir)
    assert (searcher.searcher.max_pixels, searcher.searcher.response_length) == (16384 * 28 * 28, 32768)
    v = _reasoner(reasoner, True)
    assert (v.model, v.max_pixels, v.mode, v.max_format_retries) == ("gemini-2.5-flash", 3500 * 3500, "infer", 4)


def test_bad_settings_fail_the_dry_run_with_the_key(dry_runs):
    r = dry_runs["ppo_epochs"][1]
    assert r.returncode == 2 and "actor_rollout_ref.actor.ppo_epochs must be 1" in r.stderr


def test_settings_validation_names_the_key(train_dry, tmp_path):
    from recipe.vsearch.settings import RunSettings, SettingsError

    base = OmegaConf.to_container(OmegaConf.create(train_dry[1].stdout))

    def fails(match, **edits):
        cfg = OmegaConf.create(base)
        for key, value in edits.items():
            OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
        with pytest.raises(SettingsError, match=match):
            RunSettings.from_config(cfg)

    fails(r"vsearch.agent_cfg: Key 'agent_cfg' not in 'VSearchConfig'; allowed: \['variant'", vsearch__agent_cfg="x")
    fails("vsearch.agent_config_path: required", vsearch__agent_config_path=None)
    fails("vsearch.stage must be one of", vsearch__stage="test")
    fails(r"vsearch.reward.alpah: Key 'alpah' not in 'RewardSettings'", vsearch__reward__alpah=0.3)
    fails("vsearch.reward: alpha must be in", vsearch__reward__alpha=1.5)
    fails(
        "custom_reward_function.reward_kwargs must equal vsearch.reward",
        custom_reward_function__reward_kwargs={"variant": "paper"},
    )
    fails("use_legacy_worker_impl", trainer__use_legacy_worker_impl="disable")
    fails("actor_rollout_ref.actor.ppo_epochs must be 1", actor_rollout_ref__actor__ppo_epochs=2)
    fails("vsearch.reward.variant must be one of", vsearch__reward__variant="eq1")
    # the printed config is resolved (DRY_RUN: --resolve): the rollout length no longer follows data.*
    fails(
        r"data.max_prompt_length .* is 4096",
        data__max_prompt_length=4096,
        actor_rollout_ref__rollout__prompt_length=4096,
    )
    # one switch: the loss of each variant is fixed by vsearch.variant, an override that contradicts it is refused
    fails("vsearch.variant must be one of", vsearch__variant="fork")
    fails(
        "vsearch.reward.variant is 'paper' but vsearch.variant is 'original'",
        vsearch__reward__variant="paper",
        custom_reward_function__reward_kwargs={**base["vsearch"]["reward"], "variant": "paper"},
    )
    fails(
        "actor_rollout_ref.actor.loss_agg_mode must be token-mean under vsearch.variant=original",
        actor_rollout_ref__actor__loss_agg_mode="seq-mean-token-sum-norm",
    )
    fails(
        "actor_rollout_ref.actor.use_dynamic_bsz must be True under vsearch.variant=original",
        actor_rollout_ref__actor__use_dynamic_bsz=False,
    )
    fails(
        r"ppo_max_token_len_per_gpu is 14336, but a padded row has 17408",
        actor_rollout_ref__actor__ppo_max_token_len_per_gpu=14336,
    )
    paper = {"vsearch__variant": "paper", "vsearch__reward__variant": "paper"}
    paper["custom_reward_function__reward_kwargs"] = {**base["vsearch"]["reward"], "variant": "paper"}
    # the Eq. 2 loss (recipe.vsearch.on_policy.apply_eq2) needs these two
    fails(
        "actor_rollout_ref.actor.loss_agg_mode must be seq-mean-token-sum-norm under vsearch.variant=paper",
        actor_rollout_ref__actor__loss_agg_mode="token-mean",
        **paper,
    )
    fails(
        "actor_rollout_ref.actor.use_dynamic_bsz must be False under vsearch.variant=paper",
        actor_rollout_ref__actor__use_dynamic_bsz=True,
        actor_rollout_ref__actor__loss_agg_mode="seq-mean-token-sum-norm",
        **paper,
    )
    # options the recipe cannot honour are rejected up front, naming the key
    fails(
        r"actor_rollout_ref.rollout.calculate_log_probs=True is not supported",
        actor_rollout_ref__rollout__calculate_log_probs=True,
    )
    fails(
        r"algorithm.rollout_correction.rollout_is='token' is not supported",
        algorithm__rollout_correction__rollout_is="token",
    )
    fails(
        r"algorithm.rollout_correction.rollout_rs='seq_mean_k1' is not supported",
        algorithm__rollout_correction__rollout_rs="seq_mean_k1",
    )
    fails(
        r"algorithm.rollout_correction.bypass_mode=True is not supported",
        algorithm__rollout_correction__bypass_mode=True,
    )
    fails(r"vsearch.max_api_failure_ratio: expected a number in \[0, 1\]", vsearch__max_api_failure_ratio=1.5)
    bad = tmp_path / "agent_bad.yaml"
    bad.write_text("vreasoner:\n  model: m\n  max_pixels: 100\n  max_tokens: 5\n")
    fails(r"agent_bad.yaml:4: vreasoner.max_tokens: unknown key", vsearch__agent_config_path=str(bad))


class _Rows:
    def __init__(self, sources):
        import pandas as pd

        self.dataframe = pd.DataFrame({"data_source": sources})

    def __len__(self):
        return len(self.dataframe["data_source"])


def test_val_sh_builds_its_train_sampler(val_dry, train_dry):
    """verl builds the train sampler even for val_only: val.sh must not need sampler weights."""
    from verl.trainer.main_ppo import create_rl_sampler

    cfg = OmegaConf.create(val_dry[1].stdout)
    sampler = create_rl_sampler(cfg.data, _Rows(["vstar"] * 5))
    assert len(list(iter(sampler))) == 5
    cfg = OmegaConf.create(train_dry[1].stdout)  # train.sh keeps the weighted 1:1 sampler
    sampler = create_rl_sampler(cfg.data, _Rows(["info_vqa_region_localization", "visual_cot_vstar_collage"] * 24))
    assert type(sampler).__name__ == "WeightedSourceSampler" and sampler.counts == {
        "info_vqa_region_localization": 12,
        "visual_cot_vstar_collage": 12,
    }


_MAIN_WITH_STUBBED_RUN_PPO = """
import runpy, sys
import ray
import verl.trainer.main_ppo as main_ppo
ray.is_initialized = lambda: True  # no Ray here: recipe.vsearch.main.init_ray is tested in test_recipe_runtime_env
def run_ppo(config, task_runner_class):
    print("RUN_PPO", task_runner_class.__ray_metadata__.class_name, flush=True)
main_ppo.run_ppo = run_ppo
sys.argv = ["recipe.vsearch.main", *sys.argv[1:]]
runpy.run_module("recipe.vsearch.main", run_name="__main__")
"""


def test_main_checks_and_prints_settings_once_before_ray(tmp_path):
    """``python -m recipe.vsearch.main``: settings validated and printed once, then verl's ``run_ppo`` (stubbed:
    no Ray here) with the recipe's TaskRunner; a bad setting exits 2 before anything starts."""
    from recipe.vsearch.node_checks import SDPA_OVERRIDES

    overrides = [
        f"vsearch.agent_config_path={CONFIG_DIR / 'agent_gpt-5-nano.yaml'}",
        "hydra.output_subdir=null",
        f"hydra.run.dir={tmp_path}",
        "hydra/job_logging=disabled",
        "hydra/hydra_logging=disabled",
        # no flash-attn on this machine (tests/recipe/test_gpu_start.py: without the switch, one line and status 2)
        *SDPA_OVERRIDES,
    ]
    env = {**os.environ, "PYTHONPATH": f"{VERL_DIR}{os.pathsep}{REPO}"}
    argv = [sys.executable, "-c", _MAIN_WITH_STUBBED_RUN_PPO, *overrides]
    # both at once: independent, and each is ~10 s of one of the 2 cores
    runs = run_at_once(
        {"good": (argv, env, VERL_DIR), "bad": ([*argv, "vsearch.reward.variant=eq1"], env, VERL_DIR)},
        tmp_path,
        timeout=180,
    )
    r = runs["good"]
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.count("[vsearch] effective settings (stage=train)") == 1 and "gpt-5-nano" in r.stdout
    assert r.stdout.index("effective settings") < r.stdout.index("RUN_PPO")
    assert "RUN_PPO VSearchTaskRunner" in r.stdout
    r = runs["bad"]
    assert r.returncode == 2 and "vsearch.reward.variant must be one of" in r.stderr and "RUN_PPO" not in r.stdout


def test_task_runner_registers_the_on_policy_worker():
    from hydra import compose, initialize_config_dir
    from verl.trainer.ppo.ray_trainer import Role

    from recipe.vsearch.main import VSearchTaskRunner

    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async")
    runner = VSearchTaskRunner()
    cls, _ = runner.add_actor_rollout_worker(cfg)
    assert cls.__name__ == "OnPolicyAsyncActorRolloutRefWorker"
    remote = runner.role_worker_mapping[Role.ActorRollout]  # ray.remote(cls): what verl's trainer starts
    assert cls in remote.__ray_metadata__.modified_class.__mro__


def test_gpu_pins_match_verls_vllm_line_and_the_readme():
    """The train extra's vLLM is the newest verl 0.7.0 allows (its images' 0.12 line), with vLLM 0.12's torch,
    and the recipe README states the same pins."""
    import importlib.metadata

    import tomllib
    from packaging.requirements import Requirement

    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    train = {Requirement(d).name: Requirement(d) for d in pyproject["project"]["optional-dependencies"]["train"]}
    pin = {name: str(next(iter(r.specifier)).version) for name, r in train.items() if str(r.specifier).startswith("==")}
    assert pin["verl"] == importlib.metadata.version("verl") == "0.7.0"
    verl_vllm = [Requirement(r) for r in importlib.metadata.requires("verl") if r.startswith("vllm")]
    assert verl_vllm and all(r.specifier.contains(pin["vllm"]) for r in verl_vllm)
    assert pin["vllm"] == "0.12.0" and pin["torch"] == "2.9.0"  # vllm 0.12.0 requires torch==2.9.0
    readme = (RECIPE / "README.md").read_text()
    assert "`vllm==0.12.0`, `torch==2.9.0`" in readme and f"`transformers=={pin['transformers']}`" in readme
