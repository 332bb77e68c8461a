"""The collage source pool (the table ``D`` of Algorithm 1) and converters that build it.

A source pool is a JSONL or Parquet table, one QA item per row:

=========  =========================================================================================
id         unique string id of the item
image      image path; relative paths are resolved against ``image_root`` (default: the directory
           of the table file)
width      image width in pixels (must match the file; checked when ``check_images=True``)
height     image height in pixels
bbox       target box ``[x1, y1, x2, y2]`` in image pixels (the evidence region of the QA)
question   question text
answer     ground-truth answer text (for multiple choice: the correct option's letter or text)
options    list of option strings, or null / missing for open questions
source     dataset name, e.g. ``viscot/textvqa`` or ``vstar``
=========  =========================================================================================

C.1 keeps items with ``area(bbox) / area(image) < 0.04`` (:func:`filter_small_targets`). The
converters read the public annotation formats:

* Visual CoT metadata JSONL (one file per subset, ``metadata/<subset>_cot_train.jsonl``): fields
  ``question``, ``answer``, ``image`` (relative path), ``bboxs`` (list of ``[x1, y1, x2, y2]``;
  several boxes are enclosed in one), ``width``, ``height``, ``dataset``, ``question_id``.
* V*-style JSON/JSONL (the V* benchmark annotation form, also used for its training data):
  ``image``, ``question``, ``bbox`` (list of ``[x, y, w, h]`` boxes, one per target object, enclosed
  in one), ``options`` (the first option is the correct one) or ``answer``, optional ``width`` /
  ``height`` (read from the image header otherwise). Options are shuffled deterministically per
  item and ``answer`` becomes the correct option's letter.

Item ids are ``viscot/<dataset>/<question_id>`` and ``vstar/<question_id>`` (V*: the ``id`` field, else the
image's file stem, when there is no ``question_id``). An id met again — several questions about one image
without ``question_id`` — gets ``#2``, ``#3`` … in file order (across the files of one pool with a shared
:class:`UniqueIds`), so a converted pool always loads.
"""

from __future__ import annotations

import json
import os
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..base.json_types import JSONObject
from ..imaging.geometry import check_box
from ..imaging.images import ImageError, image_size
from ..jobs.integrity import sha256_json
from ..storage.atomic import write_jsonl_atomic
from ..storage.jsonl import iter_jsonl

#: C.1 source filter: keep items whose bbox covers less than this fraction of the image.
MAX_BBOX_RATIO = 0.04
#: Visual CoT subsets of C.1: Chart/OCR-centric (kept as they are) and natural-image (need the MLLM check).
VISCOT_TEXT_SUBSETS = ("dude", "cub", "textvqa", "docvqa", "infographicsvqa", "sroie", "vsr", "textcap")
VISCOT_NATURAL_SUBSETS = ("flickr30k", "gqa", "openimages", "v7w")
POOL_COLUMNS = ("id", "image", "width", "height", "bbox", "question", "answer", "options", "source")


class PoolError(ValueError):
    """Unusable source-pool input; the message names the file, the row/line and the field."""


@dataclass(frozen=True)
class SourceItem:
    id: str
    image: str  # resolved path
    width: int
    height: int
    bbox: tuple[float, float, float, float]
    question: str
    answer: str
    options: tuple[str, ...] | None
    source: str

    @property
    def bbox_ratio(self) -> float:
        x1, y1, x2, y2 = self.bbox
        return (x2 - x1) * (y2 - y1) / (self.width * self.height)

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["bbox"] = list(self.bbox)
        d["options"] = list(self.options) if self.options is not None else None
        return d


def pool_sha256(items: list[SourceItem]) -> str:
    """sha256 of what a pool's items hold (image file names, not where they are), fixed by a run's first run."""
    return sha256_json([{**it.to_dict(), "image": os.path.basename(it.image)} for it in items])


def _field(row: JSONObject, name: str, where: str) -> Any:
    if name not in row or row[name] is None:
        raise PoolError(f"{where}: missing field '{name}'")
    return row[name]


