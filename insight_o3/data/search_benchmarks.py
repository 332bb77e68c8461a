"""Converters of the knowledge-seeking VQA benchmarks OpenSearch-VL reports into this harness's annotation format
(a JSONL of ``question_id``, ``image``, ``question``, ``answer``, ``category`` plus the images in one folder), for
the benchmarks whose public formats are known:

* **SimpleVQA** (Hugging Face ``m-a-p/SimpleVQA``, its parquet export): ``data_id``, ``image`` (a ``{bytes, path}``
  struct, base64 text or raw bytes), ``question``, ``answer``, ``original_category``, ``language``, …;
* **InfoSeek** (``infoseek_{val,test,human}.jsonl``): ``data_id``, ``image_id``, ``question``, ``answer`` (a list of
  aliases), ``answer_eng``, ``data_split``; the images (OVEN's) are files named ``<image_id>.<ext>`` in a folder.

A list of answers becomes one ``answer`` joined by ``", "`` (what ``eval_with_gpt4o.py`` hands its judge) and is kept
whole under ``answers``. A row that cannot be converted is an error naming the file, the row and the field.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from ..storage.atomic import write_jsonl_atomic

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".JPEG", ".png", ".webp")
BENCHMARKS = ("simplevqa", "infoseek")


class ConvertError(ValueError):
    """A source row that cannot be converted (names the file, the row and the field)."""


@dataclass(frozen=True)
class Converted:
    ann_file: Path
    img_dir: Path
    rows: int


def _answer(value: Any, where: str, name: str = "answer") -> tuple[str, list[str]]:
    if isinstance(value, str) and value.strip():
        return value, [value]
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        return ", ".join(value), list(value)
    raise ConvertError(f"{where}: field {name!r}: a string or a list of strings, got {value!r}"[:300])


def _image_bytes(value: Any, where: str, name: str = "image") -> bytes:
    if isinstance(value, dict):
        value = value.get("bytes")
    if isinstance(value, (bytes, bytearray)) and value:
        return bytes(value)
    if isinstance(value, str) and value:
        try:
            return base64.b64decode(value.split(",", 1)[-1], validate=True)
        except ValueError:
            pass
    raise ConvertError(f"{where}: field {name!r}: no image bytes (a {{bytes, path}} struct, base64 text or bytes)")


def _suffix(data: bytes) -> str:
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return ".png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return ".webp"
    return ".jpg"


def _rows_of(path: Path) -> Iterator[tuple[int, JSONObject]]:
    if path.suffix == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            table = pq.read_table(path)
        except pa.ArrowException as e:
            raise ConvertError(f"{path}: not a readable parquet file ({e})"[:300]) from None
        for i, row in enumerate(table.to_pylist(), start=1):
            yield i, row
        return
    with open(path, encoding="utf-8") as fh:
        for i, line in enumerate(fh, start=1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise ConvertError(f"{path}:{i}: not JSON ({e})") from None
                if not isinstance(row, dict):
                    raise ConvertError(f"{path}:{i}: not a JSON object")
                yield i, row


def _field(row: JSONObject, name: str, where: str) -> Any:
    if name not in row or row[name] in (None, ""):
        raise ConvertError(f"{where}: field {name!r} is missing")
    return row[name]


def convert_simplevqa(source: str | os.PathLike, out: str | os.PathLike) -> Converted:
    """SimpleVQA's parquet (or JSONL) -> ``out/metadata.jsonl`` and ``out/images/``."""
    src, root = Path(source), Path(out)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, row in _rows_of(src):
        where = f"{src}:{i}"
        qid = str(_field(row, "data_id", where))
        data = _image_bytes(_field(row, "image", where), where)
        name = f"{qid}{_suffix(data)}"
        (images / name).write_bytes(data)
        answer, answers = _answer(_field(row, "answer", where), where)
        rows.append({
            "question_id": qid, "image": f"images/{name}", "question": str(_field(row, "question", where)),
            "answer": answer, "answers": answers, "category": str(row.get("original_category") or "unknown"),
            "language": row.get("language"), "source": row.get("source"),
        })  # fmt: skip
    ann = root / "metadata.jsonl"
    write_jsonl_atomic(ann, rows)
    return Converted(ann, root, len(rows))


def _find_image(folder: Path, image_id: str) -> Path | None:
    for suffix in IMAGE_SUFFIXES:
        p = folder / f"{image_id}{suffix}"
        if p.is_file():
            return p
    return None


def convert_infoseek(source: str | os.PathLike, image_dir: str | os.PathLike, out: str | os.PathLike) -> Converted:
    """InfoSeek's JSONL and its image folder -> ``out/metadata.jsonl`` and ``out/images/`` (copies)."""
    src, folder, root = Path(source), Path(image_dir), Path(out)
    images = root / "images"
    images.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, row in _rows_of(src):
        where = f"{src}:{i}"
        image_id = str(_field(row, "image_id", where))
        found = _find_image(folder, image_id)
        if found is None:
            raise ConvertError(f"{where}: field 'image_id': no image {image_id}.* in {folder}")
        shutil.copyfile(found, images / found.name)
        answer, answers = _answer(_field(row, "answer", where), where)
        eng = row.get("answer_eng")
        rows.append({
            "question_id": str(_field(row, "data_id", where)), "image": f"images/{found.name}",
            "question": str(_field(row, "question", where)), "answer": answer, "answers": answers,
            "answer_eng": eng if isinstance(eng, list) else None, "category": str(row.get("data_split") or "unknown"),
        })  # fmt: skip
    ann = root / "metadata.jsonl"
    write_jsonl_atomic(ann, rows)
    return Converted(ann, root, len(rows))
