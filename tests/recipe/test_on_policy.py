"""Fully on-policy updates (D.1) through verl's own worker ``update_actor`` and ``DataParallelPPOActor``.

A batch of 2 rows with a per-rank mini-batch of 1 (``ppo_mini_batch_size`` 1 after verl's
normalisation) makes verl's actor take 2 optimizer steps, the second off-policy. The recipe's
worker (:func:`recipe.vsearch.on_policy.on_policy_worker`) takes exactly one, on-policy (verl then
uses the detached current log-prob as the old one: ``actor/ppo_kl`` is 0). The worker object is
verl's FSDP ``AsyncActorRolloutRefWorker`` created without its ``__init__`` (no FSDP / devices on
CPU): the attributes ``update_actor`` reads are set to the tiny model's actor.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
from types import SimpleNamespace

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.single_controller.base.decorator import MAGIC_ATTR  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402

from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402
from recipe.vsearch.image_inputs import rebuild_pixels_in  # noqa: E402
from recipe.vsearch.on_policy import install, old_log_prob_needed, on_policy_worker, set_whole_batch  # noqa: E402
from tests.support.recipe_loops import actor_config, loop_config, rollout_batch  # noqa: E402


def _worker(cls, actor):
    w = object.__new__(cls)
    w._is_actor, w._is_offload_param, w._is_offload_optimizer = True, False, False
    w.ulysses_sharding_manager = contextlib.nullcontext()
    w.actor, w._world_size = actor, 1
    w.flops_counter = SimpleNamespace(estimate_flops=lambda tokens, seconds: (0.0, 1.0))
    w.config = OmegaConf.create({"actor": {"ppo_epochs": 1}})
    w.actor_lr_scheduler = SimpleNamespace(get_last_lr=lambda: [1e-6], step=lambda: None)
    return w


def _count_steps(actor) -> list:
    steps = []
    real = actor._optimizer_step

    def counted():
        steps.append(1)
        return real()

    actor._optimizer_step = counted
    return steps


def test_one_optimizer_step_per_training_step(tiny_qwen_dir, image_path, gloo, monkeypatch):
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.utils import hf_tokenizer
    from verl.workers import fsdp_workers
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    # update_actor reports device memory; there is no accelerator here
    monkeypatch.setattr(
        fsdp_workers,
        "get_torch_device",
        lambda: SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0),
    )
    tok = hf_tokenizer(str(tiny_qwen_dir))
    policy = (tok, image_only_processor(str(tiny_qwen_dir), tok))
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch.float32)
    # the recipe's loss aggregation (Eq. 2 weights, recipe.vsearch.on_policy.apply_eq2; tests/recipe/test_loss_eq2.py)
    cfg = dataclasses.replace(actor_config(), loss_agg_mode="seq-mean-token-sum-norm")
    cfg.ppo_mini_batch_size = cfg.ppo_micro_batch_size_per_gpu = 1  # per rank, as verl's worker normalises it
    assert cfg.ppo_epochs == 1
    batch = rollout_batch(policy, image_path, loop_config(response_length=256))  # 2 rows: 2 mini-batches for verl
    batch.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=4096)
    with torch.no_grad():
        ref = DataParallelPPOActor(cfg, model)
        rebuild_pixels_in(ref, policy[1])  # the rows carry image references (recipe.vsearch.image_inputs)
        old, _ = ref.compute_log_prob(batch, calculate_entropy=False)
    batch.batch["old_log_probs"], batch.batch["ref_log_prob"] = old, old.clone()
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()

    def run(worker_cls):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
        actor = DataParallelPPOActor(copy.deepcopy(cfg), m, opt)
        rebuild_pixels_in(actor, policy[1])
        steps = _count_steps(actor)
        out = _worker(worker_cls, actor).update_actor(copy.deepcopy(batch))
        return len(steps), out.meta_info["metrics"], actor

    base_cls = fsdp_workers.AsyncActorRolloutRefWorker
    n_verl, m_verl, _ = run(base_cls)
    assert n_verl == 2 and any(v != 0 for v in m_verl["actor/ppo_kl"])  # verl: the 2nd mini-batch is off-policy
    n_ours, m_ours, actor = run(on_policy_worker(base_cls))
    assert n_ours == 1, "one optimizer step per training step"
    assert m_ours["actor/ppo_kl"] == [0.0] * len(m_ours["actor/ppo_kl"])  # ratio of the current policy to itself
    assert actor.config.ppo_mini_batch_size == 2


def test_on_policy_worker_keeps_verl_dispatch_and_replaces_the_role():
    from verl.trainer.ppo.ray_trainer import Role
    from verl.workers import fsdp_workers

    base = fsdp_workers.AsyncActorRolloutRefWorker
    cls = on_policy_worker(base)
    assert issubclass(cls, base) and on_policy_worker(base) is cls
    assert getattr(cls.update_actor, MAGIC_ATTR) == getattr(base.update_actor, MAGIC_ATTR)
    mapping = {Role.ActorRollout: object, Role.Critic: object}
    assert install(mapping, base) is cls
    assert mapping[Role.Critic] is object and mapping[Role.ActorRollout] is not object
    with pytest.raises(TypeError, match="not a registered worker method"):
        on_policy_worker(type("W", (), {"update_actor": lambda self, data: None}))


def test_set_whole_batch_checks_micro_batches():
    cfg = SimpleNamespace(use_dynamic_bsz=False, ppo_micro_batch_size_per_gpu=4, ppo_mini_batch_size=2)
    with pytest.raises(ValueError, match="not a multiple"):
        set_whole_batch(SimpleNamespace(config=cfg), [0] * 6)
    cfg.use_dynamic_bsz = True
    assert set_whole_batch(SimpleNamespace(config=cfg), [0] * 6) == 6 and cfg.ppo_mini_batch_size == 6
    with pytest.raises(ValueError, match="empty"):
        set_whole_batch(SimpleNamespace(config=cfg), [])


def _needs(**changes):
    """``old_log_prob_needed`` on the recipe's composed config with ``changes`` (dotted keys)."""
    cfg = _recipe_config()
    for key, value in changes.items():
        OmegaConf.update(cfg, key.replace("__", "."), value, force_add=True)
    return old_log_prob_needed(cfg)