def parse_item(row: dict, where: str, image_root: str) -> SourceItem:
    """Validate one pool row (``where`` is ``file:line`` for error messages)."""
    try:
        width, height = int(_field(row, "width", where)), int(_field(row, "height", where))
    except (TypeError, ValueError):
        raise PoolError(f"{where}: field 'width'/'height' must be integers") from None
    if width <= 0 or height <= 0:
        raise PoolError(f"{where}: field 'width'/'height' must be positive, got {width}x{height}")
    x1, y1, x2, y2 = check_box(_field(row, "bbox", where), where, "bbox", (width, height), error=PoolError)
    options = row.get("options")
    if isinstance(options, np.ndarray):
        options = options.tolist()
    if options is not None:
        if not isinstance(options, (list, tuple)) or not all(isinstance(o, str) for o in options):
            raise PoolError(f"{where}: field 'options' must be a list of strings or null")
        options = tuple(options) or None
    image = str(_field(row, "image", where))
    path = image if os.path.isabs(image) else os.path.join(image_root, image)
    for name in ("question", "answer"):
        if not isinstance(_field(row, name, where), (str, int, float)):
            raise PoolError(f"{where}: field '{name}' must be text")
    return SourceItem(
        id=str(_field(row, "id", where)),
        image=path,
        width=width,
        height=height,
        bbox=(x1, y1, x2, y2),
        question=str(row["question"]),
        answer=str(row["answer"]),
        options=options,
        source=str(row.get("source") or "unknown"),
    )


def _iter_rows(path: str) -> Iterator[tuple[str, JSONObject]]:
    if path.endswith(".parquet"):
        import pandas as pd

        df = pd.read_parquet(path)
        for i, row in enumerate(df.to_dict(orient="records")):
            yield f"{path}:row {i}", row
        return
    for where, _, row in iter_jsonl(path, PoolError, what="source pool file"):
        yield where, row


def load_pool(
    path: str | os.PathLike, image_root: str | os.PathLike | None = None, check_images: bool = True
) -> list[SourceItem]:
    """Read and validate a pool table. ``check_images`` verifies that each file exists and that its
    header size matches ``width``/``height`` (a mismatch would silently misplace the target box)."""
    path = str(path)
    if not os.path.isfile(path):
        raise PoolError(f"source pool not found: {path}")
    root = str(image_root) if image_root is not None else os.path.dirname(os.path.abspath(path))
    items: list[SourceItem] = []
    seen: dict[str, str] = {}
    for where, row in _iter_rows(path):
        item = parse_item(row, where, root)
        if item.id in seen:
            raise PoolError(f"{where}: duplicate id {item.id!r} (first at {seen[item.id]})")
        seen[item.id] = where
        if check_images:
            _check_image(item, where)
        items.append(item)
    if not items:
        raise PoolError(f"{path}: the source pool is empty")
    return items


def _check_image(item: SourceItem, where: str) -> None:
    try:
        size = image_size(item.image)
    except ImageError as e:
        raise PoolError(f"{where}: {e}") from None
    if size != (item.width, item.height):
        raise PoolError(f"{where}: image {item.image} is {size[0]}x{size[1]}, the row says {item.width}x{item.height}")


def filter_small_targets(items: list[SourceItem], max_ratio: float = MAX_BBOX_RATIO) -> list[SourceItem]:
    """C.1: keep items with ``area(bbox) / area(image) < max_ratio``."""
    return [it for it in items if it.bbox_ratio < max_ratio]


def write_pool(items: list[SourceItem], path: str, image_root: str | None = None) -> None:
    """Write a JSONL pool atomically; image paths are made relative to ``image_root`` when given."""

    def row(it: SourceItem) -> JSONObject:
        d = it.to_dict()
        if image_root is not None:
            d["image"] = os.path.relpath(it.image, image_root)
        return d

    write_jsonl_atomic(path, (row(it) for it in items))


# ----------------------------------------------------------------------------- converters
def _enclose(boxes: list[list[float]]) -> tuple[float, float, float, float]:
    return (min(b[0] for b in boxes), min(b[1] for b in boxes), max(b[2] for b in boxes), max(b[3] for b in boxes))


def _read_json_records(path: str) -> Iterator[tuple[str, Any]]:
    """A JSON array file or a JSONL file, yielding ``(where, record)``."""
    with open(path, encoding="utf-8") as f:
        head = f.read(1)
        while head and head.isspace():
            head = f.read(1)
    if head == "[":
        with open(path, encoding="utf-8") as f:
            try:
                data = json.load(f)
            except json.JSONDecodeError as e:
                raise PoolError(f"{path}: malformed JSON ({e})") from None
        for i, rec in enumerate(data):
            yield f"{path}:[{i}]", rec
    else:
        yield from _iter_rows(path)


