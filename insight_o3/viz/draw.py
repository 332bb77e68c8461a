"""Pixels for viewing: find source images, redraw crops from references, draw boxes, thumbnails.

Records store paths as they were given to the evaluation (often relative to the directory the run
was started from), so :class:`ImageResolver` tries a list of roots before giving up. Decoded
originals are kept in a small LRU because one O3-Bench image (~4600x4000 px) serves several
questions and every crop of a conversation.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from PIL import Image, ImageDraw, ImageFont

from ..imaging.images import ImageError, ImageRef, encode_pil, open_image

Box = Sequence[float]

#: Box colours: evidence/target (red), other layouts (grey), searcher crops cycle through the rest.
TARGET_COLOR = (230, 40, 40)
LAYOUT_COLOR = (120, 120, 120)
CROP_COLORS = [(30, 110, 230), (250, 150, 0), (20, 170, 90), (170, 60, 200), (0, 170, 190), (200, 90, 40)]


@dataclass
class DrawBox:
    """A box in original-image pixels with its caption and colour."""

    box: tuple[float, float, float, float]
    label: str = ""
    color: tuple[int, int, int] = TARGET_COLOR
    dashed: bool = False


class ImageResolver:
    """Maps a path written in a record to a readable file and decodes it (LRU-cached).

    ``roots`` are tried in order for relative paths (and, as a last resort, for the file name of an
    absolute path that no longer exists, e.g. a run copied from another machine).
    """

    def __init__(self, roots: Iterable[str | os.PathLike] = (), cache_size: int = 3):
        self.roots = [Path(r) for r in roots if r]
        self._cache: OrderedDict[str, Image.Image] = OrderedDict()
        self._cache_size = cache_size

    def add_root(self, root: str | os.PathLike | None) -> None:
        if root and Path(root) not in self.roots:
            self.roots.append(Path(root))

    def resolve(self, path: str) -> str | None:
        p = Path(path)
        if p.is_file():
            return str(p)
        tails = [p] if not p.is_absolute() else []
        tails += [Path(*p.parts[-k:]) for k in (2, 1) if len(p.parts) >= k]
        for root in self.roots:
            for tail in tails:
                cand = root / tail
                if cand.is_file():
                    return str(cand)
        return None

    def open(self, path: str) -> Image.Image:
        """The decoded RGB original; :class:`ImageError` naming the path and the roots tried."""
        real = self.resolve(path)
        if real is None:
            tried = ", ".join(str(r) for r in self.roots) or "(no roots)"
            raise ImageError(f"source image not found: {path} (also looked under: {tried})")
        im = self._cache.get(real)
        if im is None:
            im = open_image(real)
            self._cache[real] = im
            while len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(real)
        return im

    def crop(self, ref: ImageRef | dict, max_px: int | None = None) -> Image.Image:
        """The view behind a reference, cut from the original image at ``ref.region`` and shrunk to
        at most ``max_px`` on its longer side (never larger than the size that was sent)."""
        if isinstance(ref, dict):
            ref = ImageRef.from_dict(ref)
        im = self.open(ref.path)
        x1, y1, x2, y2 = (int(round(v)) for v in ref.region)
        x1, y1 = max(0, x1), max(0, y1)
        x2, y2 = min(im.width, x2), min(im.height, y2)
        if x2 <= x1 or y2 <= y1:
            raise ImageError(
                f"reference region {list(ref.region)} has no area inside {ref.path} ({im.width}x{im.height})"
            )
        view = im.crop((x1, y1, x2, y2))
        limit = max(ref.size) if ref.size and max(ref.size) > 0 else max(view.size)
        if max_px:
            limit = min(limit, max_px)
        return thumbnail(view, limit)


def thumbnail(img: Image.Image, max_px: int) -> Image.Image:
    """A copy no larger than ``max_px`` on its longer side (aspect kept)."""
    w, h = img.size
    s = max_px / max(w, h)
    if s >= 1:
        return img.copy()
    return img.resize((max(1, round(w * s)), max(1, round(h * s))), Image.Resampling.LANCZOS)


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def draw_boxes(img: Image.Image, boxes: list[DrawBox], max_px: int | None = None) -> Image.Image:
    """``img`` (an original) shrunk to ``max_px`` with ``boxes`` (original pixels) drawn on it."""
    out = thumbnail(img, max_px) if max_px else img.copy()
    if out.mode != "RGB":
        out = out.convert("RGB")
    sx, sy = out.width / img.width, out.height / img.height
    d = ImageDraw.Draw(out)
    lw = max(2, round(max(out.size) / 250))
    fsize = max(12, round(max(out.size) / 45))
    font = _font(fsize)
    for b in boxes:
        x1, y1, x2, y2 = b.box
        rect = [x1 * sx, y1 * sy, max(x1 * sx + 1, x2 * sx), max(y1 * sy + 1, y2 * sy)]
        if b.dashed:
            _dashed_rect(d, rect, b.color, max(1, lw // 2))
        else:
            d.rectangle(rect, outline=b.color, width=lw)
        if b.label:
            above, below = rect[1] - fsize - 2 * lw, rect[3] + lw
            # dashed (reference) boxes label below, solid ones above, so a crop that is exactly a
            # target layout keeps both captions readable
            if b.dashed:
                ty = below if below + fsize < out.height else max(0, above)
            else:
                ty = above if above >= 0 else rect[1] + lw
            tx = rect[0] + lw
            bbox = d.textbbox((tx, ty), b.label, font=font)
            d.rectangle([bbox[0] - 2, bbox[1] - 2, bbox[2] + 2, bbox[3] + 2], fill=b.color)
            d.text((tx, ty), b.label, fill=(255, 255, 255), font=font)
    return out


def _dashed_rect(
    d: ImageDraw.ImageDraw, rect: list[float], color: tuple[int, int, int], width: int, dash: int = 8
) -> None:
    x1, y1, x2, y2 = rect
    for ax, ay, bx, by in ((x1, y1, x2, y1), (x2, y1, x2, y2), (x2, y2, x1, y2), (x1, y2, x1, y1)):
        length = max(abs(bx - ax), abs(by - ay))
        n = max(1, int(length // (2 * dash)))
        for i in range(n + 1):
            t0, t1 = min(1.0, 2 * i * dash / max(length, 1)), min(1.0, (2 * i + 1) * dash / max(length, 1))
            if t0 >= 1.0:
                break
            d.line(
                [ax + (bx - ax) * t0, ay + (by - ay) * t0, ax + (bx - ax) * t1, ay + (by - ay) * t1],
                fill=color,
                width=width,
            )


def image_data_url(img: Image.Image, quality: int = 80) -> str:
    """A JPEG ``data:`` URL (what the report embeds; nothing is fetched when it opens)."""
    return encode_pil(img, "JPEG", quality, optimize=True)


def placeholder(text: str, size: tuple[int, int] = (320, 80)) -> Image.Image:
    """A small grey tile with ``text`` (a missing source image must not break a page)."""
    im = Image.new("RGB", size, (235, 235, 235))
    d = ImageDraw.Draw(im)
    d.multiline_text((8, 8), _wrap(text, 48), fill=(150, 0, 0), font=_font(12))
    return im


def _wrap(text: str, width: int) -> str:
    return "\n".join(text[i : i + width] for i in range(0, len(text), width))[:400]
