"""verl ``custom_reward_function`` for the vSearcher: a thin adapter over :mod:`insight_o3.rewards`.

verl 0.7's reward loop calls ``compute_score(data_source, solution_str, ground_truth, extra_info,
**reward_kwargs)`` with the dataset row's ``extra_info`` *updated with the agent loop's*
``AgentLoopOutput.extra_fields`` (``tool_extra_fields`` in verl). The vSearcher agent loop therefore
reports what it observed while running the protocol, under these keys (the contract with
``recipe.vsearch.agent_loops`` / ``policy_searcher.SearcherRollout.reward_fields``):

=====================  =========================================================================
``n_tool``             int, ``LocateResult.n_tool_calls``
``format_ok``          bool, ``LocateResult.format_ok`` of the vSearcher session (the protocol's r_format)
``format_error``       str | None, ``LocateResult.error`` (why the episode went wrong)
``pred_box``           ``LocateResult.box_original``: [x1, y1, x2, y2] original pixels, None unless found
``crop_boxes``         the model's ``bbox_2d`` of every executed crop, model-frame pixels (``original``)
``frame_size``         [W, H] of the model frame the boxes above refer to (``original``)
``image_size``         [W, H] of the original image (``original``, out-of-loop)
``is_in_loop``         bool, True for a vSearcher call issued by the API vReasoner
``feedback_helpful``   bool | None, s (in-loop only)
``answer_correct``     bool | None, c (in-loop only; computed once per episode by the agent loop)
=====================  =========================================================================

Out-of-loop rows carry ``bboxes`` (ground truth) from the parquet's ``extra_info``. The decoded
``solution_str`` is not re-parsed: the agent loop already parsed every turn with the library's
parser, and the response text alone lacks the image size needed to validate boxes.

``reward_kwargs`` (``custom_reward_function.reward_kwargs``, filled from ``vsearch.reward`` by the
recipe YAML): ``variant`` (``original`` | ``paper``), ``format_weight``, ``iou_weight``, ``alpha``,
``max_consecutive_iou``, ``min_gt_coverage``. Start-up validation of the same values is
``recipe.vsearch.settings.RewardSettings``.
"""

from __future__ import annotations

from insight_o3.rewards import DEFAULT_RULES, DEFAULT_WEIGHTS, RewardRules, RewardWeights, trajectory_reward

REQUIRED_KEYS = ("n_tool", "format_ok")
#: keys the ``original`` rules need on top of REQUIRED_KEYS when there was a crop (out-of-loop rows also
#: need ``image_size``)
ORIGINAL_KEYS = ("crop_boxes", "frame_size")


def rules_from_kwargs(
    variant: str = DEFAULT_RULES.variant,
    format_weight: float = DEFAULT_WEIGHTS.format,
    iou_weight: float = DEFAULT_WEIGHTS.iou,
    alpha: float = DEFAULT_WEIGHTS.alpha,
    max_consecutive_iou: float = DEFAULT_RULES.max_consecutive_iou,
    min_gt_coverage: float = DEFAULT_RULES.min_gt_coverage,
) -> RewardRules:
    """``RewardRules`` from the flat ``reward_kwargs`` of the recipe config."""
    return RewardRules(
        variant=str(variant),
        weights=RewardWeights(format=float(format_weight), iou=float(iou_weight), alpha=float(alpha)),
        max_consecutive_iou=float(max_consecutive_iou),
        min_gt_coverage=float(min_gt_coverage),
    )


def compute_score(
    data_source,
    solution_str,
    ground_truth,
    extra_info=None,
    *,
    variant: str = DEFAULT_RULES.variant,
    format_weight: float = DEFAULT_WEIGHTS.format,
    iou_weight: float = DEFAULT_WEIGHTS.iou,
    alpha: float = DEFAULT_WEIGHTS.alpha,
    max_consecutive_iou: float = DEFAULT_RULES.max_consecutive_iou,
    min_gt_coverage: float = DEFAULT_RULES.min_gt_coverage,
    **_unused,
) -> dict:
    """Return ``{"score": r, ...every RewardBreakdown term}`` (verl logs the extra keys)."""
    rules = rules_from_kwargs(variant, format_weight, iou_weight, alpha, max_consecutive_iou, min_gt_coverage)
    info = dict(extra_info or {})
    in_loop = bool(info.get("is_in_loop"))
    missing = [k for k in REQUIRED_KEYS if info.get(k) is None]
    if not missing and not in_loop and info.get("bboxes") is None:
        raise KeyError(f"out-of-loop vsearch sample (data_source={data_source!r}) has no extra_info.bboxes")
    if rules.variant == "original" and not missing:
        need = (list(ORIGINAL_KEYS) if int(info["n_tool"]) > 0 else []) + ([] if in_loop else ["image_size"])
        missing = [k for k in need if info.get(k) is None]
    if missing:
        raise KeyError(
            f"vsearch reward ({rules.variant}) for data_source={data_source!r}: extra_info lacks "
            f"{missing}; the vSearcher agent loop must report them in AgentLoopOutput.extra_fields"
        )
    b = trajectory_reward(
        rules,
        in_loop=in_loop,
        n_tool=int(info["n_tool"]),
        format_ok=bool(info["format_ok"]),
        format_error=info.get("format_error"),
        pred_box=info.get("pred_box"),
        gt_boxes=info.get("bboxes"),
        image_size=info.get("image_size"),
        crop_boxes=list(info.get("crop_boxes") or []),
        frame_size=info.get("frame_size"),
        helpful=info.get("feedback_helpful"),
        correct=info.get("answer_correct"),
    )
    out = b.to_dict()
    # verl stacks reward_extra_info into numpy arrays for logging: keep every value numeric
    out["iou"] = -1.0 if b.iou is None else b.iou
    out["matched_gt"] = -1 if b.matched_gt is None else b.matched_gt
    out["in_loop"] = float(b.in_loop)
    out["format_error"] = b.format_error or ""
    out["variant"] = b.variant
    out["repeated_view"] = -1.0 if b.repeated_view is None else float(b.repeated_view)
    return out
