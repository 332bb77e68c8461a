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

``algorithm.subagent_advantage_estimator`` (the fork's key and names; Table 3's "w/o GN"):

* ``global_norm`` (default): ``(r - mean) / (std + eps)`` over the population above, computed as
  ``algorithm.inloop_norm`` says: ``original`` (the fork: ``np.std``, population std; the division by the std is
  kept when ``norm_adv_by_std_in_grpo`` is off; a population of one call gets 0) or ``paper`` (torch's unbiased
  std, ``norm_adv_by_std_in_grpo`` respected, fewer than two samples: mean 0, std 1);
* ``None`` (the fork's ``null``): every in-loop call is a GRPO group of its own (advantage = score);
* ``no_global_norm``: the raw reward ``r`` (the fork's ``adv_new[idx] = reward``);
* ``broadcast`` / ``broadcast_tool_only``: the advantage of the sample's *episode*: GRPO of the episodes' answer
  correctness c within the ``n`` episodes of one QA item (the fork's vReasoner rows, grouped by uid), times the
  sample's tool gate for ``broadcast_tool_only``. Needs ``episode_ids`` / ``episode_correct`` (and
  ``tool_gate``), which the recipe's trainer passes (:func:`episode_advantages`).

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
#: ``algorithm.subagent_advantage_estimator`` (the fork's names)
SUBAGENT_ESTIMATORS = ("global_norm", "no_global_norm", "broadcast", "broadcast_tool_only", None)
#: ``algorithm.inloop_norm``: how ``global_norm`` computes (``vsearch.variant``; absent: the default variant's)
INLOOP_NORMS = ("original", "paper")


def episode_advantages(
    episode_correct: dict[str, tuple[str, bool]], by_std: bool = True, epsilon: float = 1e-6
) -> dict[str, float]:
    """GRPO of the episodes' answer correctness within each QA item: ``{episode id: advantage}`` from
    ``{episode id: (QA item uid, c)}``. As verl's ``compute_grpo_outcome_advantage`` (the fork's vReasoner rows):
    unbiased std, a singleton group has mean 0 and std 1."""
    groups: dict[str, list[float]] = {}
    for group, correct in episode_correct.values():
        groups.setdefault(group, []).append(1.0 if correct else 0.0)
    stats = {}
    for group, cs in groups.items():
        t = torch.tensor(cs)
        stats[group] = (torch.tensor(0.0), torch.tensor(1.0)) if len(cs) == 1 else (t.mean(), t.std())
    out = {}
    for ep, (group, correct) in episode_correct.items():
        mean, std = stats[group]
        centred = (1.0 if correct else 0.0) - mean
        out[ep] = float(centred / (std + epsilon) if by_std else centred)
    return out


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
    episode_ids: np.ndarray | None = None,
    episode_correct: dict[str, tuple[str, bool]] | None = None,
    tool_gate: np.ndarray | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Hybrid GRPO advantages, ``(advantages, returns)`` both of shape ``(bs, response_length)``.

    ``config`` is ``algorithm`` (verl's ``AlgoConfig`` or the DictConfig); read keys:
    ``norm_adv_by_std_in_grpo`` (default True), ``inloop_norm_scope`` (default ``inloop``),
    ``subagent_advantage_estimator`` (default ``global_norm``) and ``inloop_norm`` (default ``original``).
    ``episode_ids`` (per row), ``episode_correct`` and ``tool_gate`` (per row) are needed by ``broadcast*`` only.
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
    subagent = _cfg_get(config, "subagent_advantage_estimator", SUBAGENT_ESTIMATORS[0])
    if subagent not in SUBAGENT_ESTIMATORS:
        raise ValueError(
            f"algorithm.subagent_advantage_estimator must be one of {SUBAGENT_ESTIMATORS}, got {subagent!r}"
        )
    norm = _cfg_get(config, "inloop_norm", INLOOP_NORMS[0])
    if norm not in INLOOP_NORMS:
        raise ValueError(f"algorithm.inloop_norm must be one of {INLOOP_NORMS}, got {norm!r}")

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
            sel = torch.as_tensor(in_rows)
            if subagent is not None and subagent.startswith("broadcast"):
                normed = _broadcast(in_rows, episode_ids, episode_correct, tool_gate, subagent, by_std, epsilon)
            elif subagent == "no_global_norm":
                normed = scores[sel]
            elif subagent is None:  # verl's GRPO singleton: mean 0, std 1
                normed = scores[sel] / (1.0 + epsilon) if by_std else scores[sel]
            else:
                valid = (response_mask.sum(dim=-1) > 0).cpu().numpy()
                population = np.flatnonzero(valid & (inloop if scope == "inloop" else np.ones(bs, dtype=bool)))
                pop = scores[torch.as_tensor(population)] if population.size else None
                if norm == "original" and pop is not None:  # the fork: np.mean / np.std, always divided
                    normed = (scores[sel] - pop.mean()) / (pop.std(correction=0) + epsilon)
                else:
                    if pop is not None and population.size >= 2:
                        mean, std = pop.mean(), pop.std()
                    else:
                        mean, std = torch.tensor(0.0), torch.tensor(1.0)
                    centred = scores[sel] - mean
                    normed = centred / (std + epsilon) if by_std else centred
            advantages[sel] = normed.unsqueeze(-1).to(advantages.dtype) * response_mask[sel]
    advantages = advantages * response_mask
    return advantages, advantages


def _broadcast(
    in_rows: Any,
    episode_ids: Any,
    episode_correct: dict[str, tuple[str, bool]] | None,
    tool_gate: Any,
    kind: str,
    by_std: bool,
    epsilon: float,
) -> torch.Tensor:
    if episode_ids is None or episode_correct is None or (kind == "broadcast_tool_only" and tool_gate is None):
        raise ValueError(
            f"subagent_advantage_estimator={kind} needs episode_ids and episode_correct"
            + (" and tool_gate" if kind == "broadcast_tool_only" else "")
            + " (the recipe's trainer passes them)"
        )
    per_episode = episode_advantages(episode_correct, by_std, epsilon)
    values = []
    for row in in_rows:
        v = per_episode[str(episode_ids[row])]
        if kind == "broadcast_tool_only":
            v *= float(tool_gate[row])
        values.append(v)
    return torch.tensor(values, dtype=torch.float32)
