"""Convert a knowledge-seeking VQA benchmark OpenSearch-VL reports into the annotation format ``evaluate`` reads
(:mod:`insight_o3.data.search_benchmarks`: SimpleVQA, InfoSeek), then check it with the evaluation loader.

    python -m insight_o3.scripts.convert_benchmark simplevqa SimpleVQA/test.parquet --out data/SimpleVQA
    python -m insight_o3.scripts.convert_benchmark infoseek infoseek_val.jsonl --images oven_images --out data/InfoSeek

Then: ``evaluate --agent opensearch_vl --ann_file OUT/metadata.jsonl --img_dir OUT ...``.
Exit status: 0 done, 2 bad input (file, row and field named).
"""

from __future__ import annotations

import argparse
import sys

from ..data.search_benchmarks import BENCHMARKS, ConvertError, convert_infoseek, convert_simplevqa
from ..evaluation.samples import load_samples
from ..protocol.sample import AnnotationError
from ._shared import ExitCode, entry_point, new_parser


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.convert_benchmark", __doc__)
    p.add_argument("benchmark", choices=BENCHMARKS)
    p.add_argument("source", help="the benchmark's file (SimpleVQA: parquet or JSONL; InfoSeek: JSONL)")
    p.add_argument("--images", default=None, help="InfoSeek: the folder of <image_id>.<ext> images")
    p.add_argument("--out", required=True, help="where metadata.jsonl and images/ go")
    return p


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.benchmark == "infoseek" and not a.images:
        p.error("infoseek needs --images (the folder of its images)")
    try:
        done = (
            convert_simplevqa(a.source, a.out)
            if a.benchmark == "simplevqa"
            else convert_infoseek(a.source, a.images, a.out)
        )
        load_samples(done.ann_file, done.img_dir)
    except (ConvertError, AnnotationError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    print(f"{done.ann_file}: {done.rows} samples (--ann_file {done.ann_file} --img_dir {done.img_dir})")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
