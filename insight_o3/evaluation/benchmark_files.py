"""A benchmark's files under the data root: its annotation in place, images unpacked from a table or an archive,
and the check that everything the annotation names is there (the evaluation loader's own check).

The five external benchmarks' annotation files ship in the repository's ``data/`` folder, laid out as the original
release's (:data:`SHIPPED_DATA`); O3-Bench's comes with its download. Images come from each benchmark's Hub
repository (:mod:`insight_o3.evaluation.benchmark_download`) or from a table release a user already has.
"""

from __future__ import annotations

import base64
import fnmatch
import hashlib
import os
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..protocol.sample import AnnotationError
from ..storage.atomic import atomic_writer
from ..storage.jsonl import iter_jsonl
from .benchmarks import BENCHMARKS, BenchmarkFiles, data_root
from .samples import load_samples

#: The repository's ``data/`` folder (the shipped annotation files), found from the package's place in a clone.
SHIPPED_DATA = Path(__file__).resolve().parents[2] / "data"


class BenchmarkDataError(Exception):
    """A benchmark's files cannot be put in place (a table without the column, an archive without an image, a
    file that is not what its source says); the message names the file and what is wrong."""


def layout_under(name: str, root: str | os.PathLike) -> BenchmarkFiles:
    """Where benchmark ``name`` lives under the data root ``root``: the original release's layout, unless only the
    image dir of an older renamed layout (an alias) is there, in which case the annotation goes next to it."""
    b = BENCHMARKS[name]
    base = Path(root)

    def under(lay: BenchmarkFiles) -> BenchmarkFiles:
        return BenchmarkFiles(str(base / lay.ann_file.split("/", 1)[1]), str(_under_root(base, lay.img_dir)))

    default = under(b.layouts[0])
    if Path(default.img_dir).is_dir() and default.img_dir != str(base) or Path(default.ann_file).is_file():
        return default
    return next((under(lay) for lay in b.aliases if Path(under(lay).img_dir).is_dir()), default)


def _under_root(base: Path, registered: str) -> Path:
    parts = registered.split("/", 1)
    return base if len(parts) == 1 else base / parts[1]


def shipped_annotation(name: str) -> Path | None:
    """The annotation file the repository ships for ``name`` (None: O3-Bench's comes with its download, or this is
    an installed package without the repository's ``data/``)."""
    path = _under_root(SHIPPED_DATA, BENCHMARKS[name].ann_file)
    return path if name != "o3_bench" and path.is_file() else None


def place_annotation(name: str, root: str | os.PathLike, source_dir: str | os.PathLike | None = None) -> str:
    """Put ``name``'s annotation file at its place under ``root`` (copied from ``source_dir``, a folder of the
    annotation files by their own names, else from the repository's ``data/``); what was done, as a phrase."""
    lay = layout_under(name, root)
    dest = Path(lay.ann_file)
    if name == "o3_bench":
        return "from the O3-Bench download" if dest.is_file() else "missing (it comes with the O3-Bench download)"
    src = Path(source_dir) / dest.name if source_dir is not None else shipped_annotation(name)
    if src is None or not src.is_file():
        if dest.is_file():
            return "in place"
        where = src or "the repository's data/ folder"
        return f"missing: {where} not found (the annotation files ship in the repository's data/)"
    if dest.is_file() and _same_file(src, dest):
        return "in place"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(dest, "wb") as f, open(src, "rb") as g:
        shutil.copyfileobj(g, f)
    return f"copied from {src}"


