"""The images of one episode (``img_1`` = the question's image, ``img_2``, … what the tools made) and where tools
write new ones: each new image is a PNG named by the sha256 of its bytes in the run's tool-image folder, so
trials and resumed runs that make the same pixels share one file and a record's path always names its pixels."""

from __future__ import annotations

import hashlib
import io
import os
import threading
from collections.abc import Iterator
from pathlib import Path

from PIL import Image

from ..imaging.images import ImageError, image_size
from ..storage.atomic import atomic_writer
from .base import LimitExceeded, ToolImage, UnknownImage

_WRITE_LOCK = threading.Lock()  # one writer per file name in this process (atomic_writer's temp name is per pid)


def png_bytes(img: Image.Image) -> bytes:
    """The PNG a tool's image is stored as (PIL's default PNG settings, as the release's ``pil_image.save(path)``)."""
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return buf.getvalue()


class ImageBook:
    """``img_n`` -> :class:`ToolImage` for one episode; new images are written under ``folder``."""

    def __init__(self, folder: str | os.PathLike, first: str | None = None, max_pixels: int = 50_000_000):
        self.folder = Path(folder)
        self.max_pixels = max_pixels
        self._images: dict[str, ToolImage] = {}
        if first is not None:
            self._images["img_1"] = ToolImage("img_1", first, image_size(first))

    def __contains__(self, ref: object) -> bool:
        return isinstance(ref, str) and ref in self._images

    def __len__(self) -> int:
        return len(self._images)

    def __iter__(self) -> Iterator[str]:
        return iter(self._images)

    def get(self, ref: str) -> ToolImage:
        """The image called ``ref``; :class:`UnknownImage` naming the ones held."""
        if ref not in self._images:
            raise UnknownImage(f"Image reference {ref!r} not found. Available: {list(self._images)}")
        return self._images[ref]

    def next_id(self) -> str:
        """The id the next image gets (the release's ``f"img_{len(image_paths_dict) + 1}"``)."""
        return f"img_{len(self._images) + 1}"

    def open(self, ref: str) -> Image.Image:
        """The image ``ref`` decoded as its file holds it (mode kept), refused past the pixel cap."""
        img = self.get(ref)
        w, h = img.size
        if w * h > self.max_pixels:
            raise LimitExceeded(f"{ref} has {w}x{h} pixels, more than the per-call cap of {self.max_pixels}")
        try:
            with Image.open(img.path) as im:
                im.load()
                return im
        except (OSError, SyntaxError, ValueError) as e:
            raise ImageError(f"cannot decode {img.path}: {e}") from None

    def read_bytes(self, ref: str) -> bytes:
        return Path(self.get(ref).path).read_bytes()

    def add(self, img: Image.Image) -> ToolImage:
        """Store ``img`` as PNG (content-addressed) and hold it as the next ``img_n``."""
        w, h = img.size
        if w * h > self.max_pixels:
            raise LimitExceeded(
                f"the result would have {w}x{h} pixels, more than the per-call cap of {self.max_pixels}"
            )
        return self.add_png(png_bytes(img), (w, h))

    def add_png(self, data: bytes, size: tuple[int, int]) -> ToolImage:
        digest = hashlib.sha256(data).hexdigest()
        path = self.folder / f"{digest}.png"
        with _WRITE_LOCK:
            if not path.exists():
                self.folder.mkdir(parents=True, exist_ok=True)
                with atomic_writer(path, "wb") as fh:
                    fh.write(data)
        new = ToolImage(self.next_id(), str(path), size)
        self._images[new.id] = new
        return new

    def snapshot(self) -> dict[str, ToolImage]:
        return dict(self._images)
