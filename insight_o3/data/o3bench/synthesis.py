"""Step ``synthesize``: E.2 question synthesis by a text-only model (B.2 step 3).

The request is one user message, the E.2 prompt of the image's type (chart or map) with its inputs filled in
(:func:`build_prompt`); the model never sees the image. The inputs are the full image's E.1 sections and, per
layout, its id and text:

* ``GLOBAL_OCR``: the full image's ``Extracted OCR`` section; ``GLOBAL_CAPTION``: its ``Detailed Caption``;
* ``LAYOUTS``: a JSON array ``[{"layout_id": 1, "caption_or_ocr": "..."}, ...]`` in layout-id order, where
  ``caption_or_ocr`` is (``--layout_text``) ``both`` (default: the caption, then ``OCR:`` and the OCR text when the
  crop has text; B.2 gives the model "the layout set with captions and OCR texts"), ``ocr`` (the OCR text, the
  caption when there is none) or ``caption``.

The reply is parsed as the JSON array the prompt asks for (:func:`parse_items`); a reply without one is asked again
(``--parse_retries``) and then recorded as failed.
"""

from __future__ import annotations

import json
import re

from .extraction import Extraction
from .prompts import synthesis_prompt
from .records import SourceImage

LAYOUT_TEXT_MODES = ("both", "ocr", "caption")
_FENCED = re.compile(r"```[a-zA-Z]*[ \t]*\n(.*?)```", re.DOTALL)


class SynthesisFormatError(ValueError):
    """A reply without a JSON array of items."""


def layout_text(ex: Extraction, mode: str = "both") -> str:
    """A layout's ``caption_or_ocr`` text."""
    if mode == "caption":
        return ex.caption
    if mode == "ocr":
        return ex.ocr if ex.has_text else ex.caption
    if mode == "both":
        return f"{ex.caption}\nOCR: {ex.ocr}" if ex.has_text else ex.caption
    raise ValueError(f"layout text mode must be one of {LAYOUT_TEXT_MODES}, got {mode!r}")


def layouts_json(layouts: list[tuple[int, str]]) -> str:
    """The ``LAYOUTS`` input: ``[{"layout_id", "caption_or_ocr"}]`` as indented JSON (non-ASCII kept)."""
    return json.dumps([{"layout_id": i, "caption_or_ocr": t} for i, t in layouts], indent=2, ensure_ascii=False)


def build_prompt(source: SourceImage, full: Extraction, per_layout: dict[int, Extraction], mode: str = "both") -> str:
    """The filled E.2 prompt of one image; every layout of ``source`` must have an extraction."""
    missing = sorted(source.layout_ids - set(per_layout))
    if missing:
        raise ValueError(f"{source.key}: no extraction for layout(s) {missing}")
    items = [(lay.layout_id, layout_text(per_layout[lay.layout_id], mode)) for lay in source.layouts]
    return synthesis_prompt(source.subset, full.ocr, full.caption, layouts_json(items))


def _candidates(text: str) -> list[str]:
    out = [m.group(1) for m in _FENCED.finditer(text)]
    out.append(text)
    first, last = text.find("["), text.rfind("]")
    if 0 <= first < last:
        out.append(text[first : last + 1])
    return out


def parse_items(text: str | None) -> list:
    """The JSON array of a reply: the first fenced code block that holds one, else the whole reply, else the text
    from its first ``[`` to its last ``]``. Elements are returned as they are (validation judges them). Raises
    :class:`SynthesisFormatError` when there is no non-empty array."""
    text = (text or "").strip()
    if not text:
        raise SynthesisFormatError("empty reply")
    for cand in _candidates(text):
        try:
            value = json.loads(cand)
        except ValueError:
            continue
        if isinstance(value, list):
            if not value:
                raise SynthesisFormatError("the JSON array is empty")
            return value
    raise SynthesisFormatError("no JSON array of items in the reply")
