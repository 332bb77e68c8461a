"""Region descriptions for layout boxes (Appendix C.2): red box on the image, the C.2 prompt, parse
``region_description={...}``.

Requests run concurrently (``asyncio`` with a semaphore of ``concurrency``); every finished box,
success or failure, is one fsync'ed line of the records file (keyed by ``sample_key``), so a killed
run resumes with only the unfinished boxes; failures are retried on the next run unless
``retry_failed=False``. Retries of transient HTTP errors are the ``openai`` SDK's own.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from typing import Any

from PIL import Image, ImageDraw
from tqdm import tqdm

from ..errors import EXPECTED_ERRORS
from ..geometry import fit_max_pixels
from ..images import encode_pil, open_image
from ..prompts import REGION_DESCRIPTION_SYSTEM_PROMPT, REGION_DESCRIPTION_USER_PROMPT
from ..redaction import Redactor
from ..run_guard import RunGuard, gather_or_stop
from ..storage.record_log import RecordLog

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


def draw_red_box(path: str, bbox, max_pixels: int | None) -> str:
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


def build_messages(data_url: str) -> list[dict]:
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
    concurrency: int = 16
    max_pixels: int | None = 1280 * 1280
    max_tokens: int | None = None
    temperature: float | None = None
    retry_failed: bool = True


async def describe_all(
    tasks: list[BoxTask],
    client,
    cfg: DescribeConfig,
    log: RecordLog,
    redact: Redactor = Redactor(),
    progress: bool = True,
    guard: RunGuard | None = None,
) -> dict:
    """Describe every task not yet finished in ``log``; returns counts. With ``guard`` (the one the
    client reports to) a fatal response or too many failures stop the run: nothing more is recorded
    and the guard's error is raised."""

    def finished(t: BoxTask) -> bool:
        rec = log.records.get(t.sample_key)
        return rec is not None and (rec.get("status") == "ok" or not cfg.retry_failed)

    todo = [t for t in tasks if not finished(t)]
    sem = asyncio.Semaphore(cfg.concurrency)
    bar = tqdm(total=len(tasks), initial=len(tasks) - len(todo), desc="descriptions", disable=not progress)
    counts = {"ok": 0, "failed": 0, "skipped": len(tasks) - len(todo)}

    async def one(t: BoxTask) -> None:
        async with sem:
            rec: dict[str, Any] = {
                "sample_key": t.sample_key,
                "image": t.image,
                "width": t.width,
                "height": t.height,
                "bbox": [round(v, 2) for v in t.bbox],
                "label": t.label,
                "source": t.source,
                "merged_from": list(t.merged_from),
            }
            try:
                url = await asyncio.to_thread(draw_red_box, t.image, t.bbox, cfg.max_pixels)
                kw: dict[str, Any] = {}
                if cfg.max_tokens:
                    kw["max_completion_tokens"] = cfg.max_tokens
                if cfg.temperature is not None:
                    kw["temperature"] = cfg.temperature
                resp = await client.chat.completions.create(model=cfg.model, messages=build_messages(url), **kw)
                text = resp.choices[0].message.content if resp.choices else None
                desc = parse_description(text)
                if desc is None:
                    rec.update(
                        status="failed", error="no region_description={...} in the reply", raw=(text or "")[:2000]
                    )
                else:
                    rec.update(status="ok", description=desc)
            except asyncio.CancelledError:
                raise
            except EXPECTED_ERRORS as e:  # recorded, retried on the next run
                rec.update(status="failed", error=redact(f"{type(e).__name__}: {e}")[:2000])
            if guard is not None and guard.tripped:
                return  # stopping: this record may carry the failure that stopped the run
            await asyncio.to_thread(log.append, rec)
            counts[rec["status"]] += 1
            bar.update(1)

    try:
        await gather_or_stop((one(t) for t in todo), guard)
    finally:
        bar.close()
    return counts
