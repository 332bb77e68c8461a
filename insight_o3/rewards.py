"""vSearcher training rewards (paper §4.1, Eq. 1), shared by the verl recipe and any offline scoring.

Out-of-loop (region description with ground-truth boxes)::

    r = 1[n_tool > 0] * (λ_format * r_format + λ_IoU * r_IoU)
    r_IoU = max(0, IoU(b, b*) - α) / (1 - α)

In-loop (region description issued by the API vReasoner), ``r_IoU`` is replaced by the pseudo
reward ``r̂_IoU = 1[s = c = 1]``, where ``s`` is the vReasoner's rating of this search
(``<tool_feedback>helpful</tool_feedback>``) and ``c`` whether the episode's final answer was judged
correct. Defaults are those of D.1: λ_format 0.2, λ_IoU 0.8, α 0.25.

Choices the paper leaves open, fixed here:

* **Several ground-truth boxes.** ``extra_info.bboxes`` is a *list* of boxes (a description may
  match more than one region, e.g. two identical legends). The prediction is scored against the
  best-matching one, ``IoU = max_k IoU(b, b*_k)``: the description is satisfied by any of them, so
  finding one of them must not be penalised for not being the others.
* **Coordinates.** ``pred_box`` and the ground-truth boxes are in *original-image* pixels
  ``(x1, y1, x2, y2)``. The model answers in the coordinates of the resized image it saw; the caller
  maps its answer back with :class:`insight_o3.geometry.Frame` before scoring (the same code path as
  the inference vSearcher).
* **r_format** (binary) is 1 iff the trajectory ended with a parsed final answer and *every*
  assistant turn was well-formed: it contains ``<think>...</think>`` and exactly one action outside
  the think block, i.e. exactly one ``<tool_call>`` *or* exactly one ``<answer>`` (not both, not
  several); a tool call must name ``image_zoom_in_tool`` with a valid ``bbox_2d`` for the image; the
  final ``<answer>`` must be a valid box for the image or the "not found" box ``[0, 0, 0, 0]``.
  :func:`searcher_format_ok` computes it from the assistant turn texts, reusing
  :mod:`insight_o3.parsing` (the parser the inference vSearcher uses).
* **A "not found" answer** ``[0, 0, 0, 0]`` or a missing answer has IoU 0.

This module is pure Python (no torch) on purpose: the reward is part of the protocol, not of the
trainer.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Iterable, Sequence

from insight_o3.geometry import Box, is_null_box, iou, validate_box
from insight_o3.parsing import _ANSWER_TAG, _THINK_TAG, _TOOL_CALL, parse_searcher_turn

__all__ = [
    "RewardWeights", "RewardBreakdown", "DEFAULT_WEIGHTS",
    "iou_reward", "pseudo_iou_reward", "best_iou", "searcher_format_ok",
    "out_of_loop_reward", "in_loop_reward",
]


@dataclass(frozen=True)
class RewardWeights:
    """λ_format, λ_IoU and the IoU threshold α of Eq. (1)."""

    format: float = 0.2
    iou: float = 0.8
    alpha: float = 0.25

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {self.alpha}")
        for name in ("format", "iou"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"reward weight {name} must be a finite non-negative number, got {v}")


DEFAULT_WEIGHTS = RewardWeights()


@dataclass(frozen=True)
class RewardBreakdown:
    """Every term of Eq. (1) for one vSearcher trajectory.

    ``iou`` is the raw IoU against the best-matching ground truth (out-of-loop; None in-loop) and
    ``matched_gt`` that box's index in ``extra_info.bboxes``. ``in_loop`` says whether ``r_iou`` is
    the pseudo reward 1[s=c=1]. ``format_error`` says why ``r_format`` is 0 (None when it is 1).
    """

    score: float
    n_tool: int
    tool_gate: float
    r_format: float
    r_iou: float
    iou: float | None
    matched_gt: int | None
    in_loop: bool
    format_error: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)


# ----------------------------------------------------------------------------- terms
def iou_reward(value: float, alpha: float = DEFAULT_WEIGHTS.alpha) -> float:
    """``max(0, IoU - α) / (1 - α)``: 0 below the threshold, 1 for a perfect box."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0 + 1e-9):
        raise ValueError(f"IoU must be in [0, 1], got {value}")
    return max(0.0, min(value, 1.0) - alpha) / (1.0 - alpha)


def pseudo_iou_reward(helpful: bool | None, correct: bool | None) -> float:
    """``r̂_IoU = 1[s = c = 1]``; an absent rating or judgement (None) counts as 0."""
    return 1.0 if (helpful is True and correct is True) else 0.0


def _as_box(values, what: str) -> Box:
    # any 4-sequence: parquet round trips turn lists into numpy arrays
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) != 4:
        raise ValueError(f"{what} must be 4 numbers (x1, y1, x2, y2), got {values!r}")
    try:
        box = tuple(float(v) for v in values)
    except (TypeError, ValueError):
        raise ValueError(f"{what} has a non-numeric coordinate: {values!r}") from None
    if not all(math.isfinite(v) for v in box):
        raise ValueError(f"{what} has a non-finite coordinate: {values!r}")
    return box  # type: ignore[return-value]


