"""How a view is rendered: a pipeline of typed image operations, declared once, applied by one function.

A view is the decoded original (or the caller's region of it) put through :attr:`Resize.ops` in order, then encoded
(:attr:`Resize.jpeg_quality`; or the file's own bytes, :attr:`Resize.as_file`). Each operation says the size it
produces from the size it is given (:meth:`Resize.target` plans a view from the file header alone) and produces
those pixels (:meth:`Resize.apply`). A resize to the size the image already has is no resize (PIL's ``resize`` to
the same size is a copy). Each harness builds its pipeline from these operations: its resize rules are cited where it
builds them (docs/fidelity.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any, ClassVar

from PIL import Image

from ..base.json_types import JSONObject
from .geometry import QWEN_MAX_PIXELS, QWEN_MIN_PIXELS, fit_max_pixels, smart_resize, upscale_small

Size = tuple[int, int]


class Resample(StrEnum):
    """A resampling filter, by the name a record stores."""

    NEAREST = "nearest"
    BICUBIC = "bicubic"
    LANCZOS = "lanczos"

    @property
    def pil(self) -> Image.Resampling:
        return _PIL[self]


_PIL = {
    Resample.NEAREST: Image.Resampling.NEAREST,
    Resample.BICUBIC: Image.Resampling.BICUBIC,
    Resample.LANCZOS: Image.Resampling.LANCZOS,
}


def _resize_through(im: Image.Image, sizes: list[Size], resample: Resample) -> Image.Image:
    for size in sizes:
        if size != im.size:
            im = im.resize(size, resample.pil)
    return im


@dataclass(frozen=True)
class Crop:
    """``Image.crop`` of an integer box in the image at this point (outside it: black, as PIL pads)."""

    NAME: ClassVar[str] = "crop"
    box: tuple[int, int, int, int]

    def out_size(self, size: Size, crop: bool) -> Size:
        x0, y0, x1, y1 = self.box
        return (x1 - x0, y1 - y0)

    def apply(self, im: Image.Image, crop: bool) -> Image.Image:
        return im.crop(self.box)


@dataclass(frozen=True)
class ResizeTo:
    """A resize to an exact ``(w, h)``."""

    NAME: ClassVar[str] = "resize"
    size: Size
    resample: Resample = Resample.LANCZOS

    def out_size(self, size: Size, crop: bool) -> Size:
        return self.size

    def apply(self, im: Image.Image, crop: bool) -> Image.Image:
        return _resize_through(im, [self.size], self.resample)


@dataclass(frozen=True)
class FitPixels:
    """Downscale keeping the aspect ratio under a pixel budget, each side floored
    (:func:`~insight_o3.imaging.geometry.fit_max_pixels`: the released evaluation's ``maybe_resize_image``)."""

    NAME: ClassVar[str] = "fit_pixels"
    max_pixels: int
    resample: Resample = Resample.LANCZOS

    def out_size(self, size: Size, crop: bool) -> Size:
        return fit_max_pixels(size, self.max_pixels)

    def apply(self, im: Image.Image, crop: bool) -> Image.Image:
        return _resize_through(im, [self.out_size(im.size, crop)], self.resample)


@dataclass(frozen=True)
class QwenGrid:
    """Qwen2.5-VL's ``smart_resize`` for a pixel budget, BICUBIC (``qwen_vl_utils.fetch_image``'s default), so a
    vLLM server does not resize the image again and box coordinates map back exactly."""

    NAME: ClassVar[str] = "qwen_grid"
    max_pixels: int = QWEN_MAX_PIXELS
    min_pixels: int = QWEN_MIN_PIXELS
    resample: ClassVar[Resample] = Resample.BICUBIC

    def out_size(self, size: Size, crop: bool) -> Size:
        w, h = size
        nh, nw = smart_resize(h, w, min_pixels=self.min_pixels, max_pixels=self.max_pixels)
        return (nw, nh)

    def apply(self, im: Image.Image, crop: bool) -> Image.Image:
        return _resize_through(im, [self.out_size(im.size, crop)], self.resample)


@dataclass(frozen=True)
class EnlargeCrop:
    """A crop (a view of a region) smaller than ``min_side`` or ``min_area`` is enlarged, in those two steps
    (:func:`~insight_o3.imaging.geometry.upscale_small`: the fork's vReasoner crops); a whole image is left alone."""

    NAME: ClassVar[str] = "enlarge_crop"
    min_side: int
    min_area: int
    resample: Resample = Resample.LANCZOS

    def out_size(self, size: Size, crop: bool) -> Size:
        steps = upscale_small(size, self.min_side, self.min_area) if crop else []
        return steps[-1] if steps else size

    def apply(self, im: Image.Image, crop: bool) -> Image.Image:
        return _resize_through(im, upscale_small(im.size, self.min_side, self.min_area) if crop else [], self.resample)


ViewOp = Crop | ResizeTo | FitPixels | QwenGrid | EnlargeCrop
OPS: dict[str, type[ViewOp]] = {op.NAME: op for op in (Crop, ResizeTo, FitPixels, QwenGrid, EnlargeCrop)}
_FIELD_TYPES: dict[str, Callable[[Any], Any]] = {
    "box": lambda v: tuple(int(x) for x in v),
    "size": lambda v: tuple(int(x) for x in v),
    "resample": Resample,
    "max_pixels": int,
    "min_pixels": int,
    "min_side": int,
    "min_area": int,
}


def op_to_json(op: ViewOp) -> JSONObject:
    fields = {
        k: list(v) if isinstance(v, tuple) else str(v) if isinstance(v, Resample) else v for k, v in asdict(op).items()
    }
    return {"op": op.NAME, **fields}


def op_from_json(d: Mapping[str, Any]) -> ViewOp:
    """One operation from its JSON form; ValueError naming what is wrong."""
    cls = OPS.get(str(d.get("op")))
    if cls is None:
        raise ValueError(f"unknown view operation {d.get('op')!r} (known: {', '.join(OPS)})")
    try:
        return cls(**{k: _FIELD_TYPES[k](v) for k, v in d.items() if k != "op"})
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"bad view operation {dict(d)!r}: {e}") from None


