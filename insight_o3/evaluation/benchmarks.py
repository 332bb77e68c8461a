"""The benchmarks of the paper and where their data lives by default (``--benchmark NAME``).

Layout under the repository's ``data/`` directory (``data/README.md`` documents how to get each
one; paths in the annotation files are relative to the image directory):

=====================  ==============================================  ================================
name                   annotation file (``--ann_file``)                image dir (``--img_dir``)
=====================  ==============================================  ================================
o3_bench               data/O3-Bench/test/metadata.jsonl               data/O3-Bench/test
vstar                  data/VStar/vstar_bench.jsonl                    data/VStar/images
hr_bench_4k            data/HR-Bench/hrbench_4k.jsonl                  data/HR-Bench/images
treebench              data/TreeBench/treebench.jsonl                  data/TreeBench/images
visual_probe_hard      data/VisualProbe/visual_probe_hard.jsonl        data/VisualProbe/images
mme_realworld_lite     data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl  data/MME-RealWorld-Lite/images
=====================  ==============================================  ================================

The annotation file names are those of the real files in ``shared/benchmarks/``; relative paths
resolve against the current directory (run from the repository root, as the README does).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Benchmark:
    name: str
    ann_file: str
    img_dir: str
    description: str


BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in [
    Benchmark("o3_bench", "data/O3-Bench/test/metadata.jsonl", "data/O3-Bench/test",
              "O3-Bench (this paper): composite charts and digital maps, 345 six-option MCQs on 204 images"),
    Benchmark("vstar", "data/VStar/vstar_bench.jsonl", "data/VStar/images",
              "V*-Bench: 191 MCQs (direct_attributes, relative_position)"),
    Benchmark("hr_bench_4k", "data/HR-Bench/hrbench_4k.jsonl", "data/HR-Bench/images",
              "HR-Bench 4K: MCQs on 4K images (single / cross instance)"),
    Benchmark("treebench", "data/TreeBench/treebench.jsonl", "data/TreeBench/images",
              "TreeBench: 405 MCQs on perception and reasoning"),
    Benchmark("visual_probe_hard", "data/VisualProbe/visual_probe_hard.jsonl", "data/VisualProbe/images",
              "VisualProbe (hard split): 106 open-ended questions"),
    Benchmark("mme_realworld_lite", "data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl",
              "data/MME-RealWorld-Lite/images",
              "MME-RealWorld Lite: 50 MCQs per task type over real-world scenarios"),
]}


def get_benchmark(name: str) -> Benchmark:
    try:
        return BENCHMARKS[name]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}") from None