def _recipe_config():
    from hydra import compose, initialize_config_dir

    from tests.support.stacks import REPO

    with initialize_config_dir(config_dir=str(REPO / "verl" / "recipe" / "vsearch" / "config"), version_base=None):
        cfg = compose(config_name="qwen_2_5_vl_7b_async", overrides=["actor_rollout_ref.model.path=tiny"])
    return cfg


@pytest.mark.parametrize(
    "changes, reason",
    [
        ({}, None),  # the recipe's configuration: the update never reads the old log-probs
        ({"actor_rollout_ref__actor__ppo_epochs": 2}, "ppo_epochs=2"),
        ({"actor_rollout_ref__actor__use_rollout_log_probs": True}, "use_rollout_log_probs"),
        ({"algorithm__use_kl_in_reward": True}, "use_kl_in_reward"),
        ({"algorithm__rollout_correction__rollout_is": "token"}, "rollout_correction.rollout_is"),
        ({"algorithm__rollout_correction__rollout_rs": "token"}, "rollout_correction.rollout_rs"),
        ({"algorithm__rollout_correction__bypass_mode": True}, "rollout_correction.bypass_mode"),
        ({"trainer__use_legacy_worker_impl": "disable"}, "use_legacy_worker_impl"),
    ],
)
def test_old_log_prob_pass_is_skipped_only_when_nothing_reads_it(changes, reason):
    got = _needs(**changes)
    assert (got is None) if reason is None else (reason in got), got


