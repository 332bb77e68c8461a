"""``vsearch_hybrid_grpo``: the advantage estimator of the hybrid in-loop / out-of-loop RL (§4.1).

* **Out-of-loop samples** (a region description with ground-truth boxes, ``n`` rollouts of the same
  prompt sharing a ``uid``): plain GRPO, i.e. verl's own ``compute_grpo_outcome_advantage`` within
  each uid group.
* **In-loop samples** (one vSearcher call inside an API vReasoner episode; an episode yields 0–6 of
  them, and calls are not repeats of one prompt, so they form no natural groups): normalised by a
  *global* mean/std (the paper's "GN"). ``algorithm.inloop_norm_scope`` picks the population:
  ``inloop`` (default, the paper: all in-loop samples of the batch) or ``batch`` (every sample of
  the batch, in-loop and out-of-loop).

How a sample is recognised as in-loop. verl 0.7's ``compute_advantage`` passes a custom estimator
only ``token_level_rewards``, ``response_mask``, ``config`` and ``index`` (= the ``uid`` column), so
the marker travels in the uid: **an in-loop sample's uid starts with** :data:`INLOOP_UID_PREFIX`
(``"inloop-"``; e.g. ``inloop-<episode uid>-<call k>``, :func:`recipe.vsearch.rollout_fields.inloop_uid`). The
recipe's agent-loop worker assigns these uids when it expands episodes into samples. A caller that has the flags at hand (tests, a custom
``fit``) may instead pass ``is_in_loop=`` (bool array), which takes precedence.

Samples whose ``response_mask`` is all zero (in-loop samples of episodes cut by API failures, and
padding rows added to balance the batch over data-parallel ranks) are left out of the in-loop
statistics; every masked token gets advantage 0. With fewer than two in-loop samples in the
population, the mean is 0 and the std 1 (verl's GRPO convention for a singleton group).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from .rollout_fields import INLOOP_UID_PREFIX, inloop_uid, is_inloop_uid

__all__ = ["ESTIMATOR_NAME", "INLOOP_UID_PREFIX", "compute_vsearch_hybrid_advantage", "inloop_uid", "is_inloop_uid"]

ESTIMATOR_NAME = "vsearch_hybrid_grpo"
INLOOP_NORM_SCOPES = ("inloop", "batch")
DEFAULT_INLOOP_NORM_SCOPE = "inloop"


def _cfg_get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    getter = getattr(config, "get", None)
    return getter(key, default) if callable(getter) else getattr(config, key, default)


@register_adv_est(ESTIMATOR_NAME)
def compute_vsearch_hybrid_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    is_in_loop: np.ndarray | None = None,
    epsilon: float = 1e-6,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hybrid GRPO advantages, ``(advantages, returns)`` both of shape ``(bs, response_length)``.

    ``config`` is ``algorithm`` (verl's ``AlgoConfig`` or the DictConfig); read keys:
    ``norm_adv_by_std_in_grpo`` (default True) and ``inloop_norm_scope`` (default ``inloop``).
    """
    bs = token_level_rewards.shape[0]
    if index is None:
        raise ValueError(f"{ESTIMATOR_NAME} needs the uid column (index); the batch has none")
    if len(index) != bs:
        raise ValueError(f"{ESTIMATOR_NAME}: {len(index)} uids for a batch of {bs}")
    scope = _cfg_get(config, "inloop_norm_scope", DEFAULT_INLOOP_NORM_SCOPE)
    if scope not in INLOOP_NORM_SCOPES:
        raise ValueError(f"algorithm.inloop_norm_scope must be one of {INLOOP_NORM_SCOPES}, got {scope!r}")
    by_std = bool(_cfg_get(config, "norm_adv_by_std_in_grpo", True))

    if is_in_loop is None:
        inloop = np.array([is_inloop_uid(u) for u in index], dtype=bool)
    else:
        inloop = np.asarray(is_in_loop, dtype=bool)
        if inloop.shape != (bs,):
            raise ValueError(f"is_in_loop must have shape ({bs},), got {inloop.shape}")

    # out-of-loop: verl's GRPO, computed on the out-of-loop rows only so in-loop rows never join a group
    advantages = torch.zeros_like(token_level_rewards)
    out_rows = np.flatnonzero(~inloop)
    if out_rows.size:
        sel = torch.as_tensor(out_rows)
        adv_out, _ = compute_grpo_outcome_advantage(
            token_level_rewards=token_level_rewards[sel],
            response_mask=response_mask[sel],
            index=np.asarray(index, dtype=object)[out_rows],
            epsilon=epsilon,
            norm_adv_by_std_in_grpo=by_std,
        )
        advantages[sel] = adv_out

    in_rows = np.flatnonzero(inloop)
    if in_rows.size:
        with torch.no_grad():
            scores = token_level_rewards.sum(dim=-1)
            valid = (response_mask.sum(dim=-1) > 0).cpu().numpy()
            population = np.flatnonzero(valid & (inloop if scope == "inloop" else np.ones(bs, dtype=bool)))
            if population.size >= 2:
                pop = scores[torch.as_tensor(population)]
                mean, std = pop.mean(), pop.std()
            else:
                mean, std = torch.tensor(0.0), torch.tensor(1.0)
            sel = torch.as_tensor(in_rows)
            centred = scores[sel] - mean
            normed = centred / (std + epsilon) if by_std else centred
            advantages[sel] = normed.unsqueeze(-1).to(advantages.dtype) * response_mask[sel]
    advantages = advantages * response_mask
    return advantages, advantages
