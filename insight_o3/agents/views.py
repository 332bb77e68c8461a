"""What a model is shown: image references planned from the file header (no decoding), the crop
box rule, and the encoded/PIL views behind a reference.

Sessions only plan :class:`~insight_o3.imaging.images.ImageRef` s; the pixels are produced on demand by the
:class:`~insight_o3.imaging.images.ImageStore` (encoded once and cached for API calls, or as PIL for verl).
"""

from __future__ import annotations

from PIL import Image

from ..imaging.geometry import QWEN_IMAGE_FACTOR, QWEN_MAX_RATIO, Box, expand_to_min_size, pixel_box
from ..imaging.images import EncodedImage, ImageRef, ImageStore, Resize

#: Crops are kept well inside Qwen2.5-VL's aspect-ratio limit (smart_resize rejects > 200:1).
MAX_CROP_RATIO = QWEN_MAX_RATIO / 2


def plan_view(images: ImageStore, path: str, resize: Resize, region: Box | None = None) -> ImageRef:
    """The reference :meth:`ImageStore.get`/``view`` will produce for ``(path, resize, region)``,
    from the image header only. Raises ImageError (bad file) or ValueError (unusable shape)."""
    w, h = images.size(path)
    if region is None:
        return ImageRef(path, (0.0, 0.0, float(w), float(h)), resize.target((w, h)))
    px = pixel_box(region)
    px = (max(0, px[0]), max(0, px[1]), min(w, px[2]), min(h, px[3]))
    if px[2] <= px[0] or px[3] <= px[1]:
        raise ValueError(f"crop box {region} has no area inside the {w}x{h} image")
    whole = px == (0, 0, w, h)  # the store serves a whole-image "crop" as the image itself
    box = (float(px[0]), float(px[1]), float(px[2]), float(px[3]))
    return ImageRef(path, box, resize.target((px[2] - px[0], px[3] - px[1]), crop=not whole))


def region_of(ref: ImageRef, images: ImageStore) -> Box | None:
    """The ``region`` argument for the store: None for the whole image (shares its cache entry)."""
    w, h = images.size(ref.path)
    x1, y1, x2, y2 = ref.region
    return None if (x1, y1, x2, y2) == (0.0, 0.0, float(w), float(h)) else (x1, y1, x2, y2)


def crop_box(box: Box, size: tuple[int, int]) -> Box:
    """A valid box in original pixels made showable: at least one 28-px Qwen patch per side and an
    aspect ratio of at most :data:`MAX_CROP_RATIO` (grown around its centre, inside the image)."""
    b = expand_to_min_size(box, size, QWEN_IMAGE_FACTOR)
    bw, bh = b[2] - b[0], b[3] - b[1]
    if max(bw, bh) / min(bw, bh) > MAX_CROP_RATIO:
        b = expand_to_min_size(b, size, max(bw, bh) / MAX_CROP_RATIO)
    return b


def resize_for(images: ImageStore, resize: Resize, ref: ImageRef) -> Resize:
    """The resize that renders ``ref`` at its planned size: ``resize`` itself, or, for a view planned at a size
    of its own (a vSearcher crop is shown at the zoom-in tool's size, ``searcher_rules.run_tool_call``), the
    same resize fixed to that size."""
    region = region_of(ref, images)
    if region is None:
        return resize
    px = pixel_box(region)
    if resize.target((px[2] - px[0], px[3] - px[1]), crop=True) == tuple(ref.size):
        return resize
    return resize.at_size(ref.size)


async def encode_refs(images: ImageStore, resize: Resize, refs: list[ImageRef]) -> dict[ImageRef, EncodedImage]:
    """Encode (through the cache, off the event loop) every distinct reference of a conversation."""
    out: dict[ImageRef, EncodedImage] = {}
    for ref in dict.fromkeys(refs):
        out[ref] = await images.aget(ref.path, resize_for(images, resize, ref), region_of(ref, images))
    return out


def pil_view(images: ImageStore, resize: Resize, ref: ImageRef) -> Image.Image:
    """The PIL pixels behind ``ref`` (what training hands to the rollout engine)."""
    view, got = images.view(ref.path, resize_for(images, resize, ref), region_of(ref, images))
    if tuple(got.size) != tuple(ref.size):
        raise ValueError(f"planned view size {ref.size} != rendered {got.size} for {ref.path}")
    return view
