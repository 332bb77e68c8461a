"""The vSearcher protocol rules of the authors' verl fork (commit 926d137), in one place.

The released vSearcher was trained (and validated) with these rules; the paper does not define them, so both
training variants (``vsearch.variant`` ``original`` and ``paper``) and the evaluation use them
(:class:`insight_o3.agents.SearcherSession` is the one caller). Each function is a port of the fork's code,
named after it, with its file and lines at 926d137:

* the format verdict r_format: :func:`parse_response`, :func:`format_verdict` (``compute_format_reward``) with
  :func:`tool_call_box` (the reward's ``tool_call_check_fn``) and :func:`parse_answer_box` (``parse_bbox``),
  on the assistant turns as the fork splits the decoded response (:func:`split_responses`);
* boxes: :func:`validate_bbox`; a model-frame box in original pixels: :func:`resize_bbox` (``round(v * W / w)``)
  and :func:`to_original_box` (then clamped, ``compute_overall_iou_with_gt``);
* the episode's final box (``VSearcherLoop.run``): :func:`final_answer_box`;
* the agent loop's tool calls (verl's hermes parser, one call per turn) and the zoom-in tool
  (``verl/tools/image_zoom_in_tool.py``, DeepEyes'): :func:`hermes_tool_calls`, :func:`run_tool_call`,
  :func:`zoom_box` (``_maybe_resize_bbox``); an unusable box gets the tool's error text and the episode goes on.

Model output is untrusted: nothing here raises on it. Every rule is checked against the fork's own functions
run on generated cases (``tests/protocol/test_searcher_rules.py``, ``tests/recipe/test_training_goldens.py``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ..base.text_scan import tagged_spans
from ..base.untrusted import loads
from ..imaging.geometry import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS, smart_resize

#: the zoom-in tool's name (the reward accepts no other)
TOOL_NAME = "image_zoom_in_tool"
#: the "not found" answer (``SPECIAL_BBOXES``, ``verl/utils/vsearch.py:13``)
NULL_BOX = (0, 0, 0, 0)
#: the tool's minimum crop side and its crops' ``min_pixels`` (``ImageZoomInTool.MIN_DIMENSION``, line 129)
MIN_DIMENSION = 28
#: a tool response text longer than this is cut in the middle (verl's ``multi_turn.max_tool_response_length``
#: 256 and ``tool_response_truncate_side: middle``, ``tool_agent_loop.py:445-452``)
MAX_TOOL_RESPONSE_LENGTH = 256
#: tool responses (crops or errors) of one episode: after this many the next assistant turn is the last
#: (``multi_turn.max_user_turns: 6``, ``max_assistant_turns: 7`` of ``qwen_2_5_vl_7b_async.yaml``)
MAX_USER_TURNS = 6

BBox = tuple[int, int, int, int]


class FormatError(ValueError):
    """A response that breaks the fork's format (``ParseError`` / the ``ValueError`` of ``validate_bbox``)."""


# ----------------------------------------------------------------------------- boxes (verl/utils/vsearch.py)
def validate_bbox(bbox: Any) -> BBox:
    """``validate_bbox`` (``vsearch.py:16-26``): a tuple of 4 ``int`` (Python's, so ``True`` passes, ``1.0``
    does not) with ``0 <= x1 < x2`` and ``0 <= y1 < y2``; else :class:`FormatError`."""
    if not (
        isinstance(bbox, tuple)
        and len(bbox) == 4
        and all(isinstance(n, int) for n in bbox)
        and 0 <= bbox[0] < bbox[2]
        and 0 <= bbox[1] < bbox[3]
    ):
        raise FormatError(f"invalid bbox: {bbox}")
    return bbox


def parse_answer_box(text: str) -> BBox | None:
    """``parse_bbox`` (``vsearch.py:55-66``) as the reward calls it: the text must be JSON whose tuple is the
    null box or passes :func:`validate_bbox`; None for anything else (the reward's extraction swallows every
    error, ``vsearch_batch.py:531-536``)."""
    try:
        bbox = tuple(loads(text))
        if bbox not in {NULL_BOX}:
            validate_bbox(bbox)
        return bbox
    except Exception:  # noqa: BLE001 - the fork's own catch-all: any failure is "no box"
        return None


