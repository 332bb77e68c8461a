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
  maps its answer back with :class:`insight_o3.imaging.geometry.Frame` before scoring (the same code path as
  the inference vSearcher).
* **r_format** (binary) is 1 iff the episode ended with a parsed final answer (a valid box or the
  "not found" box ``[0, 0, 0, 0]``) and *every* assistant turn was well-formed: ``<think>...</think>``
  first, then one action the protocol accepts (a ``image_zoom_in_tool`` call with a valid
  ``bbox_2d`` within the call limit, or the ``<answer>``), and no turn cut by the length limit. It
  is *not* recomputed here: the vSearcher protocol state machine decides it while running the
  episode (``insight_o3.agents.searcher_session.SearcherSession.format_ok``, the same code at
  inference and in training), and the reward takes the resulting boolean. :func:`reward_from_locate`
  reads it from a ``LocateResult``-like object (duck-typed, so this module does not depend on the
  agents package).
* **A "not found" answer** ``[0, 0, 0, 0]`` or a missing answer has IoU 0.

Two **variants** (:data:`REWARD_VARIANTS`, chosen by :class:`RewardRules`):

* ``paper``: Eq. (1) literally, as above (:func:`out_of_loop_reward`, :func:`in_loop_reward`).
* ``original``: the rules of the authors' training code (their verl fork,
  ``verl/utils/reward_score/vsearch_batch.py`` and ``verl/utils/vsearch.py``; see
  ``docs/fidelity.md`` § Training for the evidence), which the released vSearcher was trained with
  (:func:`original_out_of_loop_reward`, :func:`original_in_loop_reward`):

  1. a failed format check gives 0 (the whole score, not only the format term);
  2. the tool gate ``1[n_tool > 0]`` is also 0 when two consecutive views of the episode overlap
     with IoU > ``max_consecutive_iou`` (0.6), the views being the whole image followed by every
     crop, in the model frame: a first crop of (almost) the whole image or a crop that repeats the
     previous one earns nothing;
  3. a box scores IoU with a ground-truth box only when it covers more than ``min_gt_coverage``
     (95 %) of it; the whole image is always a candidate next to the predicted box, and with several
     ground-truth boxes the *worst* covered one counts (``min_k max_b``): the answer must contain
     every ground-truth region;
  4. ``r_IoU = (clip(IoU, α, 1) - α) / (1 - α)`` (the same function as the paper's).

Two **ablation switches** of Table 3 ("w/o tool cond.", "w/o feedback", "w/o outcome"), named as in the fork's
``custom_reward_function.reward_kwargs`` (:class:`RewardRules`, both variants):

* ``reward_type``: ``conditioned_on_tool_reward`` (default, Eq. 1: the tool gate multiplies the rest) or
  ``basic_weighted_addition`` (the fork's ``Score``: ``λ_format r_format + λ_tool r_tool + λ_IoU r_IoU``, the tool
  gate as an added term of weight ``λ_tool`` = 1.0);
* ``pseudo_iou_reward_type`` (in-loop): ``caller_feedback`` (default, ``1[s = c = 1]``),
  ``outcome_no_caller_feedback`` (w/o feedback: ``1[c = 1]``) or ``caller_feedback_no_outcome`` (w/o outcome:
  ``1[s = 1]``).

Under ``original`` the pseudo IoU also follows a batch rule of the fork (:func:`batch_withholds_pseudo_iou`, applied by
the recipe to a step's rollout): when no sample of the batch carries a vReasoner rating, every in-loop ``r_IoU`` is 0.

Under ``original`` an in-loop sample keeps its pseudo IoU when its format check fails (the fork sets it after
scoring, whatever the format) while an out-of-loop sample then has ``r_IoU = 0`` (the fork extracts no answer
from a badly formatted episode); with the default ``reward_type`` both are multiplied by a zero gate anyway.

This module is pure Python (no torch) on purpose: the reward is part of the protocol, not of the
trainer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from insight_o3.base.json_types import JSONObject
from insight_o3.imaging.geometry import Box, check_box, iou, is_null_box

__all__ = [
    "RewardWeights",
    "RewardBreakdown",
    "DEFAULT_WEIGHTS",
    "REWARD_VARIANTS",
    "REWARD_TYPES",
    "PSEUDO_IOU_TYPES",
    "batch_withholds_pseudo_iou",
    "combine_terms",
    "RewardRules",
    "DEFAULT_RULES",
    "iou_reward",
    "pseudo_iou_reward",
    "best_iou",
    "covered_iou",
    "repeated_view",
    "out_of_loop_reward",
    "in_loop_reward",
    "original_out_of_loop_reward",
    "original_in_loop_reward",
    "trajectory_reward",
    "reward_from_locate",
]

#: ``original``: the authors' training code (the default of the recipe); ``paper``: Eq. (1) literally.
REWARD_VARIANTS = ("original", "paper")
#: ``reward_type`` (the fork's ``SCORE_CLASS_MAP`` keys): Eq. (1)'s gate, or the gate as an added term (w/o tool cond.)
REWARD_TYPES = ("conditioned_on_tool_reward", "basic_weighted_addition")
#: ``pseudo_iou_reward_type`` (the fork's names): 1[s=c=1], 1[c=1] (w/o feedback), 1[s=1] (w/o outcome)
PSEUDO_IOU_TYPES = ("caller_feedback", "outcome_no_caller_feedback", "caller_feedback_no_outcome")


@dataclass(frozen=True)
class RewardWeights:
    """λ_format, λ_IoU and the IoU threshold α of Eq. (1)."""

    format: float = 0.2
    iou: float = 0.8
    alpha: float = 0.25
    tool: float = 1.0  # λ_tool, used only by reward_type basic_weighted_addition (the fork's reward_weights.tool)

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha < 1.0:
            raise ValueError(f"alpha must be in [0, 1), got {self.alpha}")
        for name in ("format", "iou", "tool"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"reward weight {name} must be a finite non-negative number, got {v}")


DEFAULT_WEIGHTS = RewardWeights()


@dataclass(frozen=True)
class RewardRules:
    """Which reward is computed: the variant, the weights of Eq. (1), the two thresholds of the
    ``original`` rules (ignored by ``paper``) and the two ablation switches (module docstring)."""

    variant: str = "original"
    weights: RewardWeights = DEFAULT_WEIGHTS
    max_consecutive_iou: float = 0.6  # original: views overlapping more than this void the tool gate
    min_gt_coverage: float = 0.95  # original: a box must cover more than this share of a GT box
    reward_type: str = REWARD_TYPES[0]
    pseudo_iou_reward_type: str = PSEUDO_IOU_TYPES[0]

    def __post_init__(self) -> None:
        if self.variant not in REWARD_VARIANTS:
            raise ValueError(f"reward variant must be one of {REWARD_VARIANTS}, got {self.variant!r}")
        if self.reward_type not in REWARD_TYPES:
            raise ValueError(f"reward_type must be one of {REWARD_TYPES}, got {self.reward_type!r}")
        if self.pseudo_iou_reward_type not in PSEUDO_IOU_TYPES:
            raise ValueError(
                f"pseudo_iou_reward_type must be one of {PSEUDO_IOU_TYPES}, got {self.pseudo_iou_reward_type!r}"
            )
        for name in ("max_consecutive_iou", "min_gt_coverage"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0.0 <= v <= 1.0:
                raise ValueError(f"reward rule {name} must be a number in [0, 1], got {v!r}")


DEFAULT_RULES = RewardRules()


@dataclass(frozen=True)
class RewardBreakdown:
    """Every term of Eq. (1) for one vSearcher trajectory.

    ``iou`` is the raw IoU against the best-matching ground truth (out-of-loop; None in-loop) and
    ``matched_gt`` that box's index in ``extra_info.bboxes`` (``paper``; under ``original`` ``iou``
    is :func:`covered_iou` and ``matched_gt`` the worst-covered box). ``in_loop`` says whether ``r_iou`` is
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
    variant: str = "paper"
    repeated_view: bool | None = None  # original only: the tool gate was voided by a repeated view

    def to_dict(self) -> JSONObject:
        return asdict(self)


# ----------------------------------------------------------------------------- terms
def iou_reward(value: float, alpha: float = DEFAULT_WEIGHTS.alpha) -> float:
    """``max(0, IoU - α) / (1 - α)``: 0 below the threshold, 1 for a perfect box."""
    if not 0.0 <= alpha < 1.0:
        raise ValueError(f"alpha must be in [0, 1), got {alpha}")
    if not (math.isfinite(value) and 0.0 <= value <= 1.0 + 1e-9):
        raise ValueError(f"IoU must be in [0, 1], got {value}")
    return max(0.0, min(value, 1.0) - alpha) / (1.0 - alpha)


def pseudo_iou_reward(helpful: bool | None, correct: bool | None, kind: str = PSEUDO_IOU_TYPES[0]) -> float:
    """``r̂_IoU = 1[s = c = 1]`` (``kind`` ``caller_feedback``), ``1[c = 1]`` (``outcome_no_caller_feedback``) or
    ``1[s = 1]`` (``caller_feedback_no_outcome``); an absent rating or judgement (None) counts as 0."""
    s, c = helpful is True, correct is True
    if kind == "caller_feedback":
        return 1.0 if (s and c) else 0.0
    if kind == "outcome_no_caller_feedback":
        return 1.0 if c else 0.0
    if kind == "caller_feedback_no_outcome":
        return 1.0 if s else 0.0
    raise ValueError(f"pseudo_iou_reward_type must be one of {PSEUDO_IOU_TYPES}, got {kind!r}")


def _as_box(values: Any, what: str) -> Box:
    """4 finite numbers, any order (a predicted box may be inverted: it then scores 0)."""
    return check_box(values, what, ordered=False)


def best_iou(pred_box: Sequence[float] | None, gt_boxes: Iterable[Sequence[float]]) -> tuple[float, int | None]:
    """IoU against the best-matching ground-truth box and that box's index.

    A missing prediction or the "not found" box scores ``(0.0, None)``. Ground-truth boxes must be
    valid ``(x1, y1, x2, y2)`` with positive area; there must be at least one.
    """
    gts = _gt_boxes(gt_boxes)
    if pred_box is None or is_null_box(list(pred_box)):
        return 0.0, None
    pred = _as_box(pred_box, "predicted bbox")
    scores = [iou(pred, g) for g in gts]
    k = max(range(len(gts)), key=scores.__getitem__)
    return scores[k], k


# ----------------------------------------------------------------------------- Eq. (1)
def _check_n_tool(n_tool: int) -> int:
    if isinstance(n_tool, bool) or not isinstance(n_tool, int) or n_tool < 0:
        raise ValueError(f"n_tool must be a non-negative int, got {n_tool!r}")
    return n_tool


def _eq1(
    *,
    weights: RewardWeights,
    gate: float,
    n_tool: int,
    format_ok: bool,
    format_error: str | None,
    r_iou: float,
    iou: float | None,
    matched_gt: int | None,
    in_loop: bool,
    variant: str = "paper",
    repeated_view: bool | None = None,
    reward_type: str = REWARD_TYPES[0],
) -> RewardBreakdown:
    """Eq. (1), ``gate · (λ_format · r_format + λ_IoU · r_IoU)``, with every term kept; the one place the
    four reward functions (paper/original × out-of-loop/in-loop) combine their terms. ``reward_type``
    ``basic_weighted_addition`` adds the gate instead: ``λ_format · r_format + λ_tool · gate + λ_IoU · r_IoU``."""
    r_fmt = 1.0 if format_ok else 0.0
    return RewardBreakdown(
        score=combine_terms(reward_type, weights, gate=gate, r_format=r_fmt, r_iou=r_iou),
        n_tool=n_tool,
        tool_gate=gate,
        r_format=r_fmt,
        r_iou=r_iou,
        iou=iou,
        matched_gt=matched_gt,
        in_loop=in_loop,
        format_error=None if format_ok else (format_error or "format check failed"),
        variant=variant,
        repeated_view=repeated_view,
    )


def combine_terms(reward_type: str, weights: RewardWeights, *, gate: float, r_format: float, r_iou: float) -> float:
    """The score from its terms (see :func:`_eq1`): ``gate · (λ_format · r_format + λ_IoU · r_IoU)``, or with
    ``basic_weighted_addition`` ``λ_format · r_format + λ_tool · gate + λ_IoU · r_IoU``."""
    if reward_type == "basic_weighted_addition":
        return weights.format * r_format + weights.tool * gate + weights.iou * r_iou
    if reward_type == "conditioned_on_tool_reward":
        return gate * (weights.format * r_format + weights.iou * r_iou)
    raise ValueError(f"reward_type must be one of {REWARD_TYPES}, got {reward_type!r}")


def batch_withholds_pseudo_iou(rules: RewardRules, ratings: Iterable[bool | None]) -> bool:
    """Whether a training batch's in-loop samples lose their pseudo IoU (``r_IoU`` = 0): under ``original`` when no
    sample of the batch carries a vReasoner rating (``ratings``: every sample's s, None when unrated). The fork sets
    the pseudo IoUs in a pass over the whole batch guarded by ``"caller_feedback" in pseudo_iou_reward_type and
    any(ei.get("caller_feedback") for ei in extra_infos)`` (``vsearch_batch.py:694-696`` at 926d137): every one of the
    three types contains ``caller_feedback``, so with no rating anywhere (an API-failed vReasoner after every
    search, or feedback disabled) each in-loop sample keeps the ``iou_reward`` 0 it was scored with, whatever the
    type and the outcome. ``paper`` has no such rule."""
    return rules.variant == "original" and not any(r is not None for r in ratings)


def out_of_loop_reward(
    *,
    n_tool: int,
    format_ok: bool,
    pred_box: Sequence[float] | None,
    gt_boxes: Iterable[Sequence[float]],
    weights: RewardWeights = DEFAULT_WEIGHTS,
    format_error: str | None = None,
    reward_type: str = REWARD_TYPES[0],
) -> RewardBreakdown:
    """Eq. (1) with the IoU reward. ``pred_box``: the final answer in original-image pixels, or None
    when no answer parsed. ``format_ok``: the protocol's r_format verdict (see the module docstring)."""
    n_tool = _check_n_tool(n_tool)
    value, k = best_iou(pred_box, gt_boxes)
    return _eq1(
        reward_type=reward_type,
        weights=weights,
        gate=1.0 if n_tool > 0 else 0.0,
        n_tool=n_tool,
        format_ok=format_ok,
        format_error=format_error,
        r_iou=iou_reward(value, weights.alpha),
        iou=value,
        matched_gt=k,
        in_loop=False,
    )


def in_loop_reward(
    *,
    n_tool: int,
    format_ok: bool,
    helpful: bool | None,
    correct: bool | None,
    weights: RewardWeights = DEFAULT_WEIGHTS,
    format_error: str | None = None,
    reward_type: str = REWARD_TYPES[0],
    pseudo_iou_reward_type: str = PSEUDO_IOU_TYPES[0],
) -> RewardBreakdown:
    """Eq. (1) with the pseudo IoU reward ``1[s = c = 1]``: ``helpful`` is s (the vReasoner's
    feedback on this search), ``correct`` is c (the judge's verdict on the episode's answer)."""
    n_tool = _check_n_tool(n_tool)
    return _eq1(
        reward_type=reward_type,
        weights=weights,
        gate=1.0 if n_tool > 0 else 0.0,
        n_tool=n_tool,
        format_ok=format_ok,
        format_error=format_error,
        r_iou=pseudo_iou_reward(helpful, correct, pseudo_iou_reward_type),
        iou=None,
        matched_gt=None,
        in_loop=True,
    )


# ----------------------------------------------------------------------------- original rules
def _gt_boxes(gt_boxes: Iterable[Sequence[float]]) -> list[Box]:
    gts = [check_box(b, f"ground-truth bbox #{i}") for i, b in enumerate(gt_boxes)]
    if not gts:
        raise ValueError("out-of-loop reward needs at least one ground-truth bbox (extra_info.bboxes is empty)")
    return gts


def _size(value: Any, what: str) -> tuple[float, float]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__") or len(value) != 2:
        raise ValueError(f"{what} must be (width, height), got {value!r}")
    w, h = (float(v) for v in value)
    if not (math.isfinite(w) and math.isfinite(h) and w > 0 and h > 0):
        raise ValueError(f"{what} must be positive, got {value!r}")
    return w, h


def _intersection(a: Box, b: Box) -> float:
    return max(0.0, min(a[2], b[2]) - max(a[0], b[0])) * max(0.0, min(a[3], b[3]) - max(a[1], b[1]))


def covered_iou(
    pred_box: Sequence[float] | None,
    gt_boxes: Iterable[Sequence[float]],
    image_size: Sequence[float],
    min_coverage: float = DEFAULT_RULES.min_gt_coverage,
) -> tuple[float, int | None]:
    """The ``original`` IoU of a final answer: ``min_k max_b IoU(b, gt_k)`` over the candidates
    ``b`` = the whole image and the predicted box, where a candidate scores only if it covers more
    than ``min_coverage`` of ``gt_k``. Returns the value and the index of the worst-covered GT box.
    A missing prediction or the "not found" box scores ``(0.0, None)`` (the original skips it)."""
    gts = _gt_boxes(gt_boxes)
    w, h = _size(image_size, "image size")
    if pred_box is None or is_null_box(list(pred_box)):
        return 0.0, None
    candidates = [(0.0, 0.0, w, h), _as_box(pred_box, "predicted bbox")]
    per_gt = []
    for g in gts:
        area = (g[2] - g[0]) * (g[3] - g[1])
        per_gt.append(max((iou(c, g) if _intersection(c, g) / area > min_coverage else 0.0) for c in candidates))
    k = min(range(len(gts)), key=per_gt.__getitem__)
    return per_gt[k], k


def repeated_view(
    crop_boxes: Iterable[Sequence[float]],
    frame_size: Sequence[float],
    max_iou: float = DEFAULT_RULES.max_consecutive_iou,
) -> bool:
    """``original``: do two consecutive views overlap with IoU > ``max_iou``? The views are the
    whole image ``(0, 0, W, H)`` then every crop, all in the model frame (the model's own
    ``bbox_2d`` values)."""
    w, h = _size(frame_size, "model frame size")
    views = [(0.0, 0.0, w, h)] + [_as_box(b, f"crop box #{i}") for i, b in enumerate(crop_boxes)]
    return any(iou(a, b) > max_iou for a, b in zip(views, views[1:]))


def _original_gate(
    n_tool: int,
    format_ok: bool,
    crop_boxes: Iterable[Sequence[float]],
    frame_size: Sequence[float],
    rules: RewardRules,
) -> tuple[float, bool]:
    repeated = bool(n_tool > 0 and repeated_view(crop_boxes, frame_size, rules.max_consecutive_iou))
    return (1.0 if (format_ok and n_tool > 0 and not repeated) else 0.0), repeated


def original_out_of_loop_reward(
    *,
    n_tool: int,
    format_ok: bool,
    pred_box: Sequence[float] | None,
    gt_boxes: Iterable[Sequence[float]],
    image_size: Sequence[float],
    crop_boxes: Iterable[Sequence[float]],
    frame_size: Sequence[float],
    rules: RewardRules = DEFAULT_RULES,
    format_error: str | None = None,
) -> RewardBreakdown:
    """The ``original`` out-of-loop reward (module docstring, rules 1–4). ``pred_box`` and
    ``gt_boxes`` are original-image pixels (``image_size`` = (W, H) of the original image);
    ``crop_boxes`` are the model's crop boxes in the model frame of size ``frame_size``."""
    n_tool = _check_n_tool(n_tool)
    # the fork extracts the answer only from a well-formed episode (compute_format_reward returns before it):
    # a failed format check leaves r_IoU at 0 (vsearch_batch.py:546-548)
    gts = _gt_boxes(gt_boxes)
    value, k = covered_iou(pred_box, gts, image_size, rules.min_gt_coverage) if format_ok else (0.0, None)
    gate, repeated = _original_gate(n_tool, format_ok, list(crop_boxes), frame_size, rules)
    return _eq1(
        reward_type=rules.reward_type,
        weights=rules.weights,
        gate=gate,
        n_tool=n_tool,
        format_ok=format_ok,
        format_error=format_error,
        # the fork extracts no answer from a badly formatted episode: its IoU reward is 0
        r_iou=iou_reward(value, rules.weights.alpha) if format_ok else 0.0,
        iou=value,
        matched_gt=k,
        in_loop=False,
        variant="original",
        repeated_view=repeated,
    )


def original_in_loop_reward(
    *,
    n_tool: int,
    format_ok: bool,
    helpful: bool | None,
    correct: bool | None,
    crop_boxes: Iterable[Sequence[float]],
    frame_size: Sequence[float],
    rules: RewardRules = DEFAULT_RULES,
    format_error: str | None = None,
) -> RewardBreakdown:
    """The ``original`` in-loop reward: rules 1–2 with the pseudo IoU ``1[s = c = 1]``."""
    n_tool = _check_n_tool(n_tool)
    gate, repeated = _original_gate(n_tool, format_ok, list(crop_boxes), frame_size, rules)
    return _eq1(
        reward_type=rules.reward_type,
        weights=rules.weights,
        gate=gate,
        n_tool=n_tool,
        format_ok=format_ok,
        format_error=format_error,
        r_iou=pseudo_iou_reward(helpful, correct, rules.pseudo_iou_reward_type),
        iou=None,
        matched_gt=None,
        in_loop=True,
        variant="original",
        repeated_view=repeated,
    )


def trajectory_reward(
    rules: RewardRules,
    *,
    in_loop: bool,
    n_tool: int,
    format_ok: bool,
    format_error: str | None = None,
    pred_box: Sequence[float] | None = None,
    gt_boxes: Iterable[Sequence[float]] | None = None,
    image_size: Sequence[float] | None = None,
    crop_boxes: Iterable[Sequence[float]] = (),
    frame_size: Sequence[float] | None = None,
    helpful: bool | None = None,
    correct: bool | None = None,
) -> RewardBreakdown:
    """The reward of one vSearcher trajectory under ``rules.variant`` (the one entry point the
    training recipe calls). ``original`` needs ``frame_size`` and ``crop_boxes`` when there was a
    crop (and, out-of-loop, ``image_size``); missing ones are a ``ValueError`` naming them."""
    if rules.variant == "paper":
        common: dict[str, Any] = dict(
            n_tool=n_tool,
            format_ok=format_ok,
            weights=rules.weights,
            format_error=format_error,
            reward_type=rules.reward_type,
        )
        if in_loop:
            return in_loop_reward(
                helpful=helpful, correct=correct, pseudo_iou_reward_type=rules.pseudo_iou_reward_type, **common
            )
        if gt_boxes is None:
            raise ValueError("out-of-loop reward needs gt_boxes (extra_info.bboxes)")
        return out_of_loop_reward(pred_box=pred_box, gt_boxes=gt_boxes, **common)
    missing = (
        []
        if n_tool == 0
        else [name for name, v in (("frame_size", frame_size), ("crop_boxes", crop_boxes)) if v is None]
    )
    if not in_loop:
        missing += [name for name, v in (("gt_boxes", gt_boxes), ("image_size", image_size)) if v is None]
    if missing:
        raise ValueError(f"the 'original' reward needs {missing}")
    orig: dict[str, Any] = dict(
        n_tool=n_tool,
        format_ok=format_ok,
        crop_boxes=crop_boxes,
        frame_size=frame_size,
        rules=rules,
        format_error=format_error,
    )
    if in_loop:
        return original_in_loop_reward(helpful=helpful, correct=correct, **orig)
    assert gt_boxes is not None and image_size is not None  # checked above
    return original_out_of_loop_reward(pred_box=pred_box, gt_boxes=gt_boxes, image_size=image_size, **orig)


class LocateOutcome(Protocol):
    """What :func:`reward_from_locate` reads of a finished episode (``insight_o3.agents.searcher_session.LocateResult``)."""

    @property
    def n_tool_calls(self) -> int: ...
    @property
    def format_ok(self) -> bool: ...
    @property
    def box_original(self) -> Sequence[float] | None: ...


def reward_from_locate(
    result: LocateOutcome,
    *,
    gt_boxes: Iterable[Sequence[float]] | None = None,
    helpful: bool | None = None,
    correct: bool | None = None,
    in_loop: bool = False,
    weights: RewardWeights = DEFAULT_WEIGHTS,
) -> RewardBreakdown:
    """Score a finished vSearcher episode given as a ``LocateResult``-like object.

    Reads ``n_tool_calls``, ``format_ok``, ``box_original`` (original pixels, None unless found) and
    ``error``. Out-of-loop (``in_loop=False``) needs ``gt_boxes``; in-loop takes s (``helpful``) and
    c (``correct``).
    """
    common: dict[str, Any] = dict(
        n_tool=int(result.n_tool_calls),
        format_ok=bool(result.format_ok),
        weights=weights,
        format_error=getattr(result, "error", None),
    )
    if in_loop:
        return in_loop_reward(helpful=helpful, correct=correct, **common)
    if gt_boxes is None:
        raise ValueError("out-of-loop reward needs gt_boxes (extra_info.bboxes)")
    return out_of_loop_reward(pred_box=result.box_original, gt_boxes=gt_boxes, **common)
