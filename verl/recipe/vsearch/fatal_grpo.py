"""Fatal-aware GRPO on the trainer's batch (``vsearch.fatal``; the rule: :mod:`insight_o3.protocol.fatal`).

The agent loops stop a vSearcher episode at its fatal step (K consecutive tool errors) and report, per row,
``fatal_step`` and ``fatal_from`` (the response position where the fatal step begins; :mod:`recipe.vsearch.rollout_fields`).
The reward already follows the paper's conventions (no accuracy term, process terms of the valid prefix). What is left
is done here, by the trainer, **after** the advantages (:func:`apply_fatal`):

* the advantages are computed with every row's full generation mask, so every episode, fatal or not, enters the group
  mean and standard deviation (out-of-loop: verl's GRPO within the uid group; in-loop: the global normalisation over
  the batch's in-loop rows, which leaves zero-mask rows out: masking first would drop a row fatal at its first turn
  from the statistics);
* ``fatal_mask_clamp``: a fatal row's advantage becomes ``max(A, 0)`` (each row of the hybrid batch is one vSearcher
  trajectory with its own fatal flag: an in-loop call is clamped alone, the other calls of its vReasoner episode keep
  theirs; ``docs/fidelity.md`` F rows);
* ``fatal_mask`` / ``fatal_mask_clamp``: the row's response mask is zeroed from ``fatal_from`` on (its advantages
  there too); ``hard_mask``: the whole row (the hard-masking baseline: it trains nothing).

``off`` changes nothing (no row carries a fatal step then). Rows added for the data-parallel size that copy a fatal
row (``original``'s trained padding) are treated as the row they copy.
"""

from __future__ import annotations

import numpy as np
import torch

from insight_o3.protocol.fatal import FatalMode
from verl import DataProto

from .rollout_fields import ROLE_PADDING, SampleFields


def apply_fatal(batch: DataProto, mode: FatalMode) -> dict[str, float]:
    """Clamp and mask ``batch``'s fatal rows in place (see the module doc); returns the step's metrics:
    ``vsearch/fatal_rows`` (real rows stopped at a fatal step), ``vsearch/fatal_ratio`` (of the real rows),
    ``vsearch/fatal_masked_tokens`` (generated tokens the mask took out of the loss, padding copies included: what
    the update no longer trains) and ``vsearch/fatal_clamped_rows`` (rows whose negative advantage became 0)."""
    if mode is FatalMode.OFF:
        return {}
    nt = batch.non_tensor_batch
    rows = SampleFields.from_batch(nt, len(batch), ("fatal_step", "fatal_from", "vsearch_role"))
    fatal = np.array([f.fatal_step is not None for f in rows], dtype=bool)
    real = np.array([f.role != ROLE_PADDING for f in rows], dtype=bool)
    metrics = {
        "vsearch/fatal_rows": float((fatal & real).sum()),
        "vsearch/fatal_ratio": float((fatal & real).sum() / max(int(real.sum()), 1)),
        "vsearch/fatal_masked_tokens": 0.0,
        "vsearch/fatal_clamped_rows": 0.0,
    }
    if not fatal.any():
        return metrics
    mask = batch.batch["response_mask"]
    adv, ret = batch.batch["advantages"], batch.batch["returns"]
    for i in np.flatnonzero(fatal):
        if mode.clamps and bool((adv[i] < 0).any()):
            adv[i].clamp_(min=0.0)
            ret[i].clamp_(min=0.0)
            metrics["vsearch/fatal_clamped_rows"] += 1.0
        start = 0 if mode is FatalMode.HARD_MASK else int(rows[i].fatal_from or 0)
        keep = torch.zeros_like(mask[i])
        keep[:start] = 1
        metrics["vsearch/fatal_masked_tokens"] += float((mask[i] * (1 - keep)).sum())
        mask[i] *= keep
        adv[i] *= keep.to(adv.dtype)
    return metrics
