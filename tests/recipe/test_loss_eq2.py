"""The actor loss of each ``vsearch.variant`` under verl 0.7's micro-batch scaling: the paper's Eq. 2 (per-sample
mean of token means, ``paper``) and the fork's verl ``token-mean`` over dynamic micro-batches (``original``).

verl's own ``DataParallelPPOActor.update_policy`` runs through the recipe's on-policy worker
(:func:`recipe.vsearch.on_policy.on_policy_worker`) with the actor settings of the recipe YAML; only the
model's forward is replaced by ``log_prob = base + theta * x`` (one scalar parameter), so the gradient
verl produces can be compared with the gradient of Eq. 2 written out by hand. The hand batch has rows of
different lengths, an all-masked row (an API-failed in-loop sample) and zero-mask padding rows; it is
split over two "ranks" with different numbers of real rows, whose gradients are averaged as FSDP does.
"""

from __future__ import annotations

import contextlib
import pickle
from types import SimpleNamespace

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from verl.trainer.ppo.core_algos import kl_penalty  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402

from recipe.vsearch.on_policy import EQ2_META_KEY, eq2_weights, on_policy_worker  # noqa: E402
from recipe.vsearch.settings import register_resolvers  # noqa: E402
from verl import DataProto  # noqa: E402

CONFIG_DIR = REPO / "verl" / "recipe" / "vsearch" / "config"
R = 6  # response length
KL_COEF = 0.01

# per rank: (number of trained tokens per row; 0 = all-masked row), advantages per row
RANKS = [
    ([3, 0, 0], [1.0, -2.0, 0.5]),  # one real row, an API-failed row, a padding row
    ([5, 2, 0], [-0.5, 2.0, 1.0]),  # two real rows, a padding row
]


def _actor_config(variant: str = "paper", *extra: str):
    register_resolvers()  # the recipe YAML's ${vsearch_protocol:...} (not registered by the modules imported above)
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(
            config_name="qwen_2_5_vl_7b_async",
            overrides=[
                "actor_rollout_ref.model.path=tiny",
                f"actor_rollout_ref.actor.kl_loss_coef={KL_COEF}",
                f"vsearch.variant={variant}",
                *extra,
            ],
        )
    OmegaConf.resolve(cfg)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def _rank_batch(lengths, advs, seed) -> DataProto:
    g = torch.Generator().manual_seed(seed)
    n = len(lengths)
    mask = torch.zeros(n, R, dtype=torch.int64)
    for i, k in enumerate(lengths):
        mask[i, :k] = 1
    base = -torch.rand(n, R, generator=g) - 0.1
    return DataProto.from_dict(
        tensors={
            "responses": torch.ones(n, R, dtype=torch.int64),
            "input_ids": torch.ones(n, R + 2, dtype=torch.int64),
            "attention_mask": torch.ones(n, R + 2, dtype=torch.int64),
            "position_ids": torch.arange(R + 2).repeat(n, 1),
            "response_mask": mask,
            "old_log_probs": base.clone(),
            "advantages": torch.tensor(advs).unsqueeze(-1) * mask,
            "ref_log_prob": base - 0.3 * torch.rand(n, R, generator=g),
        },
        meta_info={"temperature": 1.0, "global_token_num": [R + 2] * n},
    )


def _as_from_ray(data: DataProto) -> DataProto:
    """``data`` as a worker receives it from Ray: pickled by verl's ``DataProto.__getstate__``, which
    consolidates the TensorDict (every tensor a view of one buffer)."""
    out = pickle.loads(pickle.dumps(data))
    assert out.batch.is_consolidated()
    return out


def _x(old_log_probs: torch.Tensor) -> torch.Tensor:
    """d log_prob / d theta per token (from a column update_policy keeps)."""
    return torch.sin(37.0 * old_log_probs)


