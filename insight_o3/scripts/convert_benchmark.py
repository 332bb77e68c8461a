"""Convert a knowledge-seeking VQA benchmark OpenSearch-VL reports into the annotation format ``evaluate`` reads,
then check it with the evaluation loader: SimpleVQA and InfoSeek from their public files
(:mod:`insight_o3.data.search_benchmarks`); FVQA, VDR-Bench (vdr), MMSearch, LiveVQA and BrowseComp-VL (bc_vl) from the
FVQA-style parquet the release's run_infer.py reads, MMSearch also from its own end2end parquet
(:mod:`insight_o3.data.release_benchmarks`).

    python -m insight_o3.scripts.convert_benchmark simplevqa SimpleVQA/test.parquet --out data/SimpleVQA
    python -m insight_o3.scripts.convert_benchmark infoseek infoseek_val.jsonl --images oven_images --out data/InfoSeek
    python -m insight_o3.scripts.convert_benchmark fvqa fvqa_test.parquet --out data/FVQA
    python -m insight_o3.scripts.convert_benchmark vdr vdr_testmini.parquet --answer_file vdr_answers.parquet --out data/VDR
    python -m insight_o3.scripts.convert_benchmark mmsearch end2end.parquet --out data/MMSearch

Then: ``evaluate --agent opensearch_vl --ann_file OUT/metadata.jsonl --img_dir OUT ...``.
Exit status: 0 done, 2 bad input (file, row and field named).
"""

from __future__ import annotations

import argparse
import sys

from ..data.release_benchmarks import RELEASE_BENCHMARKS, ConvertedRelease, convert_release
from ..data.search_benchmarks import BENCHMARKS, Converted, ConvertError, convert_infoseek, convert_simplevqa
from ..evaluation.samples import load_samples
from ..protocol.sample import AnnotationError
from ._shared import ExitCode, entry_point, new_parser


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.convert_benchmark", __doc__)
    p.add_argument("benchmark", choices=BENCHMARKS + RELEASE_BENCHMARKS)
    p.add_argument(
        "source",
        help="the benchmark's file (SimpleVQA: parquet or JSONL; InfoSeek: JSONL; the others: the FVQA-style parquet "
        "or JSONL the release reads; MMSearch also its end2end parquet)",
    )
    p.add_argument("--images", default=None, help="InfoSeek: the folder of <image_id>.<ext> images")
    p.add_argument(
        "--answer_file",
        default=None,
        help="a parquet (or JSONL) of id/answer columns giving each case's answer, as the release's "
        "eval_with_gpt4o.py --answer_file (VDR-Bench)",
    )
    p.add_argument("--out", required=True, help="where metadata.jsonl and images/ go")
    return p


@entry_point
def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    a = p.parse_args(argv)
    if a.benchmark == "infoseek" and not a.images:
        p.error("infoseek needs --images (the folder of its images)")
    if a.answer_file and a.benchmark in BENCHMARKS:
        p.error(f"--answer_file is for {', '.join(RELEASE_BENCHMARKS)}")
    try:
        skipped = 0
        done: Converted | ConvertedRelease
        if a.benchmark == "simplevqa":
            done = convert_simplevqa(a.source, a.out)
        elif a.benchmark == "infoseek":
            done = convert_infoseek(a.source, a.images, a.out)
        else:
            rel = convert_release(a.benchmark, a.source, a.out, a.answer_file)
            done, skipped = rel, rel.skipped
        load_samples(done.ann_file, done.img_dir)
    except (ConvertError, AnnotationError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    left = f"; {skipped} rows without an image left out" if skipped else ""
    print(f"{done.ann_file}: {done.rows} samples{left} (--ann_file {done.ann_file} --img_dir {done.img_dir})")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
