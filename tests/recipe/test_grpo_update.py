"""One GRPO update of the tiny random-weight Qwen2.5-VL on CPU through verl's own actor.

The batch is made by the recipe's vSearcher agent loop + episode worker (tool responses masked),
advantages by ``vsearch_hybrid_grpo`` through verl's ``compute_advantage``, and the update by verl's
``DataParallelPPOActor.update_policy`` (policy loss from core_algos + low-var KL loss, β 0.01) on a
single-process gloo group. No FSDP / flash-attention / vLLM: those parts need GPUs.
"""

from __future__ import annotations

import asyncio
import copy
import os
import socket

import pytest

from tests.conftest import require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty  # noqa: E402
from verl.trainer.ppo.ray_trainer import compute_advantage  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

import verl  # noqa: E402
from recipe.vsearch.agent_loops import VSearcherAgentLoop  # noqa: E402
from recipe.vsearch.hybrid_advantage import ESTIMATOR_NAME  # noqa: E402
from recipe.vsearch.image_inputs import rebuild_pixels_in  # noqa: E402
from tests.recipe.test_agent_loops import (  # noqa: E402,F401
    ANSWER,
    MAX_PIXELS,
    TOOL,
    ScriptedServerManager,
    _expand,
    _make,
    image_only_processor,
    image_path,  # noqa: F401  (a pytest fixture, used by name)
)
from verl import DataProto  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def gloo():
    if not dist.is_initialized():
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{_free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _actor_config():
    cfgdir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfgdir, version_base=None):
        cfg = compose(
            config_name="ppo_trainer",
            overrides=[
                "actor_rollout_ref.model.path=tiny",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.actor.use_dynamic_bsz=False",
                "actor_rollout_ref.actor.ppo_epochs=1",
                "actor_rollout_ref.actor.use_kl_loss=True",
                "actor_rollout_ref.actor.kl_loss_coef=0.01",
                "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
                "actor_rollout_ref.actor.entropy_coeff=0",
                "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
                "actor_rollout_ref.actor.freeze_vision_tower=True",
                "actor_rollout_ref.actor.use_remove_padding=False",
            ],
        )
    OmegaConf.resolve(cfg)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _rollout_batch(policy, image_path, config=None) -> DataProto:  # noqa: F811
    """Two rollouts of one out-of-loop prompt (a GRPO group), different answers, through the recipe
    (``config``: the loop/worker config, default ``tests.recipe.test_agent_loops._config()``)."""
    tok, proc = policy
    answers = iter([(60, 40, 180, 140), (10, 10, 60, 50)])
    state = {}

    def script(n_images, prompt):
        if n_images == 1:
            state["ans"] = next(answers)
            return TOOL % (40, 30, 200, 150)
        return ANSWER % state["ans"]

    rows = []
    row = {
        "raw_prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": {"image": f"file://{image_path}"}},
                    {"type": "text", "text": "the striped band"},
                ],
            }
        ],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
        "uid": "g0",
    }
    for _ in range(2):
        server = ScriptedServerManager(tok, script)

        async def go(server=server):
            return await _make(VSearcherAgentLoop, policy, server, config).run({}, **row)

        rows.append(_expand(policy, asyncio.run(go()), row, config))
    batch = DataProto.concat(rows)
    # outcome reward on the last response token (what verl's reward loop writes as rm_scores)
    mask = batch.batch["response_mask"]
    valid = batch.batch["attention_mask"][:, -mask.shape[1] :].sum(-1) - 1
    tlr = torch.zeros_like(mask, dtype=torch.float32)
    tlr[torch.arange(len(batch)), valid] = torch.tensor([1.0, 0.2])
    batch.batch["token_level_rewards"] = tlr
    batch.non_tensor_batch["uid"] = np.array(["g0", "g0"], dtype=object)
    return compute_advantage(
        batch, adv_estimator=ESTIMATOR_NAME, config=OmegaConf.create({}), norm_adv_by_std_in_grpo=True
    )


