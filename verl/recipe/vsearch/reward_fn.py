"""verl ``custom_reward_function`` for the vSearcher: a thin adapter over :mod:`insight_o3.rewards`.

verl 0.7's reward loop calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``
with the dataset row's ``extra_info`` *updated with the agent loop's* ``AgentLoopOutput.extra_fields``
(``tool_extra_fields`` in verl). The vSearcher agent loop therefore reports what it observed while
running the protocol, under these keys (the contract with ``recipe.vsearch.agent_loops``):

=================  =============================================================================
``n_tool``         int, ``LocateResult.n_tool_calls``
``format_ok``      bool, ``LocateResult.format_ok`` of the vSearcher session (the protocol's r_format)
``format_error``   str | None, ``LocateResult.error`` (why the episode went wrong)
``pred_box``       ``LocateResult.box_original``: [x1, y1, x2, y2] original pixels, None unless found
``is_in_loop``     bool, True for a vSearcher call issued by the API vReasoner
``feedback_helpful``  bool | None, s (in-loop only)
``answer_correct``    bool | None, c (in-loop only)
=================  =============================================================================

Out-of-loop rows carry ``bboxes`` (ground truth) from the parquet's ``extra_info``. The decoded
``solution_str`` is not re-parsed: the agent loop already parsed every turn with the library's
parser, and the response text alone lacks the image size needed to validate boxes.
"""
from __future__ import annotations

from insight_o3.rewards import DEFAULT_WEIGHTS, RewardWeights, in_loop_reward, out_of_loop_reward

REQUIRED_KEYS = ("n_tool", "format_ok")


def compute_score(data_source, solution_str, ground_truth, extra_info=None, *,
                  format_weight: float = DEFAULT_WEIGHTS.format, iou_weight: float = DEFAULT_WEIGHTS.iou,
                  alpha: float = DEFAULT_WEIGHTS.alpha, **_unused) -> dict:
    """Return ``{"score": r, ...every RewardBreakdown term}`` (verl logs the extra keys).

    Weights can be changed with ``custom_reward_function.reward_kwargs.{format_weight,iou_weight,alpha}``.
    """
    info = dict(extra_info or {})
    missing = [k for k in REQUIRED_KEYS if k not in info]
    if missing:
        raise KeyError(f"vsearch reward for data_source={data_source!r}: extra_info lacks {missing}; the "
                       f"vSearcher agent loop must report them in AgentLoopOutput.extra_fields")
    weights = RewardWeights(format=format_weight, iou=iou_weight, alpha=alpha)
    common = dict(n_tool=int(info["n_tool"]), format_ok=bool(info["format_ok"]),
                  format_error=info.get("format_error"), weights=weights)
    if info.get("is_in_loop"):
        b = in_loop_reward(helpful=info.get("feedback_helpful"), correct=info.get("answer_correct"), **common)
    else:
        if info.get("bboxes") is None:
            raise KeyError(f"out-of-loop vsearch sample (data_source={data_source!r}) has no extra_info.bboxes")
        b = out_of_loop_reward(pred_box=info.get("pred_box"), gt_boxes=info["bboxes"], **common)
    out = b.to_dict()
    # verl stacks reward_extra_info into numpy arrays for logging: keep every value numeric
    out["iou"] = -1.0 if b.iou is None else b.iou
    out["matched_gt"] = -1 if b.matched_gt is None else b.matched_gt
    out["in_loop"] = float(b.in_loop)
    out["format_error"] = b.format_error or ""
    return out
