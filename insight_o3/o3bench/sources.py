"""Step ``sources``: candidate images and their layout boxes (§3.1, B.2 step 1).

Layout boxes come from PaddleX/PaddleOCR's layout detector (the paper: PP-DocLayout_plus-L), in the JSON its
results write. ``LayoutDetection(...).predict(...)`` yields one result per image; ``res.save_to_json(dir)``
writes ``<dir>/<stem>_res.json`` holding::

    {"input_path": "charts/a.png", "page_index": null,
     "boxes": [{"cls_id": 8, "label": "table", "score": 0.98, "coordinate": [x1, y1, x2, y2]}, ...]}

(``res.json`` is the same object under a ``"res"`` key; both are read.) The PP-StructureV3 pipeline's result JSON
is read too: its detector output is the ``layout_det_res`` object inside. ``coordinate`` is ``[xmin, ymin, xmax,
ymax]`` in original pixels; a rotated box of 8 numbers (``[x1, y1, ..., x4, y4]``, later PP-DocLayout models) is
taken as its axis-aligned bounding box. Results are matched to image files by the file name in ``input_path``.

Map boxes are corrected by hand in the paper: edit the JSON (same format) and point ``--map_layouts`` at it.

Besides chart and map, ``--category NAME,IMAGE_DIR,LAYOUTS[,MIN_LAYOUTS]`` (repeatable) adds a category of one's
own (floor plans, dashboards, ...): its images are read the same way, keyed ``<NAME>/<stem>``, and need at least
``MIN_LAYOUTS`` layouts (default 2); its E.2 prompt is ``synthesize --synth_prompt NAME=FILE``.

Layout ids are 1, 2, ... in the order of the result's ``boxes`` (after ``--min_score``), so a hand-corrected file
decides its own numbering. The paper keeps chart images with at least 8 detected layouts (``--min_layouts``);
maps need at least 2 here (``--min_map_layouts``), since an item must cite two layouts.
"""

from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..base.json_types import JSONObject
from ..data.layout import LayoutError, iter_layout_files, parse_layout
from .records import SourceImage, SourceLayout

log = logging.getLogger(__name__)

_WHITESPACE = re.compile(r"\s+")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp", ".tif", ".tiff")
#: The detector of the paper and its PaddleOCR model name.
DETECTOR_MODEL = "PP-DocLayout_plus-L"


@dataclass(frozen=True)
class SourceSpec:
    """One image type's inputs: the image directory and where its detector results are."""

    subset: str
    image_dir: str
    layouts: str
    min_layouts: int


def unwrap_result(obj: object, where: str) -> JSONObject:
    """The detector result inside ``obj``: the object itself, its ``"res"`` (``res.json``), or a PP-StructureV3
    result's ``layout_det_res`` (whose ``input_path`` may be null: the pipeline's own is used then)."""
    if not isinstance(obj, dict):
        raise LayoutError(f"{where}: expected a JSON object (a layout detector result)")
    result: dict = obj["res"] if isinstance(obj.get("res"), dict) else obj
    inner = result.get("layout_det_res")
    if isinstance(inner, dict):
        inner = dict(inner)
        if not inner.get("input_path"):
            inner["input_path"] = result.get("input_path")
        if "page_index" not in inner:
            inner["page_index"] = result.get("page_index")
        result = inner
    if not isinstance(result.get("boxes"), list):
        raise LayoutError(
            f"{where}: no 'boxes' list: not a PaddleX/PaddleOCR layout detection result "
            f"(expected {{'input_path', 'page_index', 'boxes': [{{'cls_id', 'label', 'score', 'coordinate'}}]}})"
        )
    return result


def _axis_aligned(result: dict, where: str) -> JSONObject:
    """A copy whose 8-number (rotated) coordinates are replaced by their bounding boxes."""
    boxes = []
    for i, b in enumerate(result["boxes"]):
        c = b.get("coordinate") if isinstance(b, dict) else None
        if isinstance(c, list) and len(c) == 8:
            try:
                xs, ys = [float(v) for v in c[0::2]], [float(v) for v in c[1::2]]
            except (TypeError, ValueError):
                raise LayoutError(f"{where}: boxes[{i}]: field 'coordinate' must be numbers, got {c!r}") from None
            b = {**b, "coordinate": [min(xs), min(ys), max(xs), max(ys)]}
        boxes.append(b)
    return {**result, "boxes": boxes}


def read_results(path: str) -> dict[str, tuple[str, JSONObject]]:
    """Detector results under ``path`` (a directory of ``*.json``, one ``.json`` or a ``.jsonl``) keyed by the
    file name of their ``input_path``: ``{name: (where, result)}``. PDF pages (``page_index`` set) are refused."""
    out: dict[str, tuple[str, dict]] = {}
    for where, obj in iter_layout_files(path):
        result = _axis_aligned(unwrap_result(obj, where), where)
        image = result.get("input_path")
        if not isinstance(image, str) or not image:
            raise LayoutError(f"{where}: field 'input_path' is missing: cannot tell which image these boxes belong to")
        if result.get("page_index") is not None:
            raise LayoutError(f"{where}: page {result['page_index']} of a PDF; render the pages as images first")
        name = os.path.basename(image)
        if name in out:
            raise LayoutError(f"{where}: a second layout result for {name} (the first is {out[name][0]})")
        out[name] = (where, result)
    return out