def resize_bbox(bbox: Sequence[float], source_wh: Sequence[int], target_wh: Sequence[int]) -> BBox:
    """``resize_bbox`` without its final check (``vsearch.py:69-73``): ``round(v * W / w)`` per coordinate,
    the products taken in the fork's order (``(v * W) / w``, Python's ``round``: halves to even)."""
    return tuple(round(bbox[i] * target_wh[i % 2] / source_wh[i % 2]) for i in range(4))  # type: ignore[return-value]


def to_original_box(bbox: Sequence[float], frame_wh: Sequence[int], image_wh: Sequence[int]) -> BBox:
    """A model-frame box in original pixels as the reward scores it (``compute_overall_iou_with_gt``,
    ``vsearch.py:104-109``): :func:`resize_bbox`, then clamped to the image. May be empty (a box outside the
    image); the fork's ``validate_bbox`` after rounding raises when rounding collapses a side (an image shown
    enlarged more than 2x): here that box is simply empty (IoU 0) instead of stopping the training step."""
    x1, y1, x2, y2 = resize_bbox(bbox, frame_wh, image_wh)
    W, H = image_wh
    return (max(0, x1), max(0, y1), min(W, x2), min(H, y2))


def _intersection_area(a: Sequence[float], b: Sequence[float]) -> float:
    """``intersection_area`` (``vsearch.py:81-91``)."""
    x1, y1, x2, y2 = max(a[0], b[0]), max(a[1], b[1]), min(a[2], b[2]), min(a[3], b[3])
    if x2 < x1 or y2 < y1:
        return 0.0
    return (x2 - x1) * (y2 - y1)


# ----------------------------------------------------------------------------- format verdict (vsearch_batch.py)
def parse_response(response: str, required_tags: Sequence[str], excluded_tags: Sequence[str] = ()) -> dict[str, str]:
    """``parse_response`` (``vsearch_batch.py:253-321``): the ``required_tags`` each exactly once, in order,
    only whitespace around them, none nested in another's content, no ``excluded_tags`` anywhere; returns
    ``{tag: content}`` or raises :class:`FormatError`."""

    def contain_tag(text: str, tag: str) -> bool:
        return f"<{tag}>" in text or f"</{tag}>" in text

    for tag in excluded_tags:
        if contain_tag(response, tag):
            raise FormatError(f"excluded tag {tag} appears in the response")
    parsed: dict[str, str] = {}
    for tag in required_tags:
        response = response.lstrip()
        if not response.startswith(f"<{tag}>"):
            raise FormatError(f"missing opening tag for {tag}")
        response = response[len(f"<{tag}>") :]
        chunks = response.split(f"</{tag}>", 1)
        if len(chunks) == 1:
            raise FormatError(f"missing closing tag for {tag}")
        content, response = chunks
        for other in required_tags:
            if contain_tag(content, other):
                raise FormatError(f"nested tags detected in {tag}")
        parsed[tag] = content
    if response.strip():
        raise FormatError("unexpected content after the last pair of tags")
    return parsed


def tool_call_box(tool_call: str, frame_wh: Sequence[int]) -> tuple[BBox | None, str | None]:
    """The reward's ``tool_call_check_fn`` (``vsearch_batch.py:468-486``) on a ``<tool_call>`` content: strict
    JSON, an object named ``image_zoom_in_tool``, ``arguments.bbox_2d`` passing :func:`validate_bbox`, and a
    box with some area inside the model frame ``(0, 0, w, h)``. Returns ``(box, None)`` or ``(None, why)``."""
    try:
        call = loads(tool_call)
    except json.JSONDecodeError as e:
        return None, f"tool call is not JSON ({e})"
    if not isinstance(call, dict):
        return None, "tool call is not a JSON object"
    if call.get("name") != TOOL_NAME:
        return None, f"unknown tool {call.get('name')!r}"
    try:
        box = validate_bbox(tuple(call["arguments"]["bbox_2d"]))
    except Exception as e:  # noqa: BLE001 - extract_bbox_from_tool_call's failures, all "not a valid call"
        return None, f"tool call bbox_2d: {e}"
    if _intersection_area(box, (0, 0, *frame_wh)) == 0.0:
        return None, "tool call bbox_2d has no area inside the image"
    return box, None


