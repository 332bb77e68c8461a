"""Fully on-policy actor updates (D.1): exactly one optimizer step per training step.

verl 0.7's ``DataParallelPPOActor.update_policy`` splits each rank's share of the batch into
mini-batches of ``actor.ppo_mini_batch_size`` (normalised per rank at start-up:
``ppo_mini_batch_size * rollout.n / dp``) and takes one optimizer step per mini-batch. With this
recipe the number of rows per step is not fixed: an in-loop episode becomes 0..6 rows. With
``ppo_mini_batch_size = 24`` a step with more than 24 × 8 rows therefore made two or more optimizer
steps, the later ones off-policy.

The fix is by construction, not by a larger constant: the recipe's actor worker sets the actor's
per-rank mini-batch to the rank's *whole* share of the balanced batch just before every update, so
``update_policy`` sees one mini-batch (``on_policy`` in verl's own code: the ratio's denominator is
the detached current log-prob) and steps the optimizer once, and verl's loss scaling
(``rows in micro-batch / ppo_mini_batch_size`` with dynamic batch sizes) weights the micro-batches
by their share of the rank's rows. ``ppo_epochs`` must be 1 (checked by
:mod:`recipe.vsearch.settings`). The batch is padded to a multiple of the data-parallel size
(:func:`recipe.vsearch.episodes.finalize_batch`) and balanced with equal row counts per rank, so
every rank steps once on the same number of rows.

:func:`on_policy_worker` derives that worker from verl's own (``AsyncActorRolloutRefWorker`` of
``verl.workers.fsdp_workers``); the recipe's TaskRunner (``main.py``) registers it in place of
verl's. ``update_actor`` and ``init_model`` change (the latter makes the actor and the reference rebuild the
rows' pixel values from image references, :mod:`recipe.vsearch.image_inputs`); their dispatch registrations are
copied from verl's methods.
The loss aggregation follows ``vsearch.variant`` (:func:`apply_loss`): under ``original`` verl's own
``token-mean`` over dynamic micro-batches, untouched (the fork's loss: each micro-batch's token mean scaled by its
share of the rank's rows); under ``paper`` the paper's Eq. 2 (:func:`eq2_weights`).

Because the update is on-policy, verl's update never reads the old log-probs: it takes ``log_prob.detach()`` of its
own forward. The trainer therefore skips the actor's old-log-prob pass (a forward of the policy over every row)
whenever :func:`old_log_prob_needed` finds nothing else that reads them, and the worker's ``update_actor`` checks
the on-policy case before verl's update runs (:func:`without_old_log_probs`).
"""

from __future__ import annotations

from typing import Any

from verl.single_controller.base.decorator import MAGIC_ATTR

# the loss aggregation the Eq. 2 weights are made for, and each variant's (checked at start-up by RunSettings)
from .image_inputs import pixel_cache, rebuild_pixels_in
from .padding import trim_padding_in
from .protocols import EQ2_LOSS_AGG_MODE, PROTOCOLS

_CACHE: dict[type, type] = {}
#: ``meta_info`` key of the update batch: ``{"variant": str, "valid_rows": int, "dp_size": int}`` over the whole
#: batch (set by the recipe's trainer; every rank receives the same meta_info)
EQ2_META_KEY = "vsearch_eq2"
#: the variant each loss aggregation belongs to
_VARIANT_OF_MODE = {p.loss_agg_mode: name for name, p in PROTOCOLS.items()}


