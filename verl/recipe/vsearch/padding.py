"""The padded path (no flash-attn, ``use_remove_padding=False``): each micro-batch trimmed to its own rows' length.

verl 0.7 pads every row of a step to one width, ``W = rollout.prompt_length + response_length`` (D.1: 8,192 +
9,216 = 17,408; prompts left-padded, responses right-padded). With remove-padding (flash-attn's varlen kernels) the
model sees only the real tokens; on the padded path (``attn_implementation=sdpa`` or ``eager``, the documented switch
when flash-attn is missing, and the CPU runs) ``DataParallelPPOActor._forward_micro_batch`` runs the whole ``k x W``
micro-batch and computes full-vocabulary logits at every position, while dynamic micro-batches are packed by *real*
tokens (``seqlen_balancing.rearrange_micro_batches``). A reference micro-batch of 28,672 real tokens (3-5 rows of
6-10K) then computes 50-90K positions: 15-27 GB of bf16 logits for Qwen2.5-VL's 152,064-token vocabulary.

Two remedies, both exact (no log-prob changes beyond kernel rounding):

* :func:`trim_padding_in` wraps a policy's ``_forward_micro_batch``: the columns that are padding in *every* row of
  the micro-batch (the common left padding of the prompts, the common right padding of the responses) are cut before
  verl's forward and the response log-probs (and entropy) are padded back with zeros (masked positions, never read).
  A micro-batch of ``k`` rows then costs ``k x`` its longest row instead of ``k x W``. Position ids are sliced, not
  recomputed (Qwen2.5-VL's 4-row mrope ids keep their values), so every real token sees the same inputs.
* the log-prob passes (the reference, and the actor's when something reads old log-probs) take fixed micro-batches of
  one row (:data:`PADDED_PATH_OVERRIDES`; ``recipe.vsearch.settings`` refuses dynamic ones on the padded path): the
  log-probs of a row do not depend on its micro-batch, so this changes nothing but the memory: one trimmed row,
  at most ``W`` positions (5.3 GB of bf16 logits at D.1).

The actor's update keeps its micro-batches (under ``original`` they define the fork's token-mean loss); trimmed, each
costs its rows times its longest row. :func:`padded_positions` is the arithmetic (``tests/recipe/test_gpu_run_defects.py``
runs verl's own micro-batch split on D.1-shaped rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: the overrides the padded path needs besides the attention switch (recipe.vsearch.node_checks.SDPA_OVERRIDES):
#: the log-prob passes run one row per micro-batch
PADDED_PATH_OVERRIDES = (
    "actor_rollout_ref.ref.log_prob_use_dynamic_bsz=False",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=1",
    "actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=False",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=1",
)
#: Qwen2.5-VL's vocabulary (the logits' last dimension) and bytes per bf16 value, for the start-up estimate
QWEN2_5_VL_VOCAB = 152_064
BF16_BYTES = 2


def trimmed_columns(attention_mask: Any, response_length: int) -> tuple[int, int]:
    """``(first, response_kept)`` of a micro-batch: the first column any row attends to (all rows' prompts are
    left-padded up to it), and how many response columns hold a real token in some row (responses are right-padded)."""
    import torch

    width = int(attention_mask.shape[-1])
    prompt = width - int(response_length)
    seen = attention_mask.bool().any(dim=0)
    cols = torch.nonzero(seen, as_tuple=False).flatten()
    if cols.numel() == 0:
        return prompt, 1
    first = min(int(cols[0]), prompt)
    kept = max(int(cols[-1]) + 1 - prompt, 1)
    return first, kept


def trim_micro_batch(micro_batch: Any) -> tuple[dict, int, int]:
    """A shallow copy of ``micro_batch`` (verl's dict of tensors and non-tensors) with the columns no row needs cut
    from ``input_ids``, ``attention_mask``, ``position_ids`` (``(k, L)`` or Qwen2.5-VL's ``(k, 4, L)``) and
    ``responses``. Returns it, the original response length and the kept one."""
    responses = micro_batch["responses"]
    length = int(responses.shape[-1])
    first, kept = trimmed_columns(micro_batch["attention_mask"], length)
    prompt = int(micro_batch["input_ids"].shape[-1]) - length
    end = prompt + kept
    out = dict(micro_batch)
    out["input_ids"] = micro_batch["input_ids"][..., first:end]
    out["attention_mask"] = micro_batch["attention_mask"][..., first:end]
    out["position_ids"] = micro_batch["position_ids"][..., first:end]
    out["responses"] = responses[..., :kept]
    return out, length, kept


def _pad_back(t: Any, length: int) -> Any:
    import torch.nn.functional as F

    return None if t is None else F.pad(t, (0, length - int(t.shape[-1])))


def trim_padding_in(policy: Any) -> None:
    """Make ``policy`` (verl's ``DataParallelPPOActor``) run each micro-batch trimmed (:func:`trim_micro_batch`) on the
    padded path; nothing changes with remove-padding (verl already drops every pad there). Idempotent."""
    if getattr(policy, "_vsearch_trims_padding", False) or getattr(policy, "use_remove_padding", False):
        return
    forward = policy._forward_micro_batch

    def _forward_micro_batch(micro_batch: Any, temperature: float, calculate_entropy: bool = False) -> Any:
        trimmed, length, kept = trim_micro_batch(micro_batch)
        entropy, log_probs = forward(trimmed, temperature, calculate_entropy=calculate_entropy)
        if kept == length:
            return entropy, log_probs
        return _pad_back(entropy, length), _pad_back(log_probs, length)

    policy._forward_micro_batch = _forward_micro_batch
    policy._vsearch_trims_padding = True


def padded_positions(rows: Sequence[tuple[int, int]], width: int | None = None) -> int:
    """Positions one micro-batch computes on the padded path; ``rows`` are its rows' real ``(prompt, response)`` token
    counts. ``width`` (verl's padded row, ``W``): untrimmed, every row is that wide; None: trimmed
    (:func:`trim_micro_batch`), the micro-batch is as wide as its longest prompt plus its longest response."""
    if not rows:
        return 0
    if width is not None:
        return len(rows) * int(width)
    return len(rows) * (max(p for p, _ in rows) + max(r for _, r in rows))


def logits_gb(positions: int, vocab: int = QWEN2_5_VL_VOCAB) -> float:
    """GB of bf16 logits for ``positions`` (what verl's padded forward materialises; its gradient doubles it)."""
    return positions * vocab * BF16_BYTES / 1e9