def split_responses(solution: str) -> list[str]:
    """The assistant turns as ``compute_format_reward`` cuts the decoded response (``vsearch_batch.py:374``):
    split at every ``user\\n``, keep what follows the last ``assistant\\n`` of each piece (also inside a thought)."""
    return [r.split("assistant\n")[-1] for r in solution.split("user\n")]


@dataclass
class FormatVerdict:
    """r_format of one episode (``ok``), the tool boxes the reward saw (model frame, in order), the extracted
    answer (a box, the null box, the raw text for a sub-agent, or None) and why it failed."""

    ok: bool
    boxes: list[BBox] = field(default_factory=list)
    answer: Any = None
    error: str | None = None


def format_verdict(
    responses: Sequence[str],
    frame_wh: Sequence[int],
    *,
    answer_must_parse: bool = True,
    must_have_answer: bool = True,
    skip_last_response_if_empty: bool = False,
) -> FormatVerdict:
    """``compute_format_reward`` (``vsearch_batch.py:324-421``) with the vSearcher's checks: every turn but the
    last is ``<think>`` + ``<tool_call>`` (no ``<answer>``) whose call passes :func:`tool_call_box`; the last is
    such a tool call or ``<think>`` + ``<answer>`` (no ``<tool_call>``); with ``must_have_answer`` (the fork's
    setting) it must be the answer. ``answer_must_parse``: the out-of-loop reward's extraction
    (:func:`parse_answer_box`; a sub-agent's reward takes any answer text, ``vsearch_batch.py:562-566``).
    ``responses``: the assistant turns as :func:`split_responses` gives them."""
    responses = list(responses)
    if skip_last_response_if_empty and responses and not responses[-1]:
        responses = responses[:-1]
    verdict = FormatVerdict(False)
    for i, response in enumerate(responses):
        try:
            content = parse_response(response, ["think", "tool_call"], ["answer"])
        except FormatError as e:
            if i + 1 == len(responses):
                must_have_answer = True
                break
            verdict.error = f"turn {i + 1}: not a tool call ({e})"
            return verdict
        box, why = tool_call_box(content["tool_call"], frame_wh)
        if box is None:
            verdict.error = f"turn {i + 1}: {why}"
            return verdict
        verdict.boxes.append(box)
    if responses:
        try:
            answer = parse_response(responses[-1], ["think", "answer"], ["tool_call"])["answer"]
        except FormatError as e:
            if must_have_answer:
                verdict.error = f"last turn: no answer ({e})"
                return verdict
        else:
            if answer_must_parse:
                verdict.answer = parse_answer_box(answer)
                if must_have_answer and verdict.answer is None:
                    verdict.error = "last turn: the answer is not [x1, y1, x2, y2] of integers or [0, 0, 0, 0]"
                    return verdict
            else:
                verdict.answer = answer.strip()
    verdict.ok = True
    return verdict


def n_valid_tool_calls(verdict: FormatVerdict, solution: str) -> int:
    """``n_valid_tool_calls`` of the reward (``vsearch_batch.py:499``): the boxes the verdict accepted, at most
    the number of tool responses (``user\\n<tool_response>`` in the decoded response, crops and errors alike)."""
    return min(len(verdict.boxes), solution.count("user\n<tool_response>"))


# ----------------------------------------------------------------------------- the episode's final box
def final_answer_box(last_response: str) -> BBox | None:
    """The box ``VSearcherLoop.run`` hands the vReasoner (``insight_o3_agent_loop.py:89-96``): the text after the
    last ``<answer>`` up to the next ``</answer>`` (the whole turn without one), stripped, through
    :func:`parse_answer_box`; None when it does not parse (the vReasoner's episode then stops)."""
    return parse_answer_box(last_response.split("<answer>")[-1].split("</answer>")[0].strip())


