"""verl ``custom_reward_function`` for the vSearcher: a thin adapter over :mod:`insight_o3.protocol.rewards`.

verl 0.7's reward loop calls ``compute_score(data_source, solution_str, ground_truth, extra_info,
**reward_kwargs)`` with the dataset row's ``extra_info`` *updated with the agent loop's*
``AgentLoopOutput.extra_fields`` (``tool_extra_fields`` in verl). What the loop observed while running the
protocol is read back, and checked, by :meth:`recipe.vsearch.rollout_fields.SampleFields.from_extra_info` (the
contract's keys and types are listed there). The decoded ``solution_str`` is not re-parsed: the agent loop already
parsed every turn with the library's parser, and the response text alone lacks the image size needed to validate
boxes.

``reward_kwargs`` (``custom_reward_function.reward_kwargs``, filled from ``vsearch.reward`` by the
recipe YAML): ``variant`` (``original`` | ``paper``), ``format_weight``, ``iou_weight``, ``alpha``,
``max_consecutive_iou``, ``min_gt_coverage``, ``tool_weight`` and the ablation switches ``reward_type``,
``pseudo_iou_reward_type``. Start-up validation of the same values is
``recipe.vsearch.settings.RewardSettings``.
"""

from __future__ import annotations

from typing import Any

from insight_o3.base.json_types import JSONObject
from insight_o3.protocol.rewards import (
    DEFAULT_RULES,
    DEFAULT_WEIGHTS,
    RewardBreakdown,
    RewardRules,
    RewardWeights,
    trajectory_reward,
)

from .rollout_fields import ROLE_KEY, ROLE_PLACEHOLDER, SampleFields


def rules_from_kwargs(
    variant: str = DEFAULT_RULES.variant,
    format_weight: float = DEFAULT_WEIGHTS.format,
    iou_weight: float = DEFAULT_WEIGHTS.iou,
    alpha: float = DEFAULT_WEIGHTS.alpha,
    max_consecutive_iou: float = DEFAULT_RULES.max_consecutive_iou,
    min_gt_coverage: float = DEFAULT_RULES.min_gt_coverage,
    tool_weight: float = DEFAULT_WEIGHTS.tool,
    reward_type: str = DEFAULT_RULES.reward_type,
    pseudo_iou_reward_type: str = DEFAULT_RULES.pseudo_iou_reward_type,
) -> RewardRules:
    """``RewardRules`` from the flat ``reward_kwargs`` of the recipe config."""
    return RewardRules(
        variant=str(variant),
        weights=RewardWeights(
            format=float(format_weight), iou=float(iou_weight), alpha=float(alpha), tool=float(tool_weight)
        ),
        max_consecutive_iou=float(max_consecutive_iou),
        min_gt_coverage=float(min_gt_coverage),
        reward_type=str(reward_type),
        pseudo_iou_reward_type=str(pseudo_iou_reward_type),
    )


def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: JSONObject | None = None,
    *,
    variant: str = DEFAULT_RULES.variant,
    format_weight: float = DEFAULT_WEIGHTS.format,
    iou_weight: float = DEFAULT_WEIGHTS.iou,
    alpha: float = DEFAULT_WEIGHTS.alpha,
    max_consecutive_iou: float = DEFAULT_RULES.max_consecutive_iou,
    min_gt_coverage: float = DEFAULT_RULES.min_gt_coverage,
    tool_weight: float = DEFAULT_WEIGHTS.tool,
    reward_type: str = DEFAULT_RULES.reward_type,
    pseudo_iou_reward_type: str = DEFAULT_RULES.pseudo_iou_reward_type,
    **_unused: Any,
) -> JSONObject:
    """Return ``{"score": r, ...every RewardBreakdown term}`` (verl logs the extra keys)."""
    rules = rules_from_kwargs(
        variant,
        format_weight,
        iou_weight,
        alpha,
        max_consecutive_iou,
        min_gt_coverage,
        tool_weight,
        reward_type,
        pseudo_iou_reward_type,
    )
    info = extra_info or {}
    if info.get(ROLE_KEY) == ROLE_PLACEHOLDER:
        # no trajectory (an in-loop episode without vSearcher calls, or an episode that raised): nothing to score
        # and nothing to read (a failed out-of-loop episode has no image_size); the trainer drops the row
        return _numeric(placeholder_breakdown(rules, info))
    f = SampleFields.from_extra_info(info, variant=rules.variant, data_source=data_source)
    # fatal-aware GRPO (vsearch.fatal): an episode stopped at its fatal step has no answer, so its accuracy term is 0
    # (out-of-loop: no box; in-loop: the pseudo IoU 1[s = c = 1] whatever the vReasoner made of the call); its
    # format and tool terms are its valid prefix's (the session scored only the turns before the fatal step)
    fatal = f.fatal_step is not None
    b = trajectory_reward(
        rules,
        in_loop=f.is_in_loop,
        n_tool=f.n_tool,
        format_ok=f.format_ok,
        format_error=f.format_error,
        pred_box=None if fatal else f.pred_box,
        gt_boxes=f.bboxes,
        image_size=f.image_size,
        crop_boxes=list(f.crop_boxes or []),
        frame_size=f.frame_size,
        helpful=False if fatal else f.feedback_helpful,
        correct=False if fatal else f.answer_correct,
    )
    return _numeric(b)


def placeholder_breakdown(rules: RewardRules, info: JSONObject) -> RewardBreakdown:
    """The all-zero reward of a placeholder row (``vsearch_role=placeholder``)."""
    return RewardBreakdown(
        score=0.0,
        n_tool=0,
        tool_gate=0.0,
        r_format=0.0,
        r_iou=0.0,
        iou=None,
        matched_gt=None,
        in_loop=bool(info.get("is_in_loop")),
        format_error=str(info.get("format_error") or "placeholder: no vSearcher trajectory"),
        variant=rules.variant,
    )


def _numeric(b: RewardBreakdown) -> JSONObject:
    out = b.to_dict()
    # verl stacks reward_extra_info into numpy arrays for logging: keep every value numeric
    out["iou"] = -1.0 if b.iou is None else b.iou
    out["matched_gt"] = -1 if b.matched_gt is None else b.matched_gt
    out["in_loop"] = float(b.in_loop)
    out["format_error"] = b.format_error or ""
    out["variant"] = b.variant
    out["repeated_view"] = -1.0 if b.repeated_view is None else float(b.repeated_view)
    return out
