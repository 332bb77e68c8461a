"""``layout_parsing``: the text blocks of an image, in reading order, as OpenSearch-VL reports them.

Two backends (the run's ``layout_backend`` setting):

* ``api`` — the release's (``search.layout_parsing``): the image POSTed base64 to a PP-StructureV3-compatible
  endpoint (``LAYOUT_PARSING_API_URL``, optional ``LAYOUT_PARSING_TOKEN``), the blocks labelled
  ``paragraph_title``, ``text`` or ``vision_footnote`` kept;
* ``tesseract`` (the default: runs offline) — Tesseract OCR (Debian's ``tesseract-ocr``, called through
  ``pytesseract``, the ``tools`` extra), one block per paragraph Tesseract finds, in its reading order.

The observation is the release's: ``Tool execution result:\\nLayout Parsing SUCCESS.\\n\\nALL RECOGNIZED
TEXT:\\n`` and the blocks one per line (``(no text detected)`` when there is none).
"""

from __future__ import annotations

import asyncio
import base64
import os
from collections.abc import Mapping
from typing import Any

from ..base.json_types import JSONObject
from ..base.redaction import register_secret
from .base import BackendFailed, BadArguments, LimitExceeded, Observation, Unavailable
from .http import HTTPFailed, request
from .tool import Tool, ToolContext

ERR = "Tool execution error:\n"
TEXT_LABELS = ("paragraph_title", "text", "vision_footnote")


def report(texts: list[str]) -> str:
    body = "\n".join(texts) or "(no text detected)"
    return "Tool execution result:\nLayout Parsing SUCCESS.\n\nALL RECOGNIZED TEXT:\n" + body


def api_texts(result: Any) -> list[str]:
    """The text blocks of a PP-StructureV3 reply (``result.layoutParsingResults[0].prunedResult.parsing_res_list``)."""
    if not isinstance(result, dict):
        return []
    runs = result.get("layoutParsingResults", [{}]) or [{}]
    blocks = (runs[0] if isinstance(runs[0], dict) else {}).get("prunedResult", {}).get("parsing_res_list", [])
    return [
        str(b["block_content"]).strip()
        for b in blocks or []
        if isinstance(b, dict) and b.get("block_label") in TEXT_LABELS and str(b.get("block_content", "")).strip()
    ]


def parse_via_api(path: str, arguments: Mapping[str, Any], url: str, token: str, max_bytes: int) -> list[str]:
    with open(path, "rb") as fh:
        file_data = base64.b64encode(fh.read()).decode("ascii")
    headers = {"Content-Type": "application/json"}
    if token:
        register_secret(token)
        headers["Authorization"] = f"token {token}"
    payload = {
        "file": file_data,
        "fileType": 1,
        "useDocOrientationClassify": bool(arguments.get("use_doc_orientation_classify", False)),
        "useDocUnwarping": bool(arguments.get("use_doc_unwarping", False)),
        "useChartRecognition": bool(arguments.get("use_chart_recognition", False)),
    }
    try:
        r = request(url, method="POST", headers=headers, json_body=payload, timeout=60, max_bytes=max_bytes)
    except HTTPFailed as e:
        raise BackendFailed(f"{ERR}Layout parsing error: {e}") from None
    if r.status != 200:
        raise BackendFailed(f"{ERR}API request failed with status {r.status}: {r.text[:200]}")
    try:
        data = r.json()
    except ValueError as e:
        raise BackendFailed(f"{ERR}Layout parsing error: {e}") from None
    return api_texts(data.get("result", {}) if isinstance(data, dict) else {})


def tesseract_version() -> str | None:
    """The installed Tesseract's version, or None (not installed, or pytesseract missing)."""
    try:
        import pytesseract

        return str(pytesseract.get_tesseract_version())
    except Exception:
        return None


def parse_via_tesseract(path: str, timeout: float) -> list[str]:
    """One text block per Tesseract paragraph (block, paragraph), lines joined by spaces, in reading order."""
    try:
        import pytesseract
        from PIL import Image
    except ImportError:
        raise Unavailable(
            f"{ERR}layout_parsing: the offline OCR needs pytesseract (pip install 'insight-o3[tools]') and "
            "Tesseract (apt-get install tesseract-ocr)."
        ) from None
    try:
        with Image.open(path) as im:
            data = pytesseract.image_to_data(im.convert("RGB"), output_type=pytesseract.Output.DICT, timeout=timeout)
    except pytesseract.TesseractNotFoundError:
        raise Unavailable(
            f"{ERR}layout_parsing: Tesseract is not installed (apt-get install tesseract-ocr tesseract-ocr-eng)."
        ) from None
    except RuntimeError as e:  # pytesseract's timeout
        raise LimitExceeded(f"{ERR}layout_parsing: Tesseract {e}") from None
    blocks: dict[tuple[int, int], list[str]] = {}
    for i, word in enumerate(data["text"]):
        if str(word).strip() and float(data["conf"][i]) >= 0:
            blocks.setdefault((data["block_num"][i], data["par_num"][i]), []).append(str(word).strip())
    return [" ".join(words) for _, words in sorted(blocks.items())]


def layout_settings(ctx: ToolContext) -> tuple[str, str, str]:
    backend = str(ctx.settings.get("layout_backend") or "tesseract")
    url = str(ctx.settings.get("layout_api_url") or os.environ.get("LAYOUT_PARSING_API_URL", ""))
    token = os.environ.get("LAYOUT_PARSING_TOKEN", "")
    return backend, url, token


class LayoutParsingTool(Tool):
    name = "layout_parsing"
    schema: JSONObject = {
        "name": "layout_parsing",
        "description": "Perform document layout parsing on an image reference to extract structured text.",
        "parameters": {
            "type": "object",
            "properties": {
                "image": {"type": "string"},
                "use_chart_recognition": {"type": "boolean", "default": False},
                "use_doc_orientation_classify": {"type": "boolean", "default": False},
            },
            "required": [],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        if arguments.get("file_path"):
            raise BadArguments(
                f"{ERR}layout_parsing reads image references only ('image': 'img_n'); 'file_path' is not accepted."
            )
        ref = arguments.get("image", "")
        if not isinstance(ref, str) or ref not in ctx.images:
            raise BadArguments(f"{ERR}layout_parsing needs 'file_path' or a resolvable 'image' reference.")
        source = ctx.images.get(ref)
        if source.size[0] * source.size[1] > ctx.limits.max_pixels:
            raise LimitExceeded(f"{ERR}{ref} has more pixels than the per-call cap of {ctx.limits.max_pixels}")
        backend, url, token = layout_settings(ctx)
        if backend == "api":
            if not url:
                raise Unavailable(
                    f"{ERR}Layout parsing endpoint is not configured. "
                    "Set LAYOUT_PARSING_API_URL (and optionally LAYOUT_PARSING_TOKEN)."
                )
            texts = await asyncio.to_thread(parse_via_api, source.path, arguments, url, token, ctx.limits.page_bytes)
        else:
            texts = await asyncio.to_thread(parse_via_tesseract, source.path, max(1.0, ctx.limits.seconds - 1))
        return Observation(report(texts))