# ----------------------------------------------------------------------------- tool calls and the zoom-in tool


@dataclass(frozen=True)
class ToolCall:
    """One call the agent loop extracted (verl's hermes parser): its ``name`` and JSON ``arguments``."""

    name: Any
    arguments: Any


def hermes_tool_calls(text: str) -> list[ToolCall]:
    """verl's ``HermesToolParser.extract_tool_calls`` (``tool_parser.py:87-106``): every
    ``<tool_call>...</tool_call>`` whose content is JSON with ``name`` and ``arguments``; others are skipped.
    A turn without one ends the episode; only the first is run (``max_parallel_calls: 1``)."""
    if "<tool_call>" not in text or "</tool_call>" not in text:
        return []
    calls = []
    for match in tagged_spans(text, "<tool_call>", "</tool_call>"):  # the parser's <tool_call>(.*?)</tool_call>
        try:
            call = loads(match)
            calls.append(ToolCall(call["name"], json.loads(json.dumps(call["arguments"], ensure_ascii=False))))
        except Exception:  # noqa: BLE001 - the parser logs and skips a call it cannot decode
            continue
    return calls


def tool_frame_size(image_wh: Sequence[int]) -> tuple[int, int]:
    """``(w, h)`` of the image the zoom-in tool crops: ``qwen_vl_utils.fetch_image`` of the original with its
    defaults (``smart_resize``, ``min_pixels`` 4·28², ``max_pixels`` 16384·28²; ``image_zoom_in_tool.py:351``)."""
    h, w = smart_resize(int(image_wh[1]), int(image_wh[0]), min_pixels=QWEN_MIN_PIXELS, max_pixels=QWEN_MAX_PIXELS)
    return w, h


def _validate_zoom(left: float, top: float, right: float, bottom: float) -> bool:
    """``ImageZoomInTool._validate_bbox`` (lines 181-203)."""
    try:
        if not (left < right and top < bottom):
            return False
        height, width = bottom - top, right - left
        if min(height, width) == 0:
            return False
        return not max(height, width) / min(height, width) > 100
    except Exception:  # noqa: BLE001 - the tool's own catch-all
        return False


def zoom_box(
    bbox_2d: Any, image_width: int, image_height: int, resized_image_width: int, resized_image_height: int
) -> list[float] | None:
    """``ImageZoomInTool._maybe_resize_bbox`` (lines 205-311), line for line: the model-frame box scaled to the
    tool's image, clamped; a side under 28 px grows around the centre keeping the aspect ratio (scaled down to
    fit the image, shifted inside it, then ``floor``/``ceil``); None when unusable (inverted, empty, aspect
    over 100, still under 28 px). May raise on non-numeric values (the tool reports that as an error text)."""
    left, top, right, bottom = bbox_2d
    left *= image_width / resized_image_width
    right *= image_width / resized_image_width
    top *= image_height / resized_image_height
    bottom *= image_height / resized_image_height
    left, top = max(0.0, float(left)), max(0.0, float(top))
    right, bottom = min(float(image_width), float(right)), min(float(image_height), float(bottom))
    if not _validate_zoom(left, top, right, bottom):
        return None
    current = [left, top, right, bottom]
    height, width = bottom - top, right - left
    if height < MIN_DIMENSION or width < MIN_DIMENSION:
        cx, cy = (left + right) / 2.0, (top + bottom) / 2.0
        min_dim = min(height, width)
        if min_dim == 0:
            return None
        ratio = MIN_DIMENSION / min_dim
        tw, th = width * ratio, height * ratio
        if tw > image_width:
            scale_down = image_width / tw
            tw = image_width
            th *= scale_down
        if th > image_height:
            scale_down = image_height / th
            th = image_height
            tw *= scale_down
        new_left, new_top = cx - tw / 2.0, cy - th / 2.0
        if new_left < 0:
            new_left = 0
        if new_top < 0:
            new_top = 0
        if new_left + tw > image_width:
            new_left = image_width - tw
        if new_top + th > image_height:
            new_top = image_height - th
        current = [math.floor(new_left), math.floor(new_top), math.ceil(new_left + tw), math.ceil(new_top + th)]
    fl, ft, fr, fb = current
    if not _validate_zoom(fl, ft, fr, fb):
        return None
    if math.floor(fb) - math.floor(ft) < MIN_DIMENSION or math.floor(fr) - math.floor(fl) < MIN_DIMENSION:
        return None
    return current