@dataclass(frozen=True)
class Resize:
    """How a view is rendered: ``ops`` in order on the decoded original or its region (none: shown as is), then
    encoded; ``jpeg_quality`` None is PIL's default (75), as the original. ``as_file``: the image file's own bytes,
    unchanged, are the view (a harness that base64s the file itself: DeepEyes's first image, EXIF and all)."""

    ops: tuple[ViewOp, ...] = ()
    jpeg_quality: int | None = None
    as_file: bool = False

    @classmethod
    def fit(cls, max_pixels: int | None, jpeg_quality: int | None = None) -> Resize:
        """The aspect ratio kept under ``max_pixels`` (None or 0: as is), LANCZOS, the original's rounding."""
        return cls((FitPixels(max_pixels),) if max_pixels else (), jpeg_quality)

    @classmethod
    def qwen(
        cls, max_pixels: int | None = None, min_pixels: int = QWEN_MIN_PIXELS, jpeg_quality: int | None = None
    ) -> Resize:
        """Qwen2.5-VL's ``smart_resize`` grid for ``max_pixels`` (None or 0: Qwen's own maximum), BICUBIC."""
        return cls((QwenGrid(max_pixels or QWEN_MAX_PIXELS, min_pixels),), jpeg_quality)

    @property
    def resample(self) -> Resample:
        """The filter of the last operation that resamples (LANCZOS when none does)."""
        for op in reversed(self.ops):
            if not isinstance(op, Crop):
                return op.resample
        return Resample.LANCZOS

    def at_size(self, size: Size) -> Resize:
        """The same rendering fixed to show exactly ``size`` (with this pipeline's filter and encoding)."""
        return Resize((ResizeTo((int(size[0]), int(size[1])), self.resample),), self.jpeg_quality, self.as_file)

    def target(self, size: Size, crop: bool = False) -> Size:
        """The ``(w, h)`` a view of ``size`` is shown at (``crop``: the view is a region of the image)."""
        out = (int(size[0]), int(size[1]))
        for op in self.ops:
            out = op.out_size(out, crop)
        return out

    def apply(self, im: Image.Image, crop: bool = False) -> Image.Image:
        """The pixels shown: ``im`` through every operation, in order."""
        for op in self.ops:
            im = op.apply(im, crop)
        return im

    def to_json(self) -> JSONObject:
        return {"ops": [op_to_json(op) for op in self.ops], "jpeg_quality": self.jpeg_quality, "as_file": self.as_file}

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Resize:
        """A rendering from :meth:`to_json`'s form; ValueError naming what is wrong."""
        quality = d.get("jpeg_quality")
        return cls(
            tuple(op_from_json(op) for op in d.get("ops", ())),
            None if quality is None else int(quality),
            bool(d.get("as_file", False)),
        )