def eq2_weights(data: Any, grad_accum: int, valid_rows: int, dp_size: int, scale: float) -> Any:
    """Response-mask weights that make verl 0.7's actor loss equal the paper's Eq. 2.

    Eq. 2 is a mean over the batch's samples of each sample's token mean:
    ``L = 1/V * sum_i 1/|o_i| * sum_t l_it`` over the ``V`` samples with at least one trained token
    (padding rows and rows of API-failed episodes have an all-zero mask and are not samples).

    verl 0.7 cannot express this with ``seq-mean-token-mean``: each micro-batch is averaged over *its own*
    non-masked rows and then scaled by its row count (dynamic batches) or ``1/grad_accum``, so a micro-batch
    holding one real row and one pad row weights that real row double, and an all-masked micro-batch is
    0/0 = NaN. With ``loss_agg_mode=seq-mean-token-sum-norm`` and fixed micro-batches, every row's
    contribution is ``sum_t l_it * mask_it / scale * 1/grad_accum`` (linear, no per-micro-batch denominator),
    and FSDP averages the ranks' gradients (``1/dp``). A mask weight of
    ``scale * grad_accum * dp / (V * |o_i|)`` on the trained tokens of row ``i`` (0 elsewhere) therefore gives
    exactly Eq. 2, for the policy loss and the KL loss alike; masked rows contribute exact zeros.
    Returns a float tensor shaped like ``response_mask``.
    """
    import torch

    mask = data.batch["response_mask"]
    lengths = mask.sum(-1, keepdim=True).to(torch.float32)
    if valid_rows <= 0:
        return torch.zeros_like(mask, dtype=torch.float32)
    per_row = float(scale) * grad_accum * dp_size / valid_rows / lengths.clamp(min=1.0)
    return mask.to(torch.float32) * per_row


def apply_eq2(actor: Any, data: Any) -> None:
    """Replace ``data``'s response mask by :func:`eq2_weights` for ``actor``'s next ``update_policy``.
    Needs ``use_dynamic_bsz=False`` and ``loss_agg_mode=seq-mean-token-sum-norm`` (see the function above)."""
    cfg = actor.config
    if cfg.loss_agg_mode != EQ2_LOSS_AGG_MODE or cfg.use_dynamic_bsz:
        raise ValueError(
            f"the Eq. 2 loss needs actor.loss_agg_mode={EQ2_LOSS_AGG_MODE} and actor.use_dynamic_bsz="
            f"False, got {cfg.loss_agg_mode} / {cfg.use_dynamic_bsz}"
        )
    mask = data.batch["response_mask"]
    meta = data.meta_info.get(EQ2_META_KEY) or {}
    valid = int(meta.get("valid_rows", int((mask.sum(-1) > 0).sum())))
    dp = int(meta.get("dp_size", 1))
    grad_accum = len(data) // cfg.ppo_micro_batch_size_per_gpu
    scale = cfg.loss_scale_factor if cfg.loss_scale_factor is not None else mask.shape[-1]
    weights = eq2_weights(data, grad_accum, valid, dp, scale)
    # The batch a worker gets from Ray is a *consolidated* TensorDict (verl's DataProto.__getstate__: every
    # tensor a view of one buffer). With tensordict 0.10 setting a key does not update that buffer, and
    # verl's update_actor (data.to("cpu")) rebuilds every tensor from it: the weights would come back as the
    # old int64 mask's bytes read as float32 (~1e-45), a zero loss and a zero gradient. A shallow copy (no
    # tensor is copied) is an ordinary TensorDict, so the new weights are the ones the actor trains with.
    data.batch = data.batch.copy()
    data.batch["response_mask"] = weights


def apply_loss(actor: Any, data: Any) -> str:
    """Prepare ``data`` for the loss of the run's variant; returns the variant. ``original``: nothing to do
    (verl's ``token-mean`` with dynamic micro-batches is the fork's loss); ``paper``: :func:`apply_eq2`. The
    actor's ``loss_agg_mode`` must be the variant's (the trainer's ``meta_info`` names the variant)."""
    cfg = actor.config
    variant = _VARIANT_OF_MODE.get(cfg.loss_agg_mode)
    wanted = (data.meta_info.get(EQ2_META_KEY) or {}).get("variant", variant)
    if variant is None or wanted != variant:
        raise ValueError(
            f"actor.loss_agg_mode={cfg.loss_agg_mode} does not belong to vsearch.variant={wanted} "
            f"(recipe.vsearch.protocols.PROTOCOLS: {_VARIANT_OF_MODE})"
        )
    if variant == "paper":
        apply_eq2(actor, data)
    elif cfg.use_dynamic_bsz is not PROTOCOLS[variant].use_dynamic_bsz:
        raise ValueError(
            f"vsearch.variant={variant} trains with actor.use_dynamic_bsz={PROTOCOLS[variant].use_dynamic_bsz}"
        )
    return variant