@dataclass(frozen=True)
class ZoomResult:
    """What one tool call produced: a crop (``box``: the crop box in the tool's image, as PIL cuts it: each
    coordinate ``round``-ed; ``shown_wh``: the size the crop is shown at) or the tool's ``error`` text."""

    box: tuple[int, int, int, int] | None = None
    shown_wh: tuple[int, int] | None = None
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def truncate_tool_text(text: str) -> str:
    """verl's tool response cut (``tool_agent_loop.py:445-452``, side ``middle``)."""
    if len(text) <= MAX_TOOL_RESPONSE_LENGTH:
        return text
    half = MAX_TOOL_RESPONSE_LENGTH // 2
    return text[:half] + "...(truncated)..." + text[-half:]


def run_tool_call(call: ToolCall, tool_wh: Sequence[int], frame_wh: Sequence[int], max_pixels: int) -> ZoomResult:
    """The agent loop's ``_call_tool`` + ``ImageZoomInTool.execute`` (``tool_agent_loop.py:418-452``,
    ``image_zoom_in_tool.py:361-425``) on one call: the same Python operations in the same order, so a call
    the tool cannot use gets the fork's exact error text (truncated as verl does). ``tool_wh``: the tool's image
    (:func:`tool_frame_size`), ``frame_wh``: the model frame the box refers to, ``max_pixels``: the budget the
    crop is ``smart_resize``-d to (``min_pixels`` 28·28)."""
    try:
        {TOOL_NAME: None}[call.name]  # self.tools[tool_name]: KeyError / TypeError on an unknown name
        bbox_2d = call.arguments.get("bbox_2d")
        if not bbox_2d or len(bbox_2d) != 4:
            return ZoomResult(error="Error: bbox_2d parameter is missing or not a list of 4 numbers.")
        try:
            box = zoom_box(bbox_2d, int(tool_wh[0]), int(tool_wh[1]), int(frame_wh[0]), int(frame_wh[1]))
            if box is None:
                return ZoomResult(
                    error=truncate_tool_text(
                        f"Error: The specified bounding box {bbox_2d} is invalid or results in a crop smaller than "
                        f"the minimum size of {MIN_DIMENSION}x{MIN_DIMENSION}."
                    )
                )
            x0, y0, x1, y1 = (int(round(v)) for v in box)  # PIL's Image.crop rounds a float box
            cw, ch = x1 - x0, y1 - y0
        except Exception as e:  # noqa: BLE001 - the tool's own catch-all, reported to the model
            return ZoomResult(error=truncate_tool_text(f"Error processing image zoom-in: {e}"))
        try:
            nh, nw = smart_resize(ch, cw, min_pixels=MIN_DIMENSION * MIN_DIMENSION, max_pixels=max_pixels)
        except Exception as e:  # noqa: BLE001
            return ZoomResult(error=truncate_tool_text(f"Error resizing cropped image: {e}"))
        return ZoomResult(box=(x0, y0, x1, y1), shown_wh=(nw, nh))
    except Exception as e:  # noqa: BLE001 - _call_tool's catch-all
        return ZoomResult(error=truncate_tool_text(f"Error when executing tool: {e}"))


__all__ = [
    "TOOL_NAME",
    "NULL_BOX",
    "MIN_DIMENSION",
    "MAX_USER_TURNS",
    "FormatError",
    "FormatVerdict",
    "ToolCall",
    "ZoomResult",
    "validate_bbox",
    "parse_answer_box",
    "resize_bbox",
    "to_original_box",
    "parse_response",
    "tool_call_box",
    "split_responses",
    "format_verdict",
    "n_valid_tool_calls",
    "final_answer_box",
    "hermes_tool_calls",
    "tool_frame_size",
    "zoom_box",
    "truncate_tool_text",
    "run_tool_call",
]
