"""Parsing of model output: final answers, vReasoner turns and vSearcher turns.

Model output is untrusted text. Every function here returns a result describing what was found
(or why nothing usable was), and never raises on malformed input.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from ..base.text_scan import box_lists, boxed_bounds, outer_braces, tagged_spans, without_tagged
from ..base.untrusted import loads
from .statuses import ReplyKind, SearcherAction


# ----------------------------------------------------------------------------- final answers
def extract_boxed(text: str) -> str | None:
    """Content of the last closed ``\\boxed{...}`` (stripped), with nested braces handled; None if absent/unclosed."""
    bounds = boxed_bounds(text)[1]
    return text[bounds[0] : bounds[1]].strip() if bounds else None


def first_boxed(text: str) -> str | None:
    """Content of the first closed ``\\boxed{...}`` (stripped, nested braces handled); None if absent/unclosed."""
    bounds = boxed_bounds(text)[0]
    return text[bounds[0] : bounds[1]].strip() if bounds else None


def extract_answer_span(text: str) -> str:
    """The evaluation's rule-based answer span (the released ``evaluate.py``): the content of the last
    ``<answer>...</answer>`` (stripped) or else the whole text as it is; then the content of the last
    ``\\boxed{}`` inside that (stripped), if any. The original's ``\\boxed\\{(.*?)\\}`` cut nested
    braces short (``\\boxed{\\text{A}}`` gave ``\\text{A``); here they are balanced."""
    tags = tagged_spans(text, "<answer>", "</answer>")
    span = tags[-1].strip() if tags else text
    boxed = extract_boxed(span)
    return boxed if boxed is not None else span


def extract_verify_span(text: str) -> str | None:
    """The span the fork's in-loop answer check judges (``compute_score_single_vreasoner``): the first
    ``\\boxed{}`` content, else the first ``<answer>...</answer>`` content, stripped; None when there
    is neither (or it is empty). Nested braces are balanced (the fork cut at the first ``}``); a ``\\boxed{``
    that is never closed is cut as the fork cuts it (at the first ``}``, else the end of the text)."""
    span = first_boxed(text)
    if span is None and "\\boxed{" in text:
        span = text.split("\\boxed{", 1)[1].split("}", 1)[0].strip()
    if span is None and "<answer>" in text:
        rest = text.split("<answer>", 1)[1]
        if "</answer>" in rest:
            span = rest.split("</answer>", 1)[0].strip()
    return span or None


_MCQ_FORMS = [
    re.compile(r"^\(?([A-Z])\)?[.:)]?$"),  # C  (C)  C.  C)  C:
    # "answer is: C": each run of spaces belongs to one \s* (three in a row backtracked cubically on a long run)
    re.compile(r"^(?:the\s+)?(?:final\s+)?(?:answer|option|choice)\s*(?:is\s*)?(?:[:：]\s*)?\(?([A-Z])\)?[.)]?$", re.I),
    re.compile(r"^\(?([A-Z])[.)]\s+\S.*$", re.DOTALL),  # C. text of the option / (C) text
    re.compile(r"^\\text\{\s*([A-Z])\s*\}$"),  # \text{C}
]


def mcq_letter(span: str, letters: str) -> str | None:
    """The option letter a short answer span names, in the usual forms (``C``, ``(C)``, ``C.``,
    ``Answer: C``, ``C. option text``, ``\\text{C}``); None when it is not unambiguously one letter."""
    s = span.strip().strip("*`'\" ").strip()
    for pat in _MCQ_FORMS:
        m = pat.match(s)
        if m and m.group(1) in letters:
            return m.group(1)
    return None


_OPTION_LINE = re.compile(r"^\s*\(?([A-Z])\s*[.)\]:]", re.MULTILINE)
#: the option lines of a text: a line's own leading spaces only (``\s*`` from each line start of a run of empty
#: lines re-read the run; a line start it led to is tried on its own, so the letters found are the same)
_OPTION_LINES = re.compile(r"^[^\S\n]*\(?([A-Z])\s*[.)\]:]", re.MULTILINE)
_INLINE_OPTION = re.compile(r"(?:^|\s)\(?([A-Z])[.)]\s*\S")


def option_letters(options: str | list | dict | None) -> str:
    """Letters of an options field: ``"A. x\\nB. y"``, ``"(A) x\\n(B) y"``, a list or a dict."""
    if options is None:
        return ""
    if isinstance(options, dict):
        return "".join(sorted(str(k).strip().upper()[:1] for k in options))
    if isinstance(options, (list, tuple)):
        found = [m.group(1) for o in options if (m := _OPTION_LINE.match(str(o)))]
        return "".join(found) if len(found) == len(options) else "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[: len(options)]
    text = str(options)
    by_line = "".join(dict.fromkeys(_OPTION_LINES.findall(text)))
    # options written on one line ("A. x  B. y  C. z", seen in TreeBench): take the run A, B, C, ...
    inline = ""
    for letter in dict.fromkeys(_INLINE_OPTION.findall(text)):
        if letter != chr(ord("A") + len(inline)):
            break
        inline += letter
    return inline if len(inline) > len(by_line) else by_line


def format_options(options: str | list | dict | None) -> str | None:
    """Options as the text block shown to models (strings are kept as they are)."""
    if options is None or options == "" or options == [] or options == {}:
        return None
    if isinstance(options, dict):
        return "\n".join(f"{k}. {v}" for k, v in options.items())
    if isinstance(options, (list, tuple)):
        letters = option_letters(options)
        if all(_OPTION_LINE.match(str(o)) for o in options):
            return "\n".join(str(o) for o in options)
        return "\n".join(f"{letter}. {o}" for letter, o in zip(letters, options))
    return str(options)


# ----------------------------------------------------------------------------- vReasoner
FEEDBACK_VALUES = ("helpful", "unhelpful", "NA")


@dataclass
class ReasonerTurn:
    """What one vReasoner message asks for.

    ``action`` is ``"search"`` (``description`` set), ``"answer"`` (``answer`` = boxed content) or
    ``"invalid"`` (neither, or — in training mode — no valid ``<tool_feedback>``).
    """

    action: ReplyKind
    description: str | None = None
    answer: str | None = None
    feedback: str | None = None  # the valid <tool_feedback> value, None if absent or invalid
    error: str | None = None


def _between(text: str, start: str, end: str) -> str | None:
    """Text after the first ``start`` up to the next ``end`` (None unless both occur), the fork's
    plain ``split`` parsing."""
    if start not in text or end not in text:
        return None
    return text.split(start, 1)[1].split(end, 1)[0]


def parse_region_description(text: str) -> str | None:
    """The fork's rule: inside the first ``<tool_call>...</tool_call>``, after ``region_description=``,
    the text between the first ``{`` and the last ``}`` (stripped; may be empty). None otherwise."""
    segment = _between(text, "<tool_call>", "</tool_call>")
    if segment is None or "region_description=" not in segment:
        return None
    part = segment.split("region_description=", 1)[1]
    if "{" in part and "}" in part:
        return part.split("{", 1)[1].rsplit("}", 1)[0].strip()
    return None


def parse_tool_feedback(text: str, first_round: bool) -> str | None:
    """The first ``<tool_feedback>`` value if it is valid for the round: ``NA`` before any search
    result, ``helpful``/``unhelpful`` after one (exact, as the fork checks); else None."""
    value = _between(text, "<tool_feedback>", "</tool_feedback>")
    value = value.strip() if value is not None else None
    if first_round:
        return value if value == "NA" else None
    return value if value in ("helpful", "unhelpful") else None


def parse_reasoner_turn(text: str, require_feedback: bool = False, first_round: bool = True) -> ReasonerTurn:
    """Parse a vReasoner message the way the released fork does (``vsearch_gpt_async.py``): the whole
    text is searched (``<think>`` included); a tool call is a ``region_description={...}`` in the first
    ``<tool_call>`` block and wins over an answer in the same message; an answer is any
    ``\\boxed{``. With ``require_feedback`` (training) a turn is valid only with a
    ``<tool_feedback>`` valid for the round (``first_round``: no search result yet)."""
    text = text or ""
    desc = parse_region_description(text)
    has_box = "\\boxed{" in text
    feedback = parse_tool_feedback(text, first_round)
    if desc is None and not has_box:
        why = (
            "tool call without region_description={...}"
            if "<tool_call>" in text
            else "neither a tool call nor a boxed answer"
        )
        return ReasonerTurn(ReplyKind.INVALID, feedback=feedback, error=why)
    if require_feedback and feedback is None:
        return ReasonerTurn(
            ReplyKind.INVALID,
            feedback=None,
            error="missing or invalid <tool_feedback> (NA in the first turn, helpful/unhelpful after)",
        )
    if desc is not None:
        return ReasonerTurn(ReplyKind.SEARCH, description=desc, feedback=feedback)
    answer = first_boxed(text)
    if answer is None:  # "\\boxed{" without a closing brace: the fork takes the rest of the text
        answer = text.split("\\boxed{", 1)[1].split("}", 1)[0].strip()
    return ReasonerTurn(ReplyKind.ANSWER, answer=answer, feedback=feedback)


# ----------------------------------------------------------------------------- vSearcher
@dataclass
class SearcherTurn:
    """What one vSearcher message does (F.2).

    ``action``: ``"tool_call"`` (``bbox`` = raw values from the model, ``label`` optional),
    ``"answer"`` (``bbox`` = the raw answer values), or ``"invalid"`` (``error`` says why).
    ``has_think`` records whether the turn followed ``<think>...</think>``.
    """

    action: SearcherAction
    bbox: list | None = None
    label: str | None = None
    has_think: bool = False
    error: str | None = None


def _loads_lenient(body: str) -> Any:
    body = body.strip()
    try:
        return loads(body)
    except json.JSONDecodeError:
        pass
    inner = outer_braces(body)  # stray text around the object
    if inner is not None:
        try:
            return loads(inner)
        except json.JSONDecodeError:
            return None
    return None


def parse_searcher_turn(text: str, simple_prompt: bool = False) -> SearcherTurn:
    """Parse a vSearcher message. ``simple_prompt``: the untrained-baseline prompt, whose reply is
    just ``[x_min, y_min, x_max, y_max]`` somewhere in the text (the last such list counts)."""
    text = text or ""
    visible = without_tagged(text, "<think>", "</think>")
    has_think = len(visible) < len(text)
    if simple_prompt:
        boxes = box_lists(visible)
        if not boxes:
            return SearcherTurn(
                SearcherAction.INVALID, has_think=has_think, error="no [x_min, y_min, x_max, y_max] in reply"
            )
        return SearcherTurn(SearcherAction.ANSWER, bbox=[float(v) for v in boxes[-1]], has_think=has_think)
    calls = tagged_spans(visible, "<tool_call>", "</tool_call>")
    answers = tagged_spans(visible, "<answer>", "</answer>")
    if calls:
        obj = _loads_lenient(calls[0])
        if not isinstance(obj, dict):
            return SearcherTurn(SearcherAction.INVALID, has_think=has_think, error="tool call is not a JSON object")
        if obj.get("name") != "image_zoom_in_tool":
            return SearcherTurn(SearcherAction.INVALID, has_think=has_think, error=f"unknown tool {obj.get('name')!r}")
        args = obj.get("arguments")
        if isinstance(args, str):
            args = _loads_lenient(args)
        if not isinstance(args, dict):
            return SearcherTurn(
                SearcherAction.INVALID, has_think=has_think, error="tool call arguments are not an object"
            )
        bbox = args.get("bbox_2d", args.get("bbox"))
        if bbox is None:
            return SearcherTurn(SearcherAction.INVALID, has_think=has_think, error="tool call has no bbox_2d")
        label = args.get("label")
        return SearcherTurn(
            SearcherAction.TOOL_CALL,
            bbox=bbox if isinstance(bbox, list) else [bbox],
            label=str(label) if label is not None else None,
            has_think=has_think,
        )
    if answers:
        body = answers[-1].strip()
        try:
            val = loads(body)
        except json.JSONDecodeError:
            found = box_lists(body, first=True)
            val = [float(v) for v in found[0]] if found else None
        if not isinstance(val, list):
            return SearcherTurn(
                SearcherAction.INVALID, has_think=has_think, error="answer is not a [x1, y1, x2, y2] list"
            )
        return SearcherTurn(SearcherAction.ANSWER, bbox=val, has_think=has_think)
    return SearcherTurn(SearcherAction.INVALID, has_think=has_think, error="neither <tool_call> nor <answer>")
