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

from tests.conftest import require_recipe

require_recipe()

import torch  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.single_controller.base.decorator import MAGIC_ATTR  # noqa: E402

from recipe.vsearch.on_policy import install, on_policy_worker, set_whole_batch  # noqa: E402
from tests.test_recipe_agent_loops import _config, image_only_processor, image_path  # noqa: E402,F401
from tests.test_recipe_grpo_update import _actor_config, _rollout_batch, gloo  # noqa: E402,F401


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


def test_one_optimizer_step_per_training_step(tiny_qwen_dir, image_path, gloo, monkeypatch):  # noqa: F811
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
    # the recipe's loss aggregation (Eq. 2 weights, recipe.vsearch.on_policy.apply_eq2; tests/test_recipe_loss_eq2.py)
    cfg = dataclasses.replace(_actor_config(), loss_agg_mode="seq-mean-token-sum-norm")
    cfg.ppo_mini_batch_size = cfg.ppo_micro_batch_size_per_gpu = 1  # per rank, as verl's worker normalises it
    assert cfg.ppo_epochs == 1
    batch = _rollout_batch(policy, image_path, _config(response_length=256))  # 2 rows: 2 mini-batches for verl
    batch.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=4096)
    with torch.no_grad():
        old, _ = DataParallelPPOActor(cfg, model).compute_log_prob(batch, calculate_entropy=False)
    batch.batch["old_log_probs"], batch.batch["ref_log_prob"] = old, old.clone()
    batch.meta_info["global_token_num"] = batch.batch["attention_mask"].sum(-1).tolist()

    def run(worker_cls):
        m = copy.deepcopy(model)
        opt = torch.optim.SGD([p for p in m.parameters() if p.requires_grad], lr=0.05)
        actor = DataParallelPPOActor(copy.deepcopy(cfg), m, opt)
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