@pytest.fixture()
def update_case(tiny_qwen_dir, image_path, gloo, monkeypatch):
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.utils import hf_tokenizer
    from verl.workers import fsdp_workers

    monkeypatch.setattr(
        fsdp_workers,
        "get_torch_device",
        lambda: SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0),
    )
    tok = hf_tokenizer(str(tiny_qwen_dir))
    proc = image_only_processor(str(tiny_qwen_dir), tok)
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch.float32)
    cfg = dataclasses.replace(
        actor_config(), loss_agg_mode="token-mean", use_dynamic_bsz=True, ppo_max_token_len_per_gpu=4096
    )
    batch = rollout_batch((tok, proc), image_path, loop_config(response_length=256))
    batch.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=True, max_token_len=4096)
    with torch.no_grad():
        ref = DataParallelPPOActor(cfg, copy.deepcopy(model))
        rebuild_pixels_in(ref, proc)
        batch.batch["ref_log_prob"], _ = ref.compute_log_prob(batch, calculate_entropy=False)
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()
    return model, cfg, batch, proc, fsdp_workers.AsyncActorRolloutRefWorker


def test_update_without_the_old_log_prob_pass_is_the_same_update(update_case):
    """The recipe's worker trains on a batch without old log-probs exactly as on one with them (verl's on-policy
    update uses its own detached log-probs either way): same losses, gradient norm and weights after the step."""
    model, cfg, batch, proc, base = update_case
    cls = on_policy_worker(base)
    with torch.no_grad():
        actor = DataParallelPPOActor(cfg, copy.deepcopy(model))
        rebuild_pixels_in(actor, proc)
        with_old = copy.deepcopy(batch)
        with_old.batch["old_log_probs"], _ = actor.compute_log_prob(with_old, calculate_entropy=False)
    m_old, w_old = _update_rebuilding(cls, model, cfg, with_old, proc)
    m_new, w_new = _update_rebuilding(cls, model, cfg, batch, proc)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/ppo_kl"):
        assert m_new[key] == m_old[key], key
    assert m_new["actor/grad_norm"][0] > 0
    for a, b in zip(w_old.parameters(), w_new.parameters()):
        assert torch.equal(a, b)


def _update_rebuilding(cls, model, cfg, batch, proc):
    m = copy.deepcopy(model)
    opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
    actor = DataParallelPPOActor(copy.deepcopy(cfg), m, opt)
    rebuild_pixels_in(actor, proc)
    out = _worker(cls, actor).update_actor(copy.deepcopy(batch))
    return out.meta_info["metrics"], m


def test_update_without_old_log_probs_refuses_a_configuration_that_is_not_on_policy(update_case):
    model, cfg, batch, proc, base = update_case
    cfg = dataclasses.replace(cfg, ppo_epochs=2)
    with pytest.raises(ValueError, match="not on-policy.*ppo_epochs=2"):
        _update_rebuilding(on_policy_worker(base), model, cfg, batch, proc)


def test_reference_held_in_bf16_gives_the_same_log_probs(update_case, tiny_qwen_dir):
    """The recipe holds the reference in bf16 (``ref.fsdp_config.model_dtype``; verl's default is fp32): its
    log-probs equal the fp32-held reference's within bf16 rounding (both compute under bf16 autocast)."""
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.utils.torch_dtypes import PrecisionType

    _, cfg, batch, proc, _ = update_case
    dtype = PrecisionType.to_dtype(_recipe_config().actor_rollout_ref.ref.fsdp_config.model_dtype)
    assert dtype == torch.bfloat16

    def ref_log_probs(torch_dtype):
        model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch_dtype)
        ref = DataParallelPPOActor(cfg, model.eval())
        rebuild_pixels_in(ref, proc)
        with torch.no_grad():
            return ref.compute_log_prob(copy.deepcopy(batch), calculate_entropy=False)[0]

    fp32, bf16 = ref_log_probs(torch.float32).float(), ref_log_probs(dtype).float()
    mask = batch.batch["response_mask"].bool()
    diff = (bf16 - fp32)[mask].abs()
    # bf16 keeps 8 significant bits: a relative error of 2^-8 on the log-prob, plus the same on a logit scale of ~1
    assert torch.all(diff <= 2**-8 * fp32[mask].abs() + 2**-6), float(diff.max())
    assert float(diff.max()) > 0  # the storage dtype really differs
