"""Put the benchmark annotation files in place under data/ and check the images they name.

    python data/prepare_benchmarks.py                         # all six benchmarks
    python data/prepare_benchmarks.py --benchmarks vstar treebench
    python data/prepare_benchmarks.py --extract hr_bench_4k=/path/hr_bench_4k.tsv   # images from a TSV/parquet

For every benchmark of ``insight_o3.evaluation.benchmarks`` it copies the annotation file from
``--source_dir`` (the real files of ``shared/benchmarks/``, the same as the original release's
``data/*/*.jsonl``; O3-Bench's ``metadata.jsonl`` comes with its download instead) to the registered
``--ann_file`` path of the original release's layout (or next to the images of an older renamed layout), optionally extracts images from a
table release (rows matched on ``question_id``/``index``; the ``image`` column holds base64 text,
raw bytes or a ``{"bytes": ...}`` struct; files are named as the annotation's image field), then
validates the whole set with the evaluation loader — the same check ``evaluate`` runs before any
API call. Exit status 0 only when every selected benchmark is ready. See data/README.md.
"""

from __future__ import annotations

import argparse
import base64
import filecmp
import json
import os
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from insight_o3.evaluation.benchmarks import BENCHMARKS, BenchmarkFiles  # noqa: E402
from insight_o3.evaluation.samples import load_samples  # noqa: E402
from insight_o3.protocol.sample import AnnotationError  # noqa: E402

DEFAULT_SOURCE = ROOT.parent / "shared" / "benchmarks"


def layout_for(name: str, root: Path) -> BenchmarkFiles:
    """Where the benchmark goes under ``root``: the original release's layout, unless only the image dir
    of an older renamed layout (an alias) is there, in which case the annotation goes next to it."""
    b = BENCHMARKS[name]
    default, aliases = b.layouts[0], b.aliases
    if (root / default.img_dir).is_dir() or (root / default.ann_file).is_file():
        return default
    return next((lay for lay in aliases if (root / lay.img_dir).is_dir()), default)


def place_annotation(name: str, source_dir: Path, root: Path) -> str:
    lay = layout_for(name, root)
    dest = root / lay.ann_file
    src = source_dir / Path(lay.ann_file).name
    if name == "o3_bench":
        return "from the O3-Bench download" if dest.is_file() else "missing (download O3-Bench, see data/README.md)"
    if not src.is_file():
        return "already in place" if dest.is_file() else f"missing: {src} not found (give --source_dir)"
    if dest.is_file() and filecmp.cmp(src, dest, shallow=False):
        return "already in place"
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{dest.name}.tmp")
    shutil.copyfile(src, tmp)
    os.replace(tmp, dest)
    return f"copied from {src}"


def _rows(table: Path):
    if table.suffix == ".parquet":
        import pyarrow.parquet as pq

        yield from pq.read_table(table).to_pylist()
    else:
        import pandas as pd

        yield from pd.read_csv(table, sep="\t", dtype=str, keep_default_na=False).to_dict("records")


def _image_bytes(value) -> bytes:
    if isinstance(value, dict):
        value = value.get("bytes")
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return base64.b64decode(value)
    raise ValueError(f"unsupported image cell of type {type(value).__name__}")


def extract_images(name: str, table: Path, root: Path) -> int:
    """Write the images of a table release under the file names the annotation file uses."""
    lay = layout_for(name, root)
    ann = root / lay.ann_file
    if not ann.is_file():
        raise SystemExit(f"{name}: place {ann} first (it names the image files)")
    by_id: dict[str, str] = {}
    with open(ann, encoding="utf-8") as f:
        for line_no, line in enumerate(f, 1):
            if line.strip():
                rec = json.loads(line)
                by_id[str(rec.get("question_id"))] = rec.get("image") or rec["file_name"]
    img_dir = root / lay.img_dir
    written = 0
    for i, row in enumerate(_rows(table), 1):
        key = str(row.get("question_id", row.get("index", "")))
        if key not in by_id or "image" not in row or row["image"] in ("", None):
            continue
        dest = img_dir / by_id[key]
        if dest.is_file():
            continue
        try:
            data = _image_bytes(row["image"])
        except ValueError as e:
            raise SystemExit(f"{table}: row {i} (id {key}), column 'image': {e}") from None
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.tmp")
        tmp.write_bytes(data)
        os.replace(tmp, dest)
        written += 1
    return written


def check(name: str, root: Path) -> tuple[bool, str]:
    lay = layout_for(name, root)
    try:
        samples = load_samples(root / lay.ann_file, root / lay.img_dir)
    except AnnotationError as e:
        return False, str(e)
    images = len({s.image_path for s in samples})
    cats = len({s.category for s in samples})
    return True, f"{len(samples)} samples, {images} images, {cats} categories"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", nargs="+", choices=sorted(BENCHMARKS), default=list(BENCHMARKS))
    ap.add_argument(
        "--source_dir",
        type=Path,
        default=DEFAULT_SOURCE,
        help="directory holding the annotation .jsonl files (default: ../shared/benchmarks)",
    )
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root the data/ paths are under")
    ap.add_argument(
        "--extract",
        action="append",
        default=[],
        metavar="NAME=TABLE",
        help="extract images of benchmark NAME from a .tsv or .parquet release (repeatable)",
    )
    a = ap.parse_args(argv)
    for item in a.extract:
        name, _, table = item.partition("=")
        if name not in BENCHMARKS or not table:
            ap.error(f"--extract expects NAME=PATH with NAME one of {', '.join(BENCHMARKS)}, got {item!r}")
    ok_all = True
    for name in a.benchmarks:
        print(f"{name}: annotation {place_annotation(name, a.source_dir, a.root)}")
    for item in a.extract:
        name, _, table = item.partition("=")
        print(f"{name}: extracted {extract_images(name, Path(table), a.root)} image(s) from {table}")
    for name in a.benchmarks:
        ok, msg = check(name, a.root)
        ok_all &= ok
        print(f"{name}: {'ready' if ok else 'NOT READY'}: {msg}")
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