def _image_and_size(rec: dict, where: str, image_root: str) -> tuple[str, int, int]:
    """The record's image path (under ``image_root`` unless absolute) and its size: the record's
    ``width``/``height`` when given, else read from the file header."""
    image = str(_field(rec, "image", where))
    full = image if os.path.isabs(image) else os.path.join(image_root, image)
    if "width" in rec and "height" in rec:
        return full, int(rec["width"]), int(rec["height"])
    if not os.path.isfile(full):
        raise PoolError(f"{where}: image file not found: {full}")
    try:
        return (full, *image_size(full))
    except ImageError as e:
        raise ImageError(f"{where}: {e}") from None


class UniqueIds:
    """Ids in the order met; a repeated id gets ``#<k>`` (its k-th occurrence, 2 on), deterministically."""

    def __init__(self) -> None:
        self.seen: dict[str, int] = {}

    def __call__(self, base: str) -> str:
        k = self.seen[base] = self.seen.get(base, 0) + 1
        if k == 1:
            return base
        name = f"{base}#{k}"
        while name in self.seen:  # "#k" written in the input itself
            k += 1
            name = f"{base}#{k}"
        self.seen[name] = 1
        return name


def convert_viscot(path: str, image_root: str, ids: UniqueIds | None = None) -> list[SourceItem]:
    """Visual CoT metadata JSONL → pool items (``source = viscot/<dataset>``)."""
    items = []
    unique = ids or UniqueIds()
    for where, rec in _read_json_records(path):
        boxes = _field(rec, "bboxs", where)
        if not boxes or not all(isinstance(b, (list, tuple)) and len(b) == 4 for b in boxes):
            raise PoolError(f"{where}: field 'bboxs' must be a non-empty list of [x1, y1, x2, y2]")
        full, w, h = _image_and_size(rec, where, image_root)
        dataset = str(rec.get("dataset") or Path(path).name.split("_cot")[0])
        qid = rec.get("question_id", where.rsplit(":", 1)[-1])
        row = {
            "id": unique(f"viscot/{dataset}/{qid}"),
            "image": full,
            "width": w,
            "height": h,
            "bbox": list(_enclose(boxes)),
            "question": _field(rec, "question", where),
            "answer": _field(rec, "answer", where),
            "options": None,
            "source": f"viscot/{dataset}",
        }
        items.append(parse_item(row, where, image_root))
    return items


def convert_vstar(path: str, image_root: str, ids: UniqueIds | None = None) -> list[SourceItem]:
    """V*-style annotations (``bbox`` as ``[x, y, w, h]`` boxes, first option correct) → pool items."""
    items = []
    unique = ids or UniqueIds()
    for where, rec in _read_json_records(path):
        boxes = _field(rec, "bbox", where)
        if boxes and isinstance(boxes[0], (int, float)):
            boxes = [boxes]
        if not boxes or not all(isinstance(b, (list, tuple)) and len(b) == 4 for b in boxes):
            raise PoolError(f"{where}: field 'bbox' must be [x, y, w, h] or a list of them")
        xyxy = [[b[0], b[1], b[0] + b[2], b[1] + b[3]] for b in boxes]
        full, w, h = _image_and_size(rec, where, image_root)
        image = str(rec["image"])  # as written in the annotation: seeds the option shuffle, names the item
        options = rec.get("options")
        if options:
            # V* lists the correct option first; shuffle deterministically (per item id) so that the
            # answer is not always "A", and record the correct letter.
            order = np.random.default_rng(zlib.crc32(str(rec.get("question_id", image)).encode())).permutation(
                len(options)
            )
            options = [options[i] for i in order]
            answer = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"[int(np.flatnonzero(order == 0)[0])]
        else:
            answer = _field(rec, "answer", where)
        qid = rec.get("question_id", rec.get("id", Path(image).stem))
        row = {
            "id": unique(f"vstar/{qid}"),
            "image": full,
            "width": w,
            "height": h,
            "bbox": list(_enclose(xyxy)),
            "question": _field(rec, "question", where),
            "answer": answer,
            "options": options or None,
            "source": "vstar",
        }
        items.append(parse_item(row, where, image_root))
    return items