class Theta(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.theta = torch.nn.Parameter(torch.zeros(()))


def _actor(cfg, module):
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    actor = DataParallelPPOActor(cfg, module, torch.optim.SGD(module.parameters(), lr=0.0))

    def forward(micro_batch, temperature, calculate_entropy=False):
        # the policy's log-probs: a differentiable function of theta (stands in for the model forward)
        return None, micro_batch["old_log_probs"] + module.theta * _x(micro_batch["old_log_probs"])

    actor._forward_micro_batch = forward
    grads = []
    real_step = actor._optimizer_step

    def step():
        grads.append(module.theta.grad.detach().clone())
        return real_step()

    actor._optimizer_step = step
    return actor, grads


def _worker(cls, actor):
    w = object.__new__(cls)
    w._is_actor, w._is_offload_param, w._is_offload_optimizer = True, False, False
    w.ulysses_sharding_manager = contextlib.nullcontext()
    w.actor, w._world_size = actor, 1
    w.flops_counter = SimpleNamespace(estimate_flops=lambda tokens, seconds: (0.0, 1.0))
    w.config = OmegaConf.create({"actor": {"ppo_epochs": 1}})
    w.actor_lr_scheduler = SimpleNamespace(get_last_lr=lambda: [1e-6], step=lambda: None)
    return w


def eq2_by_hand(batches: list[DataProto]) -> torch.Tensor:
    """d/dtheta of Eq. 2 at theta = 0: mean over the samples with trained tokens of each one's token mean
    of (clipped-ratio policy loss + beta * low-var KL)."""
    theta = torch.zeros((), requires_grad=True)
    per_sample = []
    for b in batches:
        t = b.batch
        for i in range(len(b)):
            m = t["response_mask"][i].bool()
            if not m.any():
                continue
            lp = t["old_log_probs"][i] + theta * _x(t["old_log_probs"][i])
            ratio = torch.exp(lp - lp.detach())  # on-policy: the old log-prob is the current one
            pg = -t["advantages"][i] * ratio
            kl = kl_penalty(lp, t["ref_log_prob"][i], kl_penalty="low_var_kl")
            per_sample.append((pg + KL_COEF * kl)[m].mean())
    torch.stack(per_sample).mean().backward()
    return theta.grad


def test_actor_loss_is_eq2_with_padding_and_masked_rows(gloo, monkeypatch):
    from verl.workers import fsdp_workers

    monkeypatch.setattr(
        fsdp_workers,
        "get_torch_device",
        lambda: SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0),
    )
    cfg = _actor_config()
    assert cfg.use_kl_loss and cfg.kl_loss_type == "low_var_kl" and cfg.entropy_coeff == 0
    batches = [_rank_batch(lengths, advs, seed) for seed, (lengths, advs) in enumerate(RANKS)]
    valid = sum(int((b.batch["response_mask"].sum(-1) > 0).sum()) for b in batches)
    assert valid == 3
    worker_cls = on_policy_worker(fsdp_workers.AsyncActorRolloutRefWorker)
    rank_grads, metrics = [], []
    for b in batches:
        b.meta_info[EQ2_META_KEY] = {"variant": "paper", "valid_rows": valid, "dp_size": len(RANKS)}  # the trainer's
        actor, grads = _actor(_actor_config(), Theta())
        out = _worker(worker_cls, actor).update_actor(_as_from_ray(b))  # the rank's share, through Ray
        assert len(grads) == 1, "one optimizer step"
        rank_grads.append(grads[0])
        metrics.append(out.meta_info["metrics"])
    got = torch.stack(rank_grads).mean()  # FSDP averages the ranks' gradients
    want = eq2_by_hand(batches)
    assert torch.isfinite(got) and got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    for m in metrics:
        for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm"):
            vals = m[key] if isinstance(m[key], list) else [m[key]]
            assert all(v == v for v in vals), f"{key} is NaN"


def test_verl_seq_mean_token_mean_is_not_eq2_here(gloo, monkeypatch):
    """Why the recipe does not use verl's seq-mean-token-mean: on the same batch (dynamic micro-batches, as
    before) a padding-only micro-batch makes the loss NaN, or real rows sharing a micro-batch with padding
    are over-weighted."""
    from verl.workers import fsdp_workers

    monkeypatch.setattr(
        fsdp_workers,
        "get_torch_device",
        lambda: SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0),
    )
    batches = [_rank_batch(lengths, advs, seed) for seed, (lengths, advs) in enumerate(RANKS)]
    want = eq2_by_hand(batches)
    grads_all = []
    for b in batches:
        cfg = _actor_config()
        object.__setattr__(cfg, "loss_agg_mode", "seq-mean-token-mean")
        object.__setattr__(cfg, "use_dynamic_bsz", False)
        cfg.ppo_mini_batch_size = cfg.ppo_micro_batch_size_per_gpu = len(b)  # one micro-batch per rank
        actor, grads = _actor(cfg, Theta())
        actor.update_policy(b)
        grads_all.append(grads[0])
    got = torch.stack(grads_all).mean()
    assert not torch.isfinite(got) or got.item() != pytest.approx(want.item(), rel=1e-3)


