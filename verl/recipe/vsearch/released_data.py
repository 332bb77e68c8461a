"""Readers of the two released training datasets, as published on the Hugging Face Hub.

``m-Just/VisCoT_VStar_Collage`` (in-loop) and ``m-Just/InfoVQA_RegionLocalization`` (out-of-loop) are
Hub datasets with *packed* images: Parquet shards of one split (``train``) whose ``image`` column is
the ``datasets`` ``Image`` feature (a struct of the encoded file ``bytes`` and its ``path``). The
authors' packer (``create_parquet_dataset.py`` of their verl fork) loads them with
``datasets.load_dataset(<local copy>, split="train")`` and reads these fields:

* VisCoT_VStar_Collage: ``image``, ``question``, ``answer``; also ``core_target_bbox`` (the target
  box of the QA in collage pixels, ``[x1, y1, x2, y2]``), ``qa_pairs``, ``n_layouts``,
  ``layout_types``, ``core_layout_coord``. The image of row ``i`` is extracted as ``<i>.<ext>``.
* InfoVQA_RegionLocalization: ``image``, ``question_id`` (``<image id>_<k>``: several region
  descriptions share one InfographicVQA image), ``region_description``, ``bbox`` (``[x1, y1, x2,
  y2]`` in image pixels). The image of ``<image id>`` is extracted once as ``<image id>.<ext>``.

Here the shards are read with pyarrow, batch by batch (memory stays bounded; no ``datasets`` cache),
from a local copy (``git clone`` / ``huggingface-cli download`` of the dataset repo). Shards of the
split are found as the Hub lays them out: ``data/<split>-*.parquet``, ``<split>/*.parquet``,
``data/<split>/*.parquet`` or ``<split>*.parquet`` at the root. Images are written once, with their
packed bytes as they are (no decode/re-encode), atomically; a rerun skips files already complete.
Bad rows raise :class:`InputError` naming the shard, the row and the field.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from PIL import Image

from insight_o3.imaging.geometry import check_box
from insight_o3.storage.atomic import atomic_writer


class InputError(ValueError):
    """Bad input; the message names the file, the line/row and the field."""


@dataclass(frozen=True)
class HubRow:
    """One row of a released dataset with its image extracted to ``image_path``."""

    where: str  # "<shard>:row <i>" for error messages
    index: int  # position in the split (all shards, in order)
    fields: dict
    image_path: str
    size: tuple[int, int]


#: columns each released dataset must have (others are ignored)
REQUIRED = {
    "viscot_vstar_collage": ("image", "question", "answer"),
    "infovqa_region_localization": ("image", "question_id", "region_description", "bbox"),
}
OPTIONAL = {"viscot_vstar_collage": ("core_target_bbox",), "infovqa_region_localization": ()}
_EXT = {"JPEG": ".jpg", "PNG": ".png", "WEBP": ".webp", "GIF": ".gif", "BMP": ".bmp", "TIFF": ".tif"}


def split_shards(data_root: str | os.PathLike, split: str = "train") -> list[Path]:
    """The Parquet shards of ``split`` in a local copy of a Hub dataset repo, in order."""
    root = Path(data_root)
    if not root.is_dir():
        raise InputError(f"--data_root {root}: not a directory (a local copy of the Hub dataset repo)")
    patterns = [
        f"data/{split}-*.parquet",
        f"data/{split}/*.parquet",
        f"{split}/*.parquet",
        f"{split}-*.parquet",
        f"{split}.parquet",
        f"data/{split}.parquet",
    ]
    for pattern in patterns:
        found = sorted(root.glob(pattern))
        if found:
            return found
    others = sorted(str(p.relative_to(root)) for p in root.rglob("*.parquet"))[:10]
    raise InputError(
        f"{root}: no Parquet shards of split '{split}' (looked for {patterns}); Parquet files found: {others or 'none'}"
    )


def _image_bytes(value: Any, where: str, root: Path) -> bytes:
    """The encoded image of a ``datasets`` Image cell: its ``bytes``, else the file at ``path``."""
    if isinstance(value, dict):
        if value.get("bytes"):
            return bytes(value["bytes"])
        path = value.get("path")
        if path:
            p = Path(path) if os.path.isabs(path) else root / path
            if p.is_file():
                return p.read_bytes()
            raise InputError(f"{where}: field 'image': no packed bytes and {p} does not exist")
    raise InputError(f"{where}: field 'image' must be a packed image ({{'bytes', 'path'}}), got {type(value).__name__}")


def _probe(data: bytes, where: str) -> tuple[str, tuple[int, int]]:
    try:
        with Image.open(io.BytesIO(data)) as im:
            return _EXT.get(im.format or "", ".img"), im.size
    except OSError as e:
        raise InputError(f"{where}: field 'image': cannot read the packed image: {e}") from None


def write_image(data: bytes, path: Path) -> None:
    """Write ``data`` to ``path`` atomically unless a complete copy is already there (resume)."""
    if path.is_file() and path.stat().st_size == len(data):
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, "wb") as f:
        f.write(data)


_SAFE = re.compile(r"[^A-Za-z0-9._-]")


def iter_hub_rows(
    kind: str, data_root: str | os.PathLike, image_dir: str | os.PathLike, split: str = "train", batch_size: int = 64
) -> Iterator[HubRow]:
    """Rows of a released dataset (``kind`` of :data:`REQUIRED`), images extracted to ``image_dir``."""
    if kind not in REQUIRED:
        raise InputError(f"unknown released dataset {kind!r}; known: {sorted(REQUIRED)}")
    root, out = Path(data_root), Path(image_dir)
    index = 0
    extracted: dict[str, tuple[str, tuple[int, int]]] = {}
    for shard in split_shards(root, split):
        pf = pq.ParquetFile(shard)
        names = pf.schema_arrow.names
        missing = [c for c in REQUIRED[kind] if c not in names]
        if missing:
            raise InputError(
                f"{shard}: field {missing[0]!r} is missing (columns: {names}); is this "
                f"{'VisCoT_VStar_Collage' if kind.startswith('viscot') else 'InfoVQA_RegionLocalization'}?"
            )
        columns = list(REQUIRED[kind]) + [c for c in OPTIONAL[kind] if c in names]
        row_in_shard = 0
        for batch in pf.iter_batches(batch_size=batch_size, columns=columns):
            for rec in batch.to_pylist():
                where = f"{shard}:row {row_in_shard}"
                if kind == "viscot_vstar_collage":
                    stem = str(index)
                else:
                    qid = rec.get("question_id")
                    if not isinstance(qid, str) or "_" not in qid:
                        raise InputError(f"{where}: field 'question_id' must be '<image id>_<k>', got {qid!r}")
                    stem = _SAFE.sub("_", qid.rsplit("_", 1)[0])
                if stem not in extracted:
                    data = _image_bytes(rec.get("image"), where, root)
                    ext, size = _probe(data, where)
                    path = out / f"{stem}{ext}"
                    write_image(data, path)
                    extracted[stem] = (str(path.resolve()), size)
                image_path, size = extracted[stem]
                rec.pop("image", None)
                yield HubRow(where, index, rec, image_path, size)
                index += 1
                row_in_shard += 1
    if index == 0:
        raise InputError(f"{root}: split '{split}' has no rows")


def box_field(value: Any, where: str, field: str, size: tuple[int, int]) -> list[float]:
    """``[x1, y1, x2, y2]`` inside a ``size`` image, else an error naming the field."""
    return list(check_box(value, where, field, size, error=InputError))


def text_field(rec: dict, name: str, where: str) -> str:
    """The field's text exactly as released (not ``.strip()``-ed: the fork's ``create_parquet_dataset.py`` writes
    question, answer and region description raw, so the vSearcher and the vReasoner saw them so)."""
    v = rec.get(name)
    if isinstance(v, bool) or not isinstance(v, (str, int, float)) or not str(v).strip():
        raise InputError(f"{where}: field '{name}' is {'missing' if v is None else 'empty or not text'}")
    return str(v)
