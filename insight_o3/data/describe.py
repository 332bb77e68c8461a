"""Region descriptions for layout boxes (Appendix C.2): red box on the image, the C.2 prompt, parse
``region_description={...}``.

:func:`describe_box` makes one box's record; the resumable run over all boxes (concurrency, resume,
failures retried on the next run unless ``retry_failed=False``) is
:func:`insight_o3.data.region_localization.build_regions`. Retries of transient HTTP errors are
the ``openai`` SDK's own.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw

from ..base.json_types import JSONObject
from ..base.redaction import failure_reason
from ..endpoints.chat import chat_once
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.geometry import fit_max_pixels
from ..imaging.images import encode_pil, open_image
from ..protocol.prompts import REGION_DESCRIPTION_SYSTEM_PROMPT, REGION_DESCRIPTION_USER_PROMPT

_KEY = re.compile(r"region_description\s*=\s*")


def parse_description(text: str | None) -> str | None:
    """The content of the last ``region_description={...}`` (balanced braces), or None.

    Tolerates a missing closing brace or missing braces (the rest of the line is taken)."""
    if not text:
        return None
    matches = list(_KEY.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end() :]
    if rest.startswith("{"):
        depth = 0
        for k, ch in enumerate(rest):
            depth += (ch == "{") - (ch == "}")
            if depth == 0:
                desc = rest[1:k]
                break
        else:
            desc = rest[1:]
    else:
        desc = rest.split("\n")[0]
    desc = desc.strip().strip('"').strip()
    return desc or None


@dataclass(frozen=True)
class BoxTask:
    sample_key: str
    image: str
    width: int
    height: int
    bbox: tuple[float, float, float, float]
    label: str
    merged_from: tuple[str, ...]
    source: str


def draw_red_box(path: str, bbox: Sequence[float], max_pixels: int | None) -> str:
    """The image (downscaled under ``max_pixels``) with a red rectangle around ``bbox``, as a data URL."""
    im = open_image(path)
    W, H = im.size
    size = fit_max_pixels((W, H), max_pixels)
    if size != (W, H):
        im = im.resize(size, Image.Resampling.BICUBIC)
    sx, sy = size[0] / W, size[1] / H
    x1, y1, x2, y2 = bbox
    width = max(2, round(min(size) / 250))
    ImageDraw.Draw(im).rectangle((x1 * sx, y1 * sy, x2 * sx - 1, y2 * sy - 1), outline=(255, 0, 0), width=width)
    return encode_pil(im, "JPEG", 90)


def build_messages(data_url: str) -> list[JSONObject]:
    return [
        {"role": "system", "content": REGION_DESCRIPTION_SYSTEM_PROMPT},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": data_url, "detail": "high"}},
                {"type": "text", "text": REGION_DESCRIPTION_USER_PROMPT},
            ],
        },
    ]


@dataclass
class DescribeConfig:
    model: str
    max_pixels: int | None = 1280 * 1280
    max_tokens: int | None = None
    temperature: float | None = None
    retry_failed: bool = True


def task_record(t: BoxTask) -> dict[str, Any]:
    """The fields of a box every description record starts with."""
    return {
        "sample_key": t.sample_key,
        "image": t.image,
        "width": t.width,
        "height": t.height,
        "bbox": [round(v, 2) for v in t.bbox],
        "label": t.label,
        "source": t.source,
        "merged_from": list(t.merged_from),
    }


async def describe_box(client: Any, t: BoxTask, cfg: DescribeConfig) -> dict[str, Any]:
    """One box's record: ``status`` ``ok`` with its ``description``, or ``failed`` with the ``error`` (an
    API failure after the SDK's retries, an unusable image, a reply without ``region_description={...}``)."""
    rec = task_record(t)
    try:
        url = await asyncio.to_thread(draw_red_box, t.image, t.bbox, cfg.max_pixels)
        kw: dict[str, Any] = {}
        if cfg.max_tokens:
            kw["max_completion_tokens"] = cfg.max_tokens
        if cfg.temperature is not None:
            kw["temperature"] = cfg.temperature
        text = (await chat_once(client, cfg.model, build_messages(url), **kw)).text
        desc = parse_description(text)
        if desc is None:
            rec.update(status="failed", error="no region_description={...} in the reply", raw=text[:2000])
        else:
            rec.update(status="ok", description=desc)
    except asyncio.CancelledError:
        raise
    except EXPECTED_ERRORS as e:  # recorded, retried on the next run
        rec.update(status="failed", error=failure_reason(e, 2000))
    return rec