def list_images(image_dir: str) -> list[Path]:
    d = Path(image_dir)
    if not d.is_dir():
        raise LayoutError(f"image directory not found: {image_dir}")
    return sorted(p for p in d.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES)


def layouts_of(result: dict, where: str, size: tuple[int, int], min_score: float) -> list[SourceLayout]:
    """The result's boxes (validated against the image size) numbered 1, 2, ... after the score filter."""
    doc = parse_layout(result, where, size)
    kept = [b for b in doc.boxes if b.score >= min_score]
    return [SourceLayout(i, b.box, b.label, b.score) for i, b in enumerate(kept, start=1)]


def collect(spec: SourceSpec, min_score: float = 0.0) -> tuple[list[SourceImage], list[JSONObject]]:
    """The kept images of one type and the skipped ones (``{"subset", "image", "reason"}``)."""
    from ..imaging.images import ImageError, image_size  # Pillow: not for build_o3_bench --help, which reads this

    results = read_results(spec.layouts)
    kept: list[SourceImage] = []
    skipped: list[dict] = []
    used: set[str] = set()
    for path in list_images(spec.image_dir):
        found = results.get(path.name)
        if found is None:
            skipped.append({"subset": spec.subset, "image": str(path.resolve()), "reason": "no layout result"})
            continue
        used.add(path.name)
        where, result = found
        try:
            size = image_size(path)
        except ImageError as e:
            skipped.append({"subset": spec.subset, "image": str(path.resolve()), "reason": f"unreadable: {e}"})
            continue
        layouts = layouts_of(result, where, size, min_score)
        if len(layouts) < spec.min_layouts:
            reason = f"{len(layouts)} layouts < {spec.min_layouts} (--min_layouts)"
            skipped.append({"subset": spec.subset, "image": str(path.resolve()), "reason": reason})
            continue
        stem = _WHITESPACE.sub("_", path.stem)  # item ids are words of the decisions file
        key = f"{spec.subset}/{stem}"
        kept.append(SourceImage(key, spec.subset, str(path.resolve()), size[0], size[1], layouts, where))
    for name, (where, _) in sorted(results.items()):
        if name not in used:
            log.warning("%s: no image %s in %s; result not used", where, name, spec.image_dir)
    return kept, skipped


def check_unique(sources: list[SourceImage]) -> None:
    seen: dict[str, str] = {}
    for s in sources:
        if s.key in seen:
            raise LayoutError(f"two images share the key {s.key!r}: {seen[s.key]} and {s.image}; rename one")
        seen[s.key] = s.image


# ----------------------------------------------------------------------------- the detector (optional)
def run_detector(
    image_dir: str,
    out_dir: str,
    *,
    model_name: str = DETECTOR_MODEL,
    threshold: float | None = None,
    batch_size: int = 1,
    skip_done: bool = True,
) -> int:
    """Run PaddleOCR's ``LayoutDetection`` on every image of ``image_dir`` that has no result in ``out_dir`` yet and
    write each result with ``save_to_json`` (the files :func:`read_results` reads). Returns how many ran.

    Needs the ``layout`` extra (``pip install "insight-o3[layout]"``: paddleocr 3.x and paddlepaddle). The model's
    weights are downloaded by PaddleOCR from its own hosting on first use; this path is not tested offline."""
    try:
        from paddleocr import LayoutDetection
    except ImportError as e:
        raise LayoutError(
            f"the layout detector needs PaddleOCR ({e}); install the 'layout' extra (pip install 'insight-o3[layout]'), or run "
            f"the detector elsewhere and pass its JSON as the chart/map layouts"
        ) from None
    os.makedirs(out_dir, exist_ok=True)
    done = set(read_results(out_dir)) if skip_done and any(Path(out_dir).glob("*.json")) else set()
    todo = [p for p in list_images(image_dir) if p.name not in done]
    if not todo:
        return 0
    kwargs = {"threshold": threshold} if threshold is not None else {}
    model = LayoutDetection(model_name=model_name)
    for res in model.predict([str(p) for p in todo], batch_size=batch_size, **kwargs):
        res.save_to_json(save_path=out_dir)
    return len(todo)


def write_paddlex_result(path: str | os.PathLike, input_path: str, boxes: list[dict]) -> None:
    """Write one result file as ``save_to_json`` does (4-space indent, UTF-8); ``boxes`` are
    ``{"cls_id", "label", "score", "coordinate"}``. For hand-made or converted layouts."""
    obj = {"input_path": input_path, "page_index": None, "boxes": boxes}
    Path(path).write_text(json.dumps(obj, indent=4, ensure_ascii=False), encoding="utf-8")
