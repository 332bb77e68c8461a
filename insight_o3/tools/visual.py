"""The image tools of OpenSearch-VL (``opensearch_infer/tools.py`` ``execute_tool`` and ``image_engines.py`` at
c5c02a4): ``crop`` (PIL), ``perspective_correct``, ``super_resolution`` and ``sharpen`` (OpenCV, from
``opencv-contrib-python-headless``: the ``tools`` extra, imported when a call needs it). Arguments are read, and
the result is computed, as the release does; each made image is a new ``img_n`` and the observation is the
release's text. Where the release would crash the episode (``int("abc")``, an image OpenCV cannot convert) or
produce nothing useful (a crop wholly outside the image, a ``scale`` of 1000), the model is told why instead
(docs/fidelity.md, rows O*)."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from PIL import Image

from ..base.json_types import JSONObject
from .base import BackendFailed, BadArguments, LimitExceeded, Observation, Unavailable, UnknownImage
from .tool import Tool, ToolContext

ERR = "Tool execution error:\n"
#: EDSR's scales (the model files ``EDSR_x2.pb``, ``EDSR_x3.pb``, ``EDSR_x4.pb``)
SR_SCALES = (2, 3, 4)
#: the release's default model file name (``SR_MODEL_PATH`` overrides it, as there)
SR_MODEL_DEFAULT = "EDSR_x4.pb"


def cv2_module() -> Any:
    """OpenCV, or :class:`Unavailable` saying which extra brings it."""
    try:
        import cv2
    except ImportError:
        raise Unavailable(
            ERR + "OpenCV is required for image enhancement tools. Install with: "
            "pip install 'insight-o3[tools]' (opencv-contrib-python-headless)."
        ) from None
    return cv2


def location(ctx: ToolContext, tool: str) -> str:
    """The "Available at" of an observation: the release's file name for the image
    (``{prefix}_{case_idx}_trajectory_turn{turn}_{tool}.png`` under ``intermediate/``), relative, so the text does
    not depend on where the run directory is."""
    return f"intermediate/{ctx.filename_prefix}_{ctx.case_idx}_trajectory_turn{ctx.turn}_{tool}.png"


def as_int(arguments: Mapping[str, Any], key: str, default: int, tool: str) -> int:
    try:
        return int(arguments.get(key, default))
    except (TypeError, ValueError, OverflowError) as e:
        raise BadArguments(f"{ERR}invalid argument {key!r} for {tool}: {e}") from None


def as_float(arguments: Mapping[str, Any], key: str, default: float, tool: str) -> float:
    try:
        value = float(arguments.get(key, default))
    except (TypeError, ValueError, OverflowError) as e:
        raise BadArguments(f"{ERR}invalid argument {key!r} for {tool}: {e}") from None
    if not np.isfinite(value):
        raise BadArguments(f"{ERR}invalid argument {key!r} for {tool}: {value} is not a finite number")
    return value


def _image_ref(arguments: Mapping[str, Any], tool: str, ctx: ToolContext) -> str:
    ref = arguments.get("image", "")
    if not ref:
        raise BadArguments(f"{ERR}'image' is required for {tool}.")
    if not isinstance(ref, str) or ref not in ctx.images:
        raise UnknownImage(f"{ERR}Failed to load image {ref!r}.")
    return ref


def crop_image(img: Image.Image, x: int, y: int, width: int, height: int, max_pixels: int) -> Image.Image:
    """``ImageToolEngine.crop``: ``Image.crop((x, y, x + width, y + height))`` (outside the image is black, as
    PIL pads), refused when the box has no pixel of the image or more pixels than the cap."""
    if width * height > max_pixels:
        raise LimitExceeded(f"{ERR}a crop of {width}x{height} pixels is more than the per-call cap of {max_pixels}")
    w, h = img.size
    if x >= w or y >= h or x + width <= 0 or y + height <= 0:
        raise BadArguments(
            f"{ERR}the crop box x={x}, y={y}, width={width}, height={height} lies outside the image ({w}x{h})."
        )
    return img.crop((x, y, x + width, y + height))


class CropTool(Tool):
    name = "crop"
    schema: JSONObject = {
        "name": "crop",
        "description": "Crop a region (x, y, width, height in pixels of the image) from an image reference.",
        "parameters": {
            "type": "object",
            "properties": {
                "image": {"type": "string"},
                "x": {"type": "integer"},
                "y": {"type": "integer"},
                "width": {"type": "integer"},
                "height": {"type": "integer"},
            },
            "required": ["image", "x", "y", "width", "height"],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        ref = arguments.get("image", "")
        x, y = as_int(arguments, "x", 0, "crop"), as_int(arguments, "y", 0, "crop")
        width, height = as_int(arguments, "width", 0, "crop"), as_int(arguments, "height", 0, "crop")
        if not ref:
            raise BadArguments(f"{ERR}'image' is required for crop.")
        if width <= 0 or height <= 0:
            raise BadArguments(f"{ERR}width and height must be positive integers.")
        if not isinstance(ref, str) or ref not in ctx.images:
            raise UnknownImage(f"{ERR}Failed to load image {ref!r}.")

        def work() -> Observation:
            cropped = crop_image(ctx.images.open(ref), x, y, width, height, ctx.limits.max_pixels)
            new = ctx.images.add(cropped)
            text = f"Image cropped successfully. New image ID: {new.id}. Available at: {location(ctx, 'crop')}"
            return Observation(text, (new,))

        return await asyncio.to_thread(work)


def _load_cv(path: str) -> Any:
    """``ImageEnhancementEngine.load_image`` of a path: ``cv2.imdecode(np.fromfile(path), -1)`` (channels as the
    file has them: BGR, BGRA or one plane)."""
    cv2 = cv2_module()
    return cv2.imdecode(np.fromfile(path, dtype=np.uint8), -1)


def _to_pil(arr: Any) -> Image.Image:
    """``ImageEnhancementEngine.to_pil``: ``cvtColor(BGR2RGB)`` then ``Image.fromarray``."""
    cv2 = cv2_module()
    return Image.fromarray(cv2.cvtColor(arr, cv2.COLOR_BGR2RGB))


def order_points(pts: np.ndarray) -> np.ndarray:
    rect = np.zeros((4, 2), dtype="float32")
    s = pts.sum(axis=1)
    rect[0] = pts[np.argmin(s)]
    rect[2] = pts[np.argmax(s)]
    diff = np.diff(pts, axis=1)
    rect[1] = pts[np.argmin(diff)]
    rect[3] = pts[np.argmax(diff)]
    return rect


def auto_correct_perspective(image: Any) -> Any:
    """``ImageEnhancementEngine.auto_correct_perspective``: Canny edges of the blurred grey image, the largest of the
    five biggest contours that ``approxPolyDP`` makes a quadrilateral, warped to its bounding rectangle; none:
    the image as it was."""
    cv2 = cv2_module()
    if image.ndim == 3 and image.shape[2] == 4:
        image = cv2.cvtColor(image, cv2.COLOR_BGRA2BGR)
    gray = cv2.cvtColor(image, cv2.COLOR_BGR2GRAY)
    blurred = cv2.GaussianBlur(gray, (5, 5), 0)
    edged = cv2.Canny(blurred, 75, 200)
    contours, _ = cv2.findContours(edged.copy(), cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    contours = sorted(contours, key=cv2.contourArea, reverse=True)[:5]
    screen_cnt = None
    for c in contours:
        peri = cv2.arcLength(c, True)
        approx = cv2.approxPolyDP(c, 0.02 * peri, True)
        if len(approx) == 4:
            screen_cnt = approx
            break
    if screen_cnt is None:
        return image
    rect = order_points(screen_cnt.reshape(4, 2))
    (tl, tr, br, bl) = rect
    max_width = max(int(np.linalg.norm(br - bl)), int(np.linalg.norm(tr - tl)))
    max_height = max(int(np.linalg.norm(tr - br)), int(np.linalg.norm(tl - bl)))
    dst = np.array([[0, 0], [max_width - 1, 0], [max_width - 1, max_height - 1], [0, max_height - 1]], dtype="float32")
    matrix = cv2.getPerspectiveTransform(rect, dst)
    return cv2.warpPerspective(image, matrix, (max_width, max_height))


def enhance_sharpness(image: Any, amount: float) -> Any:
    """``enhance_sharpness``: unsharp masking, ``(1 + amount) * I - amount * GaussianBlur(I, sigma=3)``."""
    cv2 = cv2_module()
    blurred = cv2.GaussianBlur(image, (0, 0), 3)
    return cv2.addWeighted(image, 1.0 + amount, blurred, -amount, 0)


def super_resolve(image: Any, model_path: str, scale: int) -> Any:
    """``apply_super_resolution``: OpenCV's ``dnn_superres`` EDSR at ``scale`` when ``model_path`` exists; the
    image unchanged when it does not, or when the model fails (the release's fallback)."""
    if not os.path.exists(model_path):
        return image
    cv2 = cv2_module()
    try:
        sr = cv2.dnn_superres.DnnSuperResImpl_create()
        sr.readModel(model_path)
        sr.setModel("edsr", scale)
        return sr.upsample(image)
    except Exception:  # the release logs and keeps the image (image_engines.py: "Super resolution failed")
        return image


def sr_model_path(ctx: ToolContext) -> str:
    """The EDSR weights file: the run's setting, else ``$SR_MODEL_PATH``, else ``EDSR_x4.pb`` (the release's)."""
    return str(ctx.settings.get("sr_model_path") or os.environ.get("SR_MODEL_PATH", SR_MODEL_DEFAULT))


class _Enhance(Tool):
    """The three OpenCV tools: read ``image``, run :meth:`operate`, add the result as a new image."""

    def operate(self, image: Any, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        raise NotImplementedError

    def check(self, arguments: Mapping[str, Any], size: tuple[int, int], ctx: ToolContext) -> Callable[[Any], Any]:
        """Validate the arguments before any pixel is read; returns the operation."""
        return lambda image: self.operate(image, arguments, ctx)

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        ref = _image_ref(arguments, self.name, ctx)
        cv2_module()
        source = ctx.images.get(ref)
        if source.size[0] * source.size[1] > ctx.limits.max_pixels:
            raise LimitExceeded(f"{ERR}{ref} has more pixels than the per-call cap of {ctx.limits.max_pixels}")
        op = self.check(arguments, source.size, ctx)

        def work() -> Observation:
            cv2 = cv2_module()
            try:
                result = _to_pil(op(_load_cv(source.path)))
            except cv2.error as e:
                raise BackendFailed(f"{ERR}{self.name} failed on {ref}: {str(e).strip()}") from None
            new = ctx.images.add(result)
            return Observation(
                f"{self.name} succeeded. New image ID: {new.id}. Available at: {location(ctx, self.name)}", (new,)
            )

        return await asyncio.to_thread(work)


class PerspectiveCorrectTool(_Enhance):
    name = "perspective_correct"
    schema: JSONObject = {
        "name": "perspective_correct",
        "description": "Correct perspective distortion in an image.",
        "parameters": {"type": "object", "properties": {"image": {"type": "string"}}, "required": ["image"]},
    }

    def operate(self, image: Any, arguments: Mapping[str, Any], ctx: ToolContext) -> Any:
        return auto_correct_perspective(image)


class SharpenTool(_Enhance):
    name = "sharpen"
    schema: JSONObject = {
        "name": "sharpen",
        "description": "Sharpen an image to reduce blur.",
        "parameters": {
            "type": "object",
            "properties": {"image": {"type": "string"}, "amount": {"type": "number", "default": 1.5}},
            "required": ["image"],
        },
    }

    def check(self, arguments: Mapping[str, Any], size: tuple[int, int], ctx: ToolContext) -> Callable[[Any], Any]:
        amount = as_float(arguments, "amount", 1.5, self.name)
        return lambda image: enhance_sharpness(image, amount)


class SuperResolutionTool(_Enhance):
    name = "super_resolution"
    schema: JSONObject = {
        "name": "super_resolution",
        "description": "Super-resolve a low-resolution image.",
        "parameters": {
            "type": "object",
            "properties": {"image": {"type": "string"}, "scale": {"type": "integer", "default": 4}},
            "required": ["image"],
        },
    }

    def check(self, arguments: Mapping[str, Any], size: tuple[int, int], ctx: ToolContext) -> Callable[[Any], Any]:
        scale = as_int(arguments, "scale", 4, self.name)
        if scale not in SR_SCALES:
            raise BadArguments(f"{ERR}super_resolution scale must be one of {list(SR_SCALES)} (EDSR's), got {scale}.")
        if size[0] * size[1] * scale * scale > ctx.limits.max_pixels:
            raise LimitExceeded(
                f"{ERR}super_resolution x{scale} of a {size[0]}x{size[1]} image is more than the per-call cap of "
                f"{ctx.limits.max_pixels} pixels."
            )
        model = sr_model_path(ctx)
        return lambda image: super_resolve(image, model, scale)
