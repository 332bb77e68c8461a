"""One GRPO update of the tiny random-weight Qwen2.5-VL on CPU through verl's own actor.

The batch is made by the recipe's vSearcher agent loop + episode worker (tool responses masked),
advantages by ``vsearch_hybrid_grpo`` through verl's ``compute_advantage``, and the update by verl's
``DataParallelPPOActor.update_policy`` (policy loss from core_algos + low-var KL loss, β 0.01) on a
single-process gloo group. No FSDP / flash-attention / vLLM: those parts need GPUs.
"""

from __future__ import annotations

import copy

from tests.support.stacks import require_recipe

require_recipe()

import torch  # noqa: E402
from verl.trainer.ppo.core_algos import agg_loss, get_policy_loss_fn, kl_penalty  # noqa: E402

from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402
from recipe.vsearch.image_inputs import rebuild_pixels_in  # noqa: E402
from tests.support.recipe_loops import actor_config, rollout_batch  # noqa: E402


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


def test_grpo_update_masks_tool_tokens_freezes_vision_and_lowers_loss(tiny_qwen_dir, image_path, gloo):
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

    cfg = actor_config()
    ref = DataParallelPPOActor(cfg, copy.deepcopy(model).eval())
    # plain gradient descent: first-order decrease is guaranteed for a small step (Adam at 1e-3
    # overshoots on the random tiny model, whose two rollouts share most tokens)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05)
    actor = DataParallelPPOActor(cfg, model, opt)
    for policy_ in (ref, actor):  # the rows carry image references (the recipe's worker installs the same)
        rebuild_pixels_in(policy_, policy[1])

    batch = rollout_batch(policy, image_path)
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
