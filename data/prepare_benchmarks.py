"""Put the benchmark annotation files in place under data/ and check the images they name (no download).

    python data/prepare_benchmarks.py                         # all six benchmarks
    python data/prepare_benchmarks.py --benchmarks vstar treebench
    python data/prepare_benchmarks.py --extract hr_bench_4k=/path/hr_bench_4k.tsv   # images from a TSV/parquet

The same as ``python -m insight_o3.scripts.download_benchmarks --check_only`` (that command also downloads the
images from the Hub; data/README.md): the annotation files ship in the repository's data/ (the original release's,
O3-Bench's comes with its download), ``--source_dir`` names another folder of them; ``--extract NAME=TABLE`` unpacks
images from a table release; then the evaluation loader checks every benchmark. Exit status 0 only when every
selected benchmark is ready.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from insight_o3.evaluation.benchmarks import BENCHMARKS  # noqa: E402
from insight_o3.scripts import download_benchmarks  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(allow_abbrev=False, description=__doc__.split("\n")[0])
    ap.add_argument("--benchmarks", nargs="+", default=list(BENCHMARKS), help="default: all")
    ap.add_argument("--source_dir", default=None, help="a folder of the annotation .jsonl files (default: data/)")
    ap.add_argument("--root", type=Path, default=ROOT, help="repository root the data/ paths are under")
    ap.add_argument("--extract", action="append", default=[], metavar="NAME=TABLE", help="images from a table")
    a = ap.parse_args(argv)
    args = [*a.benchmarks, "--check_only", "--data_root", str(a.root / "data")]
    args += [x for item in a.extract for x in ("--extract", item)]
    args += ["--source_dir", a.source_dir] if a.source_dir else []
    return download_benchmarks.main(args)


if __name__ == "__main__":
    sys.exit(main())