def _same_file(a: Path, b: Path) -> bool:
    return a.resolve() == b.resolve() or sha256_file(a) == sha256_file(b)


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def git_blob_sha1(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """The git object id of a file's content (what the Hub lists for a file kept in git, not in LFS)."""
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {os.path.getsize(path)}\0".encode())
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def annotated_images(name: str, root: str | os.PathLike) -> dict[str, str]:
    """``question_id`` (as text) -> image file name, as the placed annotation names them."""
    lay = layout_under(name, root)
    out: dict[str, str] = {}
    for where, _, obj in iter_jsonl(lay.ann_file, BenchmarkDataError):
        image = obj.get("image") or obj.get("file_name")
        if not isinstance(image, str) or not image:
            raise BenchmarkDataError(f"{where}: field 'image' (or 'file_name') is missing")
        out[str(obj.get("question_id"))] = image
    return out


# ----------------------------------------------------------------------------- tables and archives
def table_rows(table: Path, columns: list[str]) -> Iterator[dict[str, Any]]:
    """The rows of a ``.parquet`` (read in small batches) or ``.tsv`` (in chunks) table, ``columns`` only."""
    if table.suffix == ".parquet":
        import pyarrow.parquet as pq

        pf = pq.ParquetFile(table)
        present = [c for c in columns if c in pf.schema_arrow.names]
        for batch in pf.iter_batches(batch_size=16, columns=present):
            yield from batch.to_pylist()
    else:
        import pandas as pd

        for chunk in pd.read_csv(table, sep="\t", dtype=str, keep_default_na=False, chunksize=16):
            yield from chunk[[c for c in columns if c in chunk.columns]].to_dict("records")


def image_bytes(value: object) -> bytes:
    """An image cell: base64 text, raw bytes or a ``{"bytes": ...}`` struct (as ``datasets`` writes images)."""
    if isinstance(value, dict):
        value = value.get("bytes")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return base64.b64decode(value)
    raise ValueError(f"unsupported image cell of type {type(value).__name__}")


def _write(dest: Path, data: bytes) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(dest, "wb") as f:
        f.write(data)


def extract_table_images(name: str, table: Path, root: str | os.PathLike, key: str = "") -> int:
    """Write the images of a table release under the names the annotation uses (rows matched on ``key``, else
    ``question_id`` or ``index``); images already there are kept. Returns how many were written."""
    lay = layout_under(name, root)
    by_id = annotated_images(name, root)
    img_dir = Path(lay.img_dir)
    keys = [key] if key else ["question_id", "index"]
    written = 0
    for i, row in enumerate(table_rows(table, [*keys, "image"]), 1):
        rid = next((str(row[k]) for k in keys if k in row and row[k] not in (None, "")), "")
        if rid not in by_id or row.get("image") in ("", None):
            continue
        dest = img_dir / by_id[rid]
        if dest.is_file():
            continue
        try:
            _write(dest, image_bytes(row["image"]))
        except ValueError as e:
            raise BenchmarkDataError(f"{table}: row {i} (id {rid}), column 'image': {e}") from None
        written += 1
    return written


def extract_archive_images(name: str, archive: Path, root: str | os.PathLike) -> int:
    """Write the images the annotation names from a ``.zip`` (members matched by file name, wherever they sit in it;
    a name twice in it is bad input); images already there are kept. Returns how many were written."""
    lay = layout_under(name, root)
    wanted = {Path(n).name: n for n in annotated_images(name, root).values()}
    img_dir = Path(lay.img_dir)
    written = 0
    with zipfile.ZipFile(archive) as z:
        members: dict[str, zipfile.ZipInfo] = {}
        for info in z.infolist():
            base = info.filename.rsplit("/", 1)[-1]
            if info.is_dir() or base not in wanted:
                continue
            if base in members:
                raise BenchmarkDataError(
                    f"{archive}: {base} is in it twice ({members[base].filename}, {info.filename})"
                )
            members[base] = info
        for base, info in members.items():
            dest = img_dir / wanted[base]
            if not dest.is_file():
                _write(dest, z.read(info))
                written += 1
    return written


def pick_file(paths: list[str], patterns: tuple[str, ...], where: str) -> str:
    """The one path matching the first of ``patterns`` that matches any (a name or a glob, top level first)."""
    for pattern in patterns:
        hits = sorted(p for p in paths if fnmatch.fnmatch(p, pattern) or fnmatch.fnmatch(p.rsplit("/", 1)[-1], pattern))
        top = [p for p in hits if "/" not in p]
        hits = top or hits
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise BenchmarkDataError(
                f"{where}: {len(hits)} files match {pattern!r} ({', '.join(hits[:5])}); expected one"
            )
    raise BenchmarkDataError(f"{where}: no file matches {' or '.join(patterns)}")


# ----------------------------------------------------------------------------- the check
def check(name: str, root: str | os.PathLike | None = None) -> tuple[bool, str]:
    """Whether ``name`` is ready under the data root (the loader's check: every line valid, every image there), and
    the loader's message or a one-line summary."""
    lay = layout_under(name, root if root is not None else data_root())
    try:
        samples = load_samples(lay.ann_file, lay.img_dir)
    except AnnotationError as e:
        return False, str(e)
    images = len({s.image_path for s in samples})
    cats = len({s.category for s in samples})
    return True, f"{len(samples)} samples, {images} images, {cats} categories"
