"""Pack the released training datasets, and benchmark / collage / region-localization jsonl files,
into verl parquet files.

Example usages (from the project's ``verl/`` directory, with ``PYTHONPATH`` holding the project root
and ``verl/``, as in the README):

  # the released training data (local copies of the Hub datasets, e.g. the data/ submodules)
  python recipe/vsearch/create_parquet_dataset.py infovqa_region_localization \\
      --data_root ../data/InfoVQA_RegionLocalization --out ../data/InfoVQA_RegionLocalization/train-vsearcher.parquet
  python recipe/vsearch/create_parquet_dataset.py viscot_vstar_collage \\
      --data_root ../data/VisCoT_VStar_Collage --out ../data/VisCoT_VStar_Collage/train.parquet

  (images are extracted once to ``<data_root>/<split>/images`` or ``--image_dir``; data sources
  default to the names train.sh weighs: info_vqa_region_localization, visual_cot_vstar_collage)

  # data rebuilt with this project's pipelines (jsonl): out-of-loop region descriptions -> agent_name=vsearcher
  python recipe/vsearch/create_parquet_dataset.py region \\
      --ann_file ../out/region_localization/regions.jsonl --img_dir ../data/infographicsvqa/images \\
      --data_source info_vqa_region_localization --out ../data/parquet/info_vqa_region_localization.parquet

  # ... in-loop QA on collages (generate_collages, after the difficulty filter) -> agent_name=vreasoner
  python recipe/vsearch/create_parquet_dataset.py collage \\
      --ann_file ../out/collages/collages_hard.jsonl --img_dir ../out/collages \\
      --data_source visual_cot_vstar_collage --out ../data/parquet/visual_cot_vstar_collage.parquet

  # evaluation data: a benchmark in the evaluation loader's format -> agent_name=vreasoner
  python recipe/vsearch/create_parquet_dataset.py benchmark \\
      --ann_file ../data/VStar/vstar_bench.jsonl --img_dir ../data/VStar/images \\
      --data_source vstar --out ../data/parquet/vstar.parquet

Columns (exactly those of the original README): ``data_source``, ``prompt`` (a user message with
``<image>`` and the task text), ``images`` (``[{'image': 'file:///abs/path'}]``), ``reward_model``
(``{'ground_truth': ..., 'style': 'rule'}``; for region rows the box as JSON text), ``extra_info``
and ``agent_name`` (``vsearcher`` | ``vreasoner``). ``extra_info`` has the same fields in every file
(so verl can concatenate files of different kinds): ``index, question_id, question, options,
answer, description, category, bboxes (list of (x1, y1, x2, y2) or null), width, height, source``.

Input validation stops at the first bad row with ``<file>:<line>: field '<name>' ...``. Input formats:

* ``viscot_vstar_collage`` / ``infovqa_region_localization``: the released Hub datasets (packed
  images), read by :mod:`recipe.vsearch.released_data`; collage rows keep ``core_target_bbox`` as
  ``bboxes`` (the other layout fields are not used by training and are not packed).
* ``benchmark`` / ``collage``: the evaluation loader's format (``insight_o3.evaluation.samples``):
  ``image`` (or ``file_name``), ``question``, ``options`` (optional), ``answer``, ``category``;
  collages may add ``target_bbox`` (one box or a list of boxes, original pixels), kept as ``bboxes``.
* ``region``: ``image``, ``width``, ``height``, ``description``, ``bbox`` [x1, y1, x2, y2] (or
  ``bboxes``: a list of them), optional ``source``; boxes must lie inside the image.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from insight_o3.base.json_types import JSONObject
from insight_o3.imaging.geometry import check_box
from insight_o3.imaging.images import ImageError, image_size
from insight_o3.protocol.questions import insight_o3_question
from insight_o3.storage.atomic import atomic_writer
from insight_o3.storage.jsonl import iter_jsonl

try:  # run as a script (python recipe/vsearch/create_parquet_dataset.py) or imported as recipe.vsearch.*
    from recipe.vsearch.released_data import InputError, box_field, iter_hub_rows, text_field
except ImportError:  # pragma: no cover - the script's own directory is on sys.path
    from released_data import InputError, box_field, iter_hub_rows, text_field  # type: ignore[no-redef]

RELEASED = ("viscot_vstar_collage", "infovqa_region_localization")
KINDS = ("region", "collage", "benchmark", *RELEASED)
AGENT_FOR_KIND = {
    "region": "vsearcher",
    "collage": "vreasoner",
    "benchmark": "vreasoner",
    "viscot_vstar_collage": "vreasoner",
    "infovqa_region_localization": "vsearcher",
}
#: data_source of the released datasets: the names train.sh weighs (+data.batch_sampler.weights.<name>)
DEFAULT_SOURCE = {
    "viscot_vstar_collage": "visual_cot_vstar_collage",
    "infovqa_region_localization": "info_vqa_region_localization",
}

EXTRA_INFO_TYPE = pa.struct(
    [
        ("index", pa.int64()),
        ("question_id", pa.string()),
        ("question", pa.string()),
        ("options", pa.string()),
        ("answer", pa.string()),
        ("description", pa.string()),
        ("category", pa.string()),
        ("bboxes", pa.list_(pa.list_(pa.float64()))),
        ("width", pa.int64()),
        ("height", pa.int64()),
        ("source", pa.string()),
    ]
)
SCHEMA = pa.schema(
    [
        ("data_source", pa.string()),
        ("prompt", pa.list_(pa.struct([("role", pa.string()), ("content", pa.string())]))),
        ("images", pa.list_(pa.struct([("image", pa.string())]))),
        ("reward_model", pa.struct([("ground_truth", pa.string()), ("style", pa.string())])),
        ("extra_info", EXTRA_INFO_TYPE),
        ("agent_name", pa.string()),
    ]
)


def _image_size(path: str, where: str) -> tuple[int, int]:
    if not os.path.isfile(path):
        raise InputError(f"{where}: field 'image': file not found: {path}")
    try:
        return image_size(path)
    except ImageError as e:
        raise InputError(f"{where}: field 'image': {e}") from None


def _box(value: Any, where: str, field: str, size: tuple[int, int] | None) -> list[float]:
    return list(check_box(value, where, field, size, error=InputError))


def _boxes(value: Any, where: str, field: str, size: tuple[int, int] | None) -> list[list[float]]:
    """One box or a list of boxes -> list of boxes."""
    if isinstance(value, (list, tuple)) and value and all(isinstance(b, (list, tuple)) for b in value):
        return [_box(b, where, f"{field}[{i}]", size) for i, b in enumerate(value)]
    return [_box(value, where, field, size)]


def _read_jsonl(path: str) -> Iterator[tuple[str, JSONObject]]:
    return ((where, obj) for where, _, obj in iter_jsonl(path, InputError))


def _extra(**kw: Any) -> JSONObject:
    base = {name: None for name in EXTRA_INFO_TYPE.names}
    base.update(kw)
    return base


def _row(data_source: str, agent: str, image_path: str, text: str, ground_truth: str, extra: dict) -> JSONObject:
    return {
        "data_source": data_source,
        "prompt": [{"role": "user", "content": f"<image>\n{text}"}],
        "images": [{"image": "file://" + os.path.abspath(image_path)}],
        "reward_model": {"ground_truth": ground_truth, "style": "rule"},
        "extra_info": extra,
        "agent_name": agent,
    }


def region_rows(ann_file: str, img_dir: str, data_source: str, check_images: bool = True) -> list[JSONObject]:
    rows: list[dict] = []
    for where, obj in _read_jsonl(ann_file):
        image = obj.get("image")
        if not isinstance(image, str) or not image.strip():
            raise InputError(f"{where}: field 'image' is {'missing' if 'image' not in obj else 'not a file name'}")
        desc = obj.get("description")
        if not isinstance(desc, str) or not desc.strip():
            raise InputError(f"{where}: field 'description' is {'missing' if 'description' not in obj else 'empty'}")
        size = None
        for f in ("width", "height"):
            v = obj.get(f)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise InputError(f"{where}: field '{f}' must be a positive integer, got {v!r}")
        size = (obj["width"], obj["height"])
        path = os.path.join(img_dir, image)
        if check_images:
            real = _image_size(path, where)
            if real != size:
                raise InputError(
                    f"{where}: fields 'width'/'height' say {size[0]}x{size[1]} but {path} is {real[0]}x{real[1]}"
                )
        if "bbox" in obj:
            boxes = [_box(obj["bbox"], where, "bbox", size)]
        elif "bboxes" in obj:
            boxes = _boxes(obj["bboxes"], where, "bboxes", size)
        else:
            raise InputError(f"{where}: field 'bbox' is missing")
        source = obj.get("source")
        extra = _extra(
            index=len(rows),
            question_id=str(obj.get("id", len(rows))),
            description=desc.strip(),
            bboxes=boxes,
            width=size[0],
            height=size[1],
            source=None if source is None else str(source),
        )
        rows.append(_row(data_source, "vsearcher", path, desc.strip(), json.dumps(boxes[0]), extra))
    if not rows:
        raise InputError(f"{ann_file}: no rows (the file is empty)")
    return rows


def qa_rows(ann_file: str, img_dir: str, data_source: str, kind: str, check_images: bool = True) -> list[JSONObject]:
    """Benchmark / collage rows through the evaluation loader (one validator for both uses)."""
    from insight_o3.evaluation.samples import load_samples
    from insight_o3.protocol.sample import AnnotationError

    try:
        samples = load_samples(ann_file, img_dir, check_images=check_images)
    except AnnotationError as e:
        raise InputError(str(e)) from None
    rows = []
    for s in samples:
        where = f"{ann_file}:{s.line}"
        boxes = None
        if "target_bbox" in s.extra and s.extra["target_bbox"] is not None:
            size = _image_size(s.image_path, where) if check_images else None
            boxes = _boxes(s.extra["target_bbox"], where, "target_bbox", size)
        extra = _extra(
            index=s.index,
            question_id=str(s.question_id) if s.question_id is not None else s.key,
            question=s.question,
            options=s.options,
            answer=s.answer,
            category=s.category,
            bboxes=boxes,
            source=str(s.extra["source"]) if s.extra.get("source") is not None else None,
        )
        rows.append(_row(data_source, AGENT_FOR_KIND[kind], s.image_path, insight_o3_question(s), s.answer, extra))
    return rows


def released_rows(
    kind: str, data_root: str, data_source: str, image_dir: str | None = None, split: str = "train"
) -> list[JSONObject]:
    """Rows of a released Hub dataset (``kind`` in :data:`RELEASED`); images go to ``image_dir``
    (default ``<data_root>/<split>/images``, where the authors' packer put them)."""
    image_dir = image_dir or os.path.join(data_root, split, "images")
    rows = []
    for r in iter_hub_rows(kind, data_root, image_dir, split):
        w, h = r.size
        if kind == "infovqa_region_localization":
            desc = text_field(r.fields, "region_description", r.where)
            box = box_field(r.fields["bbox"], r.where, "bbox", r.size)
            extra = _extra(
                index=r.index,
                question_id=str(r.fields["question_id"]),
                description=desc,
                bboxes=[box],
                width=w,
                height=h,
                source="InfoVQA_RegionLocalization",
            )
            rows.append(_row(data_source, "vsearcher", r.image_path, desc, json.dumps(box), extra))
            continue
        question = text_field(r.fields, "question", r.where)
        answer = text_field(r.fields, "answer", r.where)
        target = r.fields.get("core_target_bbox")
        boxes = [box_field(target, r.where, "core_target_bbox", r.size)] if target is not None else None
        extra = _extra(
            index=r.index,
            question_id=str(r.index),
            question=question,
            answer=answer,
            category="collage",
            bboxes=boxes,
            width=w,
            height=h,
            source="VisCoT_VStar_Collage",
        )
        rows.append(_row(data_source, "vreasoner", r.image_path, question, answer, extra))
    return rows


def _check_source(data_source: str) -> None:
    if not data_source or not data_source.replace("_", "").replace("-", "").isalnum():
        raise InputError(
            f"--data_source must be a non-empty name of letters, digits, '_' or '-' (it becomes "
            f"the key of +data.batch_sampler.weights.<data_source>), got {data_source!r}"
        )


def build_rows(kind: str, ann_file: str, img_dir: str, data_source: str, check_images: bool = True) -> list[JSONObject]:
    """Rows of a jsonl input (``region`` / ``collage`` / ``benchmark``)."""
    if kind not in KINDS or kind in RELEASED:
        raise InputError(f"kind must be one of {[k for k in KINDS if k not in RELEASED]}, got {kind!r}")
    _check_source(data_source)
    if kind == "region":
        return region_rows(ann_file, img_dir, data_source, check_images)
    return qa_rows(ann_file, img_dir, data_source, kind, check_images)


def write_parquet(rows: list[dict], out: str | os.PathLike) -> Path:
    """Write the rows atomically (a crash leaves the old file or none, never half a file)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    with atomic_writer(out, "wb") as f:
        pq.write_table(table, f)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        allow_abbrev=False, description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--data_root", help="released kinds: local copy of the Hub dataset repo")
    p.add_argument("--split", default="train", help="released kinds: the split to pack (default train)")
    p.add_argument(
        "--image_dir", help="released kinds: where images are extracted (default <data_root>/<split>/images)"
    )
    p.add_argument("--ann_file", help="jsonl kinds: input jsonl")
    p.add_argument("--img_dir", help="jsonl kinds: directory the jsonl's image paths are relative to")
    p.add_argument(
        "--data_source",
        help="data_source column value (sampler weight key); released kinds default to the names train.sh weighs",
    )
    p.add_argument("--out", required=True, help="output .parquet file")
    p.add_argument("--max_samples", type=int, default=-1, help="keep only the first N rows")
    p.add_argument("--no_check_images", action="store_true", help="jsonl kinds: skip opening images (sizes unchecked)")
    a = p.parse_args(argv)
    if a.kind in RELEASED:
        if not a.data_root:
            p.error(f"{a.kind} needs --data_root")
    elif not (a.ann_file and a.img_dir and a.data_source):
        p.error(f"{a.kind} needs --ann_file, --img_dir and --data_source")
    try:
        if a.kind in RELEASED:
            source = a.data_source or DEFAULT_SOURCE[a.kind]
            _check_source(source)
            rows = released_rows(a.kind, a.data_root, source, a.image_dir, a.split)
        else:
            rows = build_rows(a.kind, a.ann_file, a.img_dir, a.data_source, check_images=not a.no_check_images)
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.max_samples > 0:
        rows = rows[: a.max_samples]
    out = write_parquet(rows, a.out)
    print(f"wrote {len(rows)} rows ({a.kind}, agent_name={AGENT_FOR_KIND[a.kind]}) to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
