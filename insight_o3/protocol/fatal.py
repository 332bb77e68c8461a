"""Fatal-aware GRPO (OpenSearch-VL, "Multi-Turn Search Fatal-Aware GRPO"): pure functions shared by the recipe.

A multi-turn episode that collapses into repeated tool errors keeps its valid prefix for training:

* the **fatal step** ``f_i`` is the earliest step where ``K`` consecutive tool-execution errors begin (K = 3 in the
  paper and the released workflow); ``f_i = L_i + 1`` (here: None) when there is no such run (:func:`fatal_step`);
* the **loss mask** is the generation mask times ``1[s(t) < f_i]``: the tokens of the fatal step and of every later
  step carry no gradient (Eq. fatal-mask; :func:`fatal_mask`, :func:`mask_start`);
* every episode, fatal or not, enters the group's mean and standard deviation; the advantage is the normalised
  reward ``r~_i`` for a non-fatal episode and ``max(r~_i, 0)`` for a fatal one (Eq. advantage; :func:`clamped`);
* an episode cut by the fatal condition before its answer has accuracy reward 0, and the process rewards are
  computed on its valid prefix only (the recipe's reward and the vSearcher session apply this).

:class:`FatalMode` also names the two comparisons of the paper's ablation: the fatal mask without the clamp, and the
hard-masking baseline (Vision-DeepResearch: a fatal episode trains nothing; it still enters the group statistics, as
the released trainer computes advantages before it drops such episodes). Steps are 0-based here; the paper's are
1-based (``f_i = 1`` is our ``0``). Sources and the choices the paper leaves open: ``docs/fidelity.md`` (F rows).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from .statuses import Vocabulary


class FatalMode(Vocabulary):
    """``vsearch.fatal.mode`` of the recipe."""

    OFF = "off"  # vanilla GRPO: episodes run to their end, every generated token trained
    HARD_MASK = "hard_mask"  # the baseline: a fatal episode's every token masked
    FATAL_MASK = "fatal_mask"  # the fatal mask alone (the paper's ablation row without clamping)
    FATAL_MASK_CLAMP = "fatal_mask_clamp"  # fatal mask + one-sided advantage clamp (the paper's method)

    @property
    def cuts_episodes(self) -> bool:
        """Whether an episode stops at its fatal step (every mode but ``off``: the released agent terminates after
        K consecutive bad steps, so all its ablation rows ran the same rollouts)."""
        return self is not FatalMode.OFF

    @property
    def clamps(self) -> bool:
        return self is FatalMode.FATAL_MASK_CLAMP


#: K of the paper (``tables/rl_config.tex``; the released ``_CONSECUTIVE_ERROR_THRESHOLD``)
DEFAULT_K = 3


def fatal_step(errors: Sequence[bool], k: int = DEFAULT_K) -> int | None:
    """The 0-based index of the first step of the earliest run of ``k`` consecutive tool-execution errors in
    ``errors`` (one flag per step, in order); None when there is none (the paper's ``f_i = L_i + 1``)."""
    if k < 1:
        raise ValueError(f"K must be at least 1, got {k}")
    run = 0
    for i, error in enumerate(errors):
        run = run + 1 if error else 0
        if run == k:
            return i - k + 1
    return None


def mask_start(step_starts: Sequence[int], fatal: int | None) -> int | None:
    """The response position where the fatal mask begins: where step ``fatal`` starts (``step_starts[i]``: the
    response index of step i's first generated token); None for a non-fatal episode."""
    if fatal is None:
        return None
    if not 0 <= fatal < len(step_starts):
        raise ValueError(f"fatal step {fatal} outside the episode's {len(step_starts)} steps")
    return int(step_starts[fatal])


def fatal_mask(generation_mask: Sequence[int], start: int | None) -> list[int]:
    """Eq. fatal-mask: ``M(y_t) = M_gen(y_t) * 1[s(t) < f]`` for a response whose fatal step starts at position
    ``start`` (:func:`mask_start`); observation tokens keep their 0."""
    if start is None:
        return list(generation_mask)
    return [m if t < start else 0 for t, m in enumerate(generation_mask)]


def clamped(advantage: float, fatal: bool) -> float:
    """Eq. advantage: ``max(r~, 0)`` for a fatal episode, ``r~`` otherwise."""
    return max(advantage, 0.0) if fatal else advantage


def group_advantages(
    rewards: Sequence[float], fatal: Sequence[bool], mode: FatalMode, eps: float = 1e-6
) -> list[float]:
    """The per-episode advantages of one GRPO group under ``mode``, written as the paper's equations (the reference the
    recipe's tensors are tested against): every episode in the mean and the (unbiased, as verl's ``torch.std``)
    standard deviation, ``(r - mean) / (std + eps)`` (a group of one: 0), then the clamp for fatal episodes under
    ``fatal_mask_clamp``. ``hard_mask`` and ``fatal_mask`` leave the advantage as it is (they mask tokens instead)."""
    if len(rewards) != len(fatal):
        raise ValueError("one fatal flag per reward")
    if len(rewards) < 2:
        base = [0.0] * len(rewards)
    else:
        mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
        base = [(r - mean) / (std + eps) for r in rewards]
    if not all(math.isfinite(a) for a in base):
        raise ValueError(f"non-finite advantage from rewards {list(rewards)}")
    return [clamped(a, f) if mode.clamps else a for a, f in zip(base, fatal)]