def test_eq2_weights_zero_rows_and_empty_batch():
    mask = torch.tensor([[1, 1, 0, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    data = DataProto.from_dict(tensors={"response_mask": mask})
    w = eq2_weights(data, grad_accum=3, valid_rows=4, dp_size=2, scale=4)
    assert torch.equal(w[1], torch.zeros(4))
    assert w[0, 0].item() == pytest.approx(4 * 3 * 2 / 4 / 2) and w[0, 2] == 0
    assert w[2, 0].item() == pytest.approx(4 * 3 * 2 / 4 / 4)
    assert not eq2_weights(data, 3, 0, 2, 4).any()


def test_eq2_weights_reach_the_actor_of_a_batch_delivered_by_ray():
    """The weights ``apply_eq2`` sets are the ones verl's ``update_actor`` trains with (it moves the batch with
    ``data.to``), also for a batch that came through Ray (a consolidated TensorDict, whose buffer a plain key
    assignment leaves stale: the weights came back as the int mask's bytes, ~1e-45, and every gradient was 0)."""
    from recipe.vsearch.on_policy import apply_eq2

    cfg = _actor_config()
    b = _rank_batch([3, 5, 0], [1.0, -1.0, 0.5], seed=3)
    b.meta_info[EQ2_META_KEY] = {"valid_rows": 2, "dp_size": 2}
    mask = b.batch["response_mask"].clone()
    want = eq2_weights(b, len(b) // cfg.ppo_micro_batch_size_per_gpu, 2, 2, R)
    data = _as_from_ray(b)
    apply_eq2(SimpleNamespace(config=cfg), data)
    moved = data.to("cpu").select(batch_keys=["response_mask", "advantages"])
    assert torch.equal(moved.batch["response_mask"], want)
    assert moved.batch["response_mask"][0, 0].item() == pytest.approx(R * 3 * 2 / 2 / 3)
    for i, micro in enumerate(moved.split(1)):  # update_policy's micro-batches
        assert torch.equal(micro.to("cpu").batch["response_mask"][0], want[i])
    assert torch.equal(data.batch["advantages"], b.batch["advantages"]) and torch.equal(mask, b.batch["response_mask"])


def token_mean_by_hand(batches: list[DataProto], partitions: list[list[list[int]]]) -> torch.Tensor:
    """d/dtheta at theta = 0 of the fork's loss: per rank, the sum over its micro-batches ``m`` of
    ``|m| / N * (token mean over m of (policy loss + beta * low-var KL))``; FSDP averages the ranks."""
    theta = torch.zeros((), requires_grad=True)
    per_rank = []
    for b, parts in zip(batches, partitions):
        t, total = b.batch, 0.0
        for idx in parts:
            m = t["response_mask"][idx].bool()
            lp = t["old_log_probs"][idx] + theta * _x(t["old_log_probs"][idx])
            ratio = torch.exp(lp - lp.detach())
            pg = -t["advantages"][idx] * ratio
            kl = kl_penalty(lp, t["ref_log_prob"][idx], kl_penalty="low_var_kl")
            total = total + (pg + KL_COEF * kl)[m].mean() * len(idx) / len(b)
        per_rank.append(total)
    torch.stack(per_rank).mean().backward()
    return theta.grad


@pytest.mark.parametrize("max_tokens", [10_000, 2 * (R + 2)])
def test_original_loss_is_verls_token_mean_over_dynamic_micro_batches(gloo, monkeypatch, max_tokens):
    """``vsearch.variant=original``: the worker leaves verl's loss alone (no Eq. 2 weights) and verl trains with the
    fork's ``token-mean`` + dynamic batch size: each micro-batch's token mean scaled by its share of the rank's rows,
    with one micro-batch per rank and with several (``ppo_max_token_len_per_gpu`` two rows long)."""
    from verl.utils.seqlen_balancing import prepare_dynamic_batch
    from verl.workers import fsdp_workers

    monkeypatch.setattr(
        fsdp_workers,
        "get_torch_device",
        lambda: SimpleNamespace(max_memory_allocated=lambda: 0, max_memory_reserved=lambda: 0),
    )
    extra = f"actor_rollout_ref.actor.ppo_max_token_len_per_gpu={max_tokens}"
    cfg = _actor_config("original", extra)
    assert cfg.loss_agg_mode == "token-mean" and cfg.use_dynamic_bsz is True
    ranks = [([3, 4, 6], [1.0, -2.0, 0.5]), ([5, 2, 1], [-0.5, 2.0, 1.0])]  # every row trained (no masked rows)
    batches = [_rank_batch(lengths, advs, seed) for seed, (lengths, advs) in enumerate(ranks)]
    worker_cls = on_policy_worker(fsdp_workers.AsyncActorRolloutRefWorker)
    rank_grads, partitions = [], []
    for b in batches:
        _, parts = prepare_dynamic_batch(b, max_token_len=max_tokens)  # the partition update_policy will use
        partitions.append(parts)
        b.meta_info[EQ2_META_KEY] = {"variant": "original", "valid_rows": 6, "dp_size": len(ranks)}
        actor, grads = _actor(_actor_config("original", extra), Theta())
        data = _as_from_ray(b)
        _worker(worker_cls, actor).update_actor(data)
        assert len(grads) == 1, "one optimizer step"
        assert torch.equal(data.batch["response_mask"], b.batch["response_mask"]), "no Eq. 2 weights"
        rank_grads.append(grads[0])
    assert max(len(p) for p in partitions) == (1 if max_tokens > 100 else 2)
    got, want = torch.stack(rank_grads).mean(), token_mean_by_hand(batches, partitions)
    assert torch.isfinite(got) and got.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    assert got.item() != pytest.approx(eq2_by_hand(batches).item(), rel=1e-3)  # a different loss than paper's


def test_the_worker_refuses_a_loss_of_the_other_variant():
    from recipe.vsearch.on_policy import apply_loss

    b = _rank_batch([3, 5], [1.0, -1.0], seed=4)
    b.meta_info[EQ2_META_KEY] = {"variant": "paper", "valid_rows": 2, "dp_size": 1}
    with pytest.raises(ValueError, match="does not belong to vsearch.variant=paper"):
        apply_loss(SimpleNamespace(config=_actor_config("original")), b)