def set_whole_batch(actor: Any, data: Any) -> int:
    """Make ``actor``'s next ``update_policy(data)`` a single mini-batch (one optimizer step).
    Returns the mini-batch size (this rank's rows)."""
    n = len(data)
    if n <= 0:
        raise ValueError("the actor update got an empty batch")
    cfg = actor.config
    if not cfg.use_dynamic_bsz and n % cfg.ppo_micro_batch_size_per_gpu:
        raise ValueError(
            f"{n} rows per rank are not a multiple of actor.ppo_micro_batch_size_per_gpu="
            f"{cfg.ppo_micro_batch_size_per_gpu} (use actor.use_dynamic_bsz=True, the recipe's default)"
        )
    cfg.ppo_mini_batch_size = n
    return n


#: the columns the update reads that the skipped pass would have made (``old_log_prob_needed``)
OLD_LOG_PROBS = "old_log_probs"


def old_log_prob_needed(config: Any) -> str | None:
    """Why a training step needs the actor's old-log-prob pass, or None when verl 0.7's update provably never
    reads its result, so that the pass (a full forward of the policy over every row) can be skipped.

    The recipe's worker makes every update a single mini-batch (:func:`set_whole_batch`); with
    ``actor.ppo_epochs == 1`` verl's ``DataParallelPPOActor.update_policy`` is then ``on_policy`` and uses
    ``log_prob.detach()`` of its own forward as the old log-probs (``dp_actor.py``), unless
    ``actor.use_rollout_log_probs``. Outside the update, old log-probs are read by ``apply_kl_penalty``
    (``algorithm.use_kl_in_reward``) and by rollout correction (``algorithm.rollout_correction.*``, which the
    recipe rejects at start-up). The pass also gave the ``actor/entropy`` metric: verl's update logs it from its
    own forward with ``actor.calculate_entropy=True`` (off by default, see the README)."""
    actor = config.actor_rollout_ref.actor
    if int(actor.get("ppo_epochs", 1)) != 1:
        return f"actor_rollout_ref.actor.ppo_epochs={actor.ppo_epochs} (later epochs are off-policy)"
    if actor.get("use_rollout_log_probs", False):
        return "actor_rollout_ref.actor.use_rollout_log_probs=True"
    if config.algorithm.get("use_kl_in_reward", False):
        return "algorithm.use_kl_in_reward=True (apply_kl_penalty reads the old log-probs)"
    corr = config.algorithm.get("rollout_correction", None) or {}
    for key in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold", "bypass_mode"):
        if corr.get(key, None):
            return f"algorithm.rollout_correction.{key}"
    if str(config.trainer.get("use_legacy_worker_impl", "auto")) == "disable":
        return "trainer.use_legacy_worker_impl=disable (not the recipe's worker)"
    return None


