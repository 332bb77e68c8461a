"""Image-size and box geometry shared by evaluation, the agents and training.

Conventions: sizes are ``(width, height)``; boxes are ``(x1, y1, x2, y2)`` in pixels with
``x1 < x2`` and ``y1 < y2`` (half-open, like PIL's ``crop``). Qwen2.5-VL predicts absolute pixel
coordinates of the image *as the model sees it* (after its ``smart_resize``), so every box goes
through :class:`Frame` to reach original-image pixels.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

Box = tuple[float, float, float, float]

# Qwen2.5-VL vision constants: 14 px patches merged 2x2 -> one token per 28x28 pixels.
QWEN_IMAGE_FACTOR = 28
QWEN_MIN_PIXELS = 4 * 28 * 28
#: ``qwen_vl_utils``' default pixel budget (16384 tokens), used when no budget is given.
QWEN_MAX_PIXELS = 16384 * 28 * 28
QWEN_MAX_RATIO = 200
#: vSearcher pixel budgets of the paper (D.1): ~12.8M (16K tokens) at evaluation, ~3.2M (4K) in training.
VSEARCHER_EVAL_MAX_PIXELS = 16384 * 28 * 28
VSEARCHER_TRAIN_MAX_PIXELS = 4096 * 28 * 28


#: Image budgets of API models (paper Sec. 5 / original README): OpenAI's GPT models get roughly
#: 1280x1280 px (the API's own limit), every other model 3500x3500 px.
GPT_IMAGE_MAX_PIXELS = 1280 * 1280
DEFAULT_IMAGE_MAX_PIXELS = 3500 * 3500


def api_image_max_pixels(model: str) -> int:
    """The paper's image budget for an API model: 1280x1280 px when "gpt" occurs anywhere in its name
    (case-insensitive, so router names such as ``openai/gpt-5-mini`` count — the original sweep
    tests ``*"gpt"*``), otherwise 3500x3500 px."""
    return GPT_IMAGE_MAX_PIXELS if "gpt" in (model or "").lower() else DEFAULT_IMAGE_MAX_PIXELS


def _round_by(x: float, f: int) -> int:
    return round(x / f) * f


def _floor_by(x: float, f: int) -> int:
    return math.floor(x / f) * f


def _ceil_by(x: float, f: int) -> int:
    return math.ceil(x / f) * f


def smart_resize(
    height: int,
    width: int,
    factor: int = QWEN_IMAGE_FACTOR,
    min_pixels: int = QWEN_MIN_PIXELS,
    max_pixels: int = QWEN_MAX_PIXELS,
) -> tuple[int, int]:
    """Qwen2.5-VL's resize rule (the one ``qwen_vl_utils.smart_resize`` implements).

    Returns ``(height, width)``: both multiples of ``factor``, the pixel count within
    ``[min_pixels, max_pixels]``, the aspect ratio kept as closely as possible. Re-implemented here
    because ``qwen_vl_utils`` imports torch/torchvision; a test checks equality against it.
    """
    if height <= 0 or width <= 0:
        raise ValueError(f"image size must be positive, got height={height}, width={width}")
    if max(height, width) / min(height, width) > QWEN_MAX_RATIO:
        raise ValueError(
            f"absolute aspect ratio must be smaller than {QWEN_MAX_RATIO}, "
            f"got {max(height, width) / min(height, width)}"
        )
    h_bar = max(factor, _round_by(height, factor))
    w_bar = max(factor, _round_by(width, factor))
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt((height * width) / max_pixels)
        h_bar = max(factor, _floor_by(height / beta, factor))
        w_bar = max(factor, _floor_by(width / beta, factor))
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = _ceil_by(height * beta, factor)
        w_bar = _ceil_by(width * beta, factor)
    return h_bar, w_bar


def fit_max_pixels(size: tuple[int, int], max_pixels: int | None) -> tuple[int, int]:
    """Downscale ``(w, h)`` keeping the aspect ratio so that it fits ``max_pixels`` (None/0: no limit).

    The original's rule (``maybe_resize_image`` of the released evaluation, ``_scale_image_to_area``
    of the fork): ``ratio = (max_pixels / (w * h)) ** 0.5`` and each side *floored*, at least 1 px.
    """
    w, h = size
    if not max_pixels or w * h <= max_pixels:
        return w, h
    ratio = (max_pixels / (w * h)) ** 0.5
    return max(1, math.floor(w * ratio)), max(1, math.floor(h * ratio))


def upscale_small(size: tuple[int, int], min_side: int = 0, min_area: int = 0) -> list[tuple[int, int]]:
    """The sizes a small vReasoner crop is successively enlarged to (the fork's crop rule):
    first so that its short side is ``min_side``, then so that its area is ``min_area`` (each step
    truncates to int, at least 1 px). Returns the intermediate sizes, possibly none."""
    cw, ch = size
    steps: list[tuple[int, int]] = []
    short = min(cw, ch)
    if min_side and 0 < short < min_side:
        s = min_side / float(short)
        cw, ch = max(1, int(cw * s)), max(1, int(ch * s))
        steps.append((cw, ch))
    if min_area and cw * ch < min_area:
        s = (min_area / float(cw * ch)) ** 0.5
        cw, ch = max(1, int(cw * s)), max(1, int(ch * s))
        steps.append((cw, ch))
    return steps


@dataclass(frozen=True)
class Frame:
    """A view of (part of) an original image as a model sees it.

    ``region`` is the part of the original image shown (original pixels; the whole image for the
    first turn, a crop box for a zoom-in), ``size`` is the ``(w, h)`` it was resized to.
    """

    region: Box
    size: tuple[int, int]

    @property
    def scale(self) -> tuple[float, float]:
        x1, y1, x2, y2 = self.region
        return (x2 - x1) / self.size[0], (y2 - y1) / self.size[1]

    def to_original(self, box: Box) -> Box:
        sx, sy = self.scale
        x0, y0 = self.region[0], self.region[1]
        return (x0 + box[0] * sx, y0 + box[1] * sy, x0 + box[2] * sx, y0 + box[3] * sy)

    def from_original(self, box: Box) -> Box:
        sx, sy = self.scale
        x0, y0 = self.region[0], self.region[1]
        return ((box[0] - x0) / sx, (box[1] - y0) / sy, (box[2] - x0) / sx, (box[3] - y0) / sy)


def clamp_box(box: Box, size: tuple[int, int]) -> Box:
    w, h = size
    x1, y1, x2, y2 = box
    return (min(max(x1, 0.0), w), min(max(y1, 0.0), h), min(max(x2, 0.0), w), min(max(y2, 0.0), h))


def validate_box(values: Any, size: tuple[int, int]) -> tuple[Box | None, str | None]:
    """Turn a model-produced box into a usable one, or say why it is not.

    Accepts any sequence of 4 numbers. Non-numeric, non-finite, wrong length, inverted
    (x2 <= x1 or y2 <= y1) and boxes with no area left after clamping to the image are rejected;
    coordinates outside the image are clamped. Returns ``(box, None)`` or ``(None, reason)``.
    """
    if not isinstance(values, (list, tuple)) or len(values) != 4:
        return None, "bbox must be a list of 4 numbers"
    try:
        nums = [float(v) for v in values]
    except (TypeError, ValueError):
        return None, "bbox has a non-numeric coordinate"
    if not all(math.isfinite(v) for v in nums) or any(isinstance(v, bool) for v in values):
        return None, "bbox has a non-finite coordinate"
    x1, y1, x2, y2 = nums
    if x2 <= x1 or y2 <= y1:
        return None, "bbox is inverted or empty (need x1 < x2 and y1 < y2)"
    cx1, cy1, cx2, cy2 = clamp_box((x1, y1, x2, y2), size)
    if cx2 - cx1 < 1 or cy2 - cy1 < 1:
        return None, "bbox has less than 1 px of area inside the image (outside it, or degenerate)"
    return (cx1, cy1, cx2, cy2), None


def check_box(
    value: Any,
    where: str,
    field: str | None = None,
    size: tuple[int, int] | None = None,
    error: type[Exception] = ValueError,
    ordered: bool = True,
) -> Box:
    """A given box ``[x1, y1, x2, y2]`` (annotations, ground truth, reward inputs): a list, tuple or
    array of 4 finite numbers, with ``ordered`` also ``x1 < x2`` and ``y1 < y2``, inside a ``size``
    image when given; else ``error`` naming ``where`` and the field (``"<where>: field '<field>' …"``,
    or ``"<where> …"`` without a field). Model-produced boxes go through :func:`validate_box` instead
    (clamped, rejected with a reason, never raised)."""
    label = f"{where}: field '{field}'" if field else where
    if hasattr(value, "tolist") and not isinstance(value, (list, tuple, str, bytes)):
        value = value.tolist()  # numpy arrays from parquet round trips
    if not isinstance(value, (list, tuple)) or len(value) != 4:
        raise error(f"{label} must be [x1, y1, x2, y2], got {value!r}")
    if any(isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) for v in value):
        raise error(f"{label} must hold 4 finite numbers, got {value!r}")
    x1, y1, x2, y2 = (float(v) for v in value)
    if ordered and (x2 <= x1 or y2 <= y1):
        raise error(f"{label} {list(value)!r} is inverted or empty (need x1 < x2 and y1 < y2)")
    if size is not None:
        w, h = size
        if x1 < 0 or y1 < 0 or x2 > w or y2 > h:
            raise error(f"{label} {list(value)!r} lies outside the {w}x{h} image")
    return (x1, y1, x2, y2)


def is_null_box(values: Any) -> bool:
    """``[0, 0, 0, 0]``: the vSearcher's "not found" answer."""
    try:
        return isinstance(values, (list, tuple)) and len(values) == 4 and all(float(v) == 0 for v in values)
    except (TypeError, ValueError):
        return False


def expand_to_min_size(box: Box, size: tuple[int, int], min_side: float = QWEN_IMAGE_FACTOR) -> Box:
    """Grow a (valid, clamped) box around its centre so each side is at least ``min_side`` pixels,
    staying inside the image (a crop smaller than one Qwen patch cannot be shown to the model)."""
    w, h = size
    x1, y1, x2, y2 = box

    def grow(a: float, b: float, limit: int) -> tuple[float, float]:
        need = min(min_side, limit)
        if b - a >= need:
            return a, b
        c = (a + b) / 2
        a, b = c - need / 2, c + need / 2
        if a < 0:
            a, b = 0.0, need
        if b > limit:
            a, b = limit - need, float(limit)
        return a, b

    x1, x2 = grow(x1, x2, w)
    y1, y2 = grow(y1, y2, h)
    return (x1, y1, x2, y2)


def pixel_box(box: Box) -> tuple[int, int, int, int]:
    """Integer crop box covering ``box`` (floor the top-left, ceil the bottom-right)."""
    return (math.floor(box[0]), math.floor(box[1]), math.ceil(box[2]), math.ceil(box[3]))


def box_area(box: Box) -> float:
    return max(0.0, box[2] - box[0]) * max(0.0, box[3] - box[1])


def iou(a: Box, b: Box) -> float:
    ix1, iy1 = max(a[0], b[0]), max(a[1], b[1])
    ix2, iy2 = min(a[2], b[2]), min(a[3], b[3])
    inter = box_area((ix1, iy1, ix2, iy2))
    union = box_area(a) + box_area(b) - inter
    return inter / union if union > 0 else 0.0