def best_iou(pred_box: Sequence[float] | None, gt_boxes: Iterable[Sequence[float]]) -> tuple[float, int | None]:
    """IoU against the best-matching ground-truth box and that box's index.

    A missing prediction or the "not found" box scores ``(0.0, None)``. Ground-truth boxes must be
    valid ``(x1, y1, x2, y2)`` with positive area; there must be at least one.
    """
    gts = [_as_box(b, f"ground-truth bbox #{i}") for i, b in enumerate(gt_boxes)]
    if not gts:
        raise ValueError("out-of-loop reward needs at least one ground-truth bbox (extra_info.bboxes is empty)")
    for i, (x1, y1, x2, y2) in enumerate(gts):
        if x2 <= x1 or y2 <= y1:
            raise ValueError(f"ground-truth bbox #{i} {gts[i]} is inverted or empty (need x1 < x2, y1 < y2)")
    if pred_box is None or is_null_box(list(pred_box)):
        return 0.0, None
    pred = _as_box(pred_box, "predicted bbox")
    scores = [iou(pred, g) for g in gts]
    k = max(range(len(gts)), key=scores.__getitem__)
    return scores[k], k


# ----------------------------------------------------------------------------- format
def _turn_error(text: str, image_size: tuple[int, int], last: bool) -> str | None:
    if not _THINK_TAG.search(text):
        return "no <think>...</think>"
    visible = _THINK_TAG.sub("", text)
    n_calls, n_answers = len(_TOOL_CALL.findall(visible)), len(_ANSWER_TAG.findall(visible))
    if n_calls + n_answers != 1:
        return f"{n_calls} tool call(s) and {n_answers} answer(s); exactly one action is required"
    turn = parse_searcher_turn(text)
    if turn.action == "invalid":
        return turn.error
    if turn.action == "tool_call":
        if last:
            return "the trajectory ended with a tool call instead of an <answer>"
        _, why = validate_box(turn.bbox, image_size)
        return f"tool call bbox: {why}" if why else None
    # answer
    if not last:
        return "an <answer> before the last turn"
    if is_null_box(turn.bbox):
        return None
    _, why = validate_box(turn.bbox, image_size)
    return f"answer bbox: {why}" if why else None


def searcher_format_ok(assistant_turns: Sequence[str], image_size: tuple[int, int]) -> tuple[bool, str | None]:
    """``r_format`` from a vSearcher trajectory's assistant turns (decoded text, in order).

    ``image_size`` is the ``(w, h)`` of the image as the model saw it (its boxes are in those
    coordinates). Returns ``(ok, reason)``; ``reason`` names the first offending turn.
    """
    if not assistant_turns:
        return False, "no assistant turn"
    last = len(assistant_turns) - 1
    for i, text in enumerate(assistant_turns):
        why = _turn_error(text or "", image_size, i == last)
        if why:
            return False, f"turn {i}: {why}"
    return True, None


# ----------------------------------------------------------------------------- Eq. (1)
def _check_n_tool(n_tool: int) -> int:
    if isinstance(n_tool, bool) or not isinstance(n_tool, int) or n_tool < 0:
        raise ValueError(f"n_tool must be a non-negative int, got {n_tool!r}")
    return n_tool


def out_of_loop_reward(*, n_tool: int, format_ok: bool, pred_box: Sequence[float] | None,
                       gt_boxes: Iterable[Sequence[float]], weights: RewardWeights = DEFAULT_WEIGHTS,
                       format_error: str | None = None) -> RewardBreakdown:
    """Eq. (1) with the IoU reward. ``pred_box``: the final answer in original-image pixels, or None
    when no answer parsed. ``format_ok``: from :func:`searcher_format_ok`."""
    n_tool = _check_n_tool(n_tool)
    value, k = best_iou(pred_box, gt_boxes)
    r_fmt = 1.0 if format_ok else 0.0
    r_iou = iou_reward(value, weights.alpha)
    gate = 1.0 if n_tool > 0 else 0.0
    score = gate * (weights.format * r_fmt + weights.iou * r_iou)
    return RewardBreakdown(score=score, n_tool=n_tool, tool_gate=gate, r_format=r_fmt, r_iou=r_iou,
                           iou=value, matched_gt=k, in_loop=False,
                           format_error=None if format_ok else (format_error or "format check failed"))


def in_loop_reward(*, n_tool: int, format_ok: bool, helpful: bool | None, correct: bool | None,
                   weights: RewardWeights = DEFAULT_WEIGHTS, format_error: str | None = None) -> RewardBreakdown:
    """Eq. (1) with the pseudo IoU reward ``1[s = c = 1]``: ``helpful`` is s (the vReasoner's
    feedback on this search), ``correct`` is c (the judge's verdict on the episode's answer)."""
    n_tool = _check_n_tool(n_tool)
    r_fmt = 1.0 if format_ok else 0.0
    r_iou = pseudo_iou_reward(helpful, correct)
    gate = 1.0 if n_tool > 0 else 0.0
    score = gate * (weights.format * r_fmt + weights.iou * r_iou)
    return RewardBreakdown(score=score, n_tool=n_tool, tool_gate=gate, r_format=r_fmt, r_iou=r_iou,
                           iou=None, matched_gt=None, in_loop=True,
                           format_error=None if format_ok else (format_error or "format check failed"))