def without_old_log_probs(actor: Any, data: Any) -> None:
    """Let verl's ``update_policy`` run on ``data`` without the old-log-prob pass, after checking that it is the
    on-policy case (:func:`old_log_prob_needed`): one mini-batch (:func:`set_whole_batch` came first), one epoch.
    The column verl selects is filled with NaN: the update never reads it, and if it did the loss would be NaN,
    not silently wrong."""
    import torch

    cfg = actor.config
    problems = []
    if int(cfg.ppo_epochs) != 1:
        problems.append(f"ppo_epochs={cfg.ppo_epochs}")
    if cfg.ppo_mini_batch_size < len(data):
        problems.append(f"ppo_mini_batch_size={cfg.ppo_mini_batch_size} < {len(data)} rows")
    if getattr(cfg, "use_rollout_log_probs", False):
        problems.append("use_rollout_log_probs=True")
    if problems:
        raise ValueError(
            "the update batch has no old log-probs but the update is not on-policy (" + ", ".join(problems) + "); "
            "the trainer skips the old-log-prob pass only when recipe.vsearch.on_policy.old_log_prob_needed allows it"
        )
    responses = data.batch["responses"]
    data.batch = data.batch.copy()  # a consolidated TensorDict from Ray (see apply_eq2)
    data.batch[OLD_LOG_PROBS] = torch.full(responses.shape, float("nan"), dtype=torch.float32)


def on_policy_worker(worker_cls: Any) -> Any:
    """A subclass of verl's actor/rollout worker whose ``update_actor`` trains on the whole batch."""
    if worker_cls in _CACHE:
        return _CACHE[worker_cls]
    base_update = worker_cls.update_actor
    if not hasattr(base_update, MAGIC_ATTR):
        raise TypeError(f"{worker_cls.__name__}.update_actor is not a registered worker method")

    def update_actor(self: Any, data: Any) -> Any:
        set_whole_batch(self.actor, data)
        apply_loss(self.actor, data)
        if OLD_LOG_PROBS not in data.batch.keys():  # the trainer skipped the pass (old_log_prob_needed)
            without_old_log_probs(self.actor, data)
        output = base_update(self, data)
        # the step's pixel rebuilds in this worker (the reference pass and this update): cache hits, misses, seconds
        metrics = output.meta_info.get("metrics") if output is not None else None
        if isinstance(metrics, dict):
            metrics.update(pixel_cache().step_metrics())
        return output

    update_actor.__doc__ = (
        "verl's update_actor with the mini-batch set to this rank's whole batch (one step), "
        "the loss of the run's variant (apply_loss), and no old-log-prob pass needed (without_old_log_probs)."
    )
    setattr(update_actor, MAGIC_ATTR, dict(getattr(base_update, MAGIC_ATTR)))
    base_init = worker_cls.init_model

    def init_model(self: Any) -> Any:
        out = base_init(self)
        # training rows carry image references: the actor and the reference rebuild the pixel values of each
        # micro-batch where the model runs (recipe.vsearch.image_inputs)
        # on the padded path (no remove-padding) each micro-batch is also cut to its rows' length (recipe.vsearch.padding)
        for policy in (getattr(self, "actor", None), getattr(self, "ref_policy", None)):
            if policy is not None:
                rebuild_pixels_in(policy, getattr(self, "processor", None))
                trim_padding_in(policy)
        return out

    init_model.__doc__ = (
        "verl's init_model; then the actor and the reference rebuild pixel values from references and, on the padded "
        "path, trim each micro-batch to its rows."
    )
    setattr(init_model, MAGIC_ATTR, dict(getattr(base_init, MAGIC_ATTR)))
    members = {"update_actor": update_actor, "init_model": init_model, "__module__": __name__}
    cls = type(f"OnPolicy{worker_cls.__name__}", (worker_cls,), members)
    _CACHE[worker_cls] = cls
    return cls


def install(role_worker_mapping: dict, actor_rollout_cls: type) -> type:
    """Replace verl's actor/rollout worker in a TaskRunner's ``role_worker_mapping`` (in place) by its
    on-policy subclass; returns the subclass (verl also builds the reference worker from it)."""
    import ray
    from verl.trainer.ppo.ray_trainer import Role

    cls = on_policy_worker(actor_rollout_cls)
    for role in (Role.ActorRollout, Role.ActorRolloutRef):
        if role in role_worker_mapping:
            role_worker_mapping[role] = ray.remote(cls)
    return cls