def _loss(actor, batch, cfg, keep_grad: bool = False):
    """The actor's loss terms (policy loss + β·KL, as in dp_actor.update_policy) and the log-probs;
    ``keep_grad`` keeps the log-prob tensor's gradient for inspection."""
    mb = {**batch.batch, "multi_modal_inputs": batch.non_tensor_batch["multi_modal_inputs"]}
    _, log_prob = actor._forward_micro_batch(mb, temperature=1.0, calculate_entropy=False)
    if keep_grad:
        log_prob.retain_grad()
    mask = batch.batch["response_mask"]
    pg, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=batch.batch["old_log_probs"],
        log_prob=log_prob,
        advantages=batch.batch["advantages"],
        response_mask=mask,
        loss_agg_mode=cfg.loss_agg_mode,
        config=cfg,
    )
    kl = agg_loss(kl_penalty(log_prob, batch.batch["ref_log_prob"], cfg.kl_loss_type), mask, cfg.loss_agg_mode)
    return pg + cfg.kl_loss_coef * kl, log_prob


def test_grpo_update_masks_tool_tokens_freezes_vision_and_lowers_loss(tiny_qwen_dir, image_path, gloo):  # noqa: F811
    from transformers import Qwen2_5_VLForConditionalGeneration
    from verl.utils import hf_tokenizer
    from verl.workers.actor.dp_actor import DataParallelPPOActor
    from verl.workers.fsdp_workers import get_vl_model_vision_tower

    tok = hf_tokenizer(str(tiny_qwen_dir))
    policy = (tok, image_only_processor(str(tiny_qwen_dir), tok))
    torch.manual_seed(0)
    model = Qwen2_5_VLForConditionalGeneration.from_pretrained(str(tiny_qwen_dir), torch_dtype=torch.float32)
    # what verl's FSDP worker does for actor.freeze_vision_tower=True (the recipe config sets it): the
    # projector (visual.merger) sits inside the tower, so this one switch freezes both (D.1)
    tower = get_vl_model_vision_tower(model)
    tower.requires_grad_(False)
    frozen = {n for n, p in model.named_parameters() if any(p is q for q in tower.parameters())}
    assert any(".merger." in n for n in frozen) and any(".blocks." in n for n in frozen)
    assert all(not p.requires_grad for n, p in model.named_parameters() if n in frozen)
    frozen_before = {n: p.detach().clone() for n, p in model.named_parameters() if n in frozen}
    lm_before = {n: p.detach().clone() for n, p in model.named_parameters() if n not in frozen}

    cfg = _actor_config()
    ref = DataParallelPPOActor(cfg, copy.deepcopy(model).eval())
    # plain gradient descent: first-order decrease is guaranteed for a small step (Adam at 1e-3
    # overshoots on the random tiny model, whose two rollouts share most tokens)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    actor = DataParallelPPOActor(cfg, model, opt)
    for policy_ in (ref, actor):  # the rows carry image references (the recipe's worker installs the same)
        rebuild_pixels_in(policy_, policy[1])

    batch = _rollout_batch(policy, image_path)
    batch.meta_info.update(temperature=1.0, micro_batch_size=2, use_dynamic_bsz=False, max_token_len=4096)
    mask = batch.batch["response_mask"]
    assert (mask == 0).any() and (mask == 1).any()
    adv = batch.batch["advantages"]
    assert adv[0][mask[0] > 0].mean() > 0 > adv[1][mask[1] > 0].mean() and (adv[mask == 0] == 0).all()
    with torch.no_grad():
        batch.batch["old_log_probs"], _ = actor.compute_log_prob(batch, calculate_entropy=False)
        batch.batch["ref_log_prob"], _ = ref.compute_log_prob(batch, calculate_entropy=False)

    # tool-response tokens: zero gradient at their log-probs (hence at their logits)
    model.train()
    loss0, log_prob = _loss(actor, batch, cfg, keep_grad=True)
    loss0.backward()
    g = log_prob.grad
    assert (g[mask == 0] == 0).all() and (g[mask == 1].abs() > 0).any()
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)
    actor.actor_optimizer.zero_grad()

    losses = [loss0.item()]
    for _ in range(3):
        metrics = actor.update_policy(batch)
        assert "actor/pg_loss" in metrics and "actor/kl_loss" in metrics
        with torch.no_grad():
            losses.append(_loss(actor, batch, cfg)[0].item())
    assert losses[-1] < losses[0] and all(b < a for a, b in zip(losses, losses[1:])), losses
    assert all(torch.equal(frozen_before[n], p) for n, p in model.named_parameters() if n in frozen)
    assert any(not torch.equal(lm_before[n], p) for n, p in model.named_parameters() if n not in frozen)
