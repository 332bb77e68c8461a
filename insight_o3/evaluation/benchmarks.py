"""The benchmarks of the paper and where their data lives by default (``--benchmark NAME``).

The default layout is the original release's (its ``data/README.md`` and
``insight_o3/scripts/examples/sweep_baselines.sh``), so data arranged by its instructions is found
as it is. Paths in the annotation files are relative to the image directory. The ``data/`` below is the data
root: ``--data_root DIR`` or ``$INSIGHT_O3_DATA_ROOT`` puts it elsewhere (by default ``data`` in the current
directory, the repository root as the README runs it):

=====================  ====================================================  ===============================
name                   annotation file (``--ann_file``)                      image dir (``--img_dir``)
=====================  ====================================================  ===============================
o3_bench               data/O3-Bench/test/metadata.jsonl                     data/O3-Bench/test
vstar                  data/vstar_bench/vstar_bench.jsonl                    data/vstar_bench
hr_bench_4k            data/HR-Bench/hrbench_4k.jsonl                        data/HR-Bench/images_4k
treebench              data/TreeBench/treebench.jsonl                        data/TreeBench/images
visual_probe_hard      data/VisualProbe_Hard/visual_probe_hard.jsonl         data
mme_realworld_lite     data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl      data/MME-RealWorld-Lite/imgs
=====================  ====================================================  ===============================

(VisualProbe's annotation names its images ``VisualProbe_Hard/data/<file>``, hence ``data`` as the
image dir.) An earlier version of this project used renamed folders (``data/VStar/images``,
``data/HR-Bench/images``, ``data/VisualProbe/...``, ``data/MME-RealWorld-Lite/images``); that layout
is still found, as an alias, when the original one is absent (:func:`resolve_layout`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class BenchmarkFiles:
    ann_file: str
    img_dir: str


@dataclass(frozen=True)
class Benchmark:
    name: str
    ann_file: str
    img_dir: str
    description: str
    hub: str = ""  # where the images come from
    aliases: tuple[BenchmarkFiles, ...] = field(default=())  # older layouts, tried when the default is absent

    @property
    def layouts(self) -> tuple[BenchmarkFiles, ...]:
        return (BenchmarkFiles(self.ann_file, self.img_dir), *self.aliases)


BENCHMARKS: dict[str, Benchmark] = {
    b.name: b
    for b in [
        Benchmark(
            "o3_bench",
            "data/O3-Bench/test/metadata.jsonl",
            "data/O3-Bench/test",
            "O3-Bench (this paper): composite charts and digital maps, 345 six-option MCQs on 204 images",
            hub="m-Just/O3-Bench",
        ),
        Benchmark(
            "vstar",
            "data/vstar_bench/vstar_bench.jsonl",
            "data/vstar_bench",
            "V*-Bench: 191 MCQs (direct_attributes, relative_position)",
            hub="craigwu/vstar_bench",
            aliases=(BenchmarkFiles("data/VStar/vstar_bench.jsonl", "data/VStar/images"),),
        ),
        Benchmark(
            "hr_bench_4k",
            "data/HR-Bench/hrbench_4k.jsonl",
            "data/HR-Bench/images_4k",
            "HR-Bench 4K: MCQs on 4K images (single / cross instance)",
            hub="DreamMr/HR-Bench",
            aliases=(BenchmarkFiles("data/HR-Bench/hrbench_4k.jsonl", "data/HR-Bench/images"),),
        ),
        Benchmark(
            "treebench",
            "data/TreeBench/treebench.jsonl",
            "data/TreeBench/images",
            "TreeBench: 405 MCQs on perception and reasoning",
            hub="HaochenWang/TreeBench",
        ),
        Benchmark(
            "visual_probe_hard",
            "data/VisualProbe_Hard/visual_probe_hard.jsonl",
            "data",
            "VisualProbe (hard split): 106 open-ended questions",
            hub="Mini-o3/VisualProbe",
            aliases=(BenchmarkFiles("data/VisualProbe/visual_probe_hard.jsonl", "data/VisualProbe/images"),),
        ),
        Benchmark(
            "mme_realworld_lite",
            "data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl",
            "data/MME-RealWorld-Lite/imgs",
            "MME-RealWorld Lite: 50 MCQs per task type over real-world scenarios",
            hub="yifanzhang114/MME-RealWorld-Lite",
            aliases=(
                BenchmarkFiles("data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl", "data/MME-RealWorld-Lite/images"),
            ),
        ),
    ]
}


def _key(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


def canonical_name(name: str) -> str:
    """The registered name of a benchmark written any way that differs only in case, dashes, underscores or spaces
    (``O3-Bench`` -> ``o3_bench``, ``HR-Bench 4K`` -> ``hr_bench_4k``); ValueError naming the choices otherwise."""
    by_key = {_key(n): n for n in BENCHMARKS}
    try:
        return by_key[_key(name)]
    except KeyError:
        raise ValueError(f"unknown benchmark {name!r}; choose one of: {', '.join(BENCHMARKS)}") from None


def get_benchmark(name: str) -> Benchmark:
    return BENCHMARKS[canonical_name(name)]


#: The environment variable naming the data root (the folder that holds the benchmarks, ``data`` by default).
DATA_ROOT_ENV = "INSIGHT_O3_DATA_ROOT"
#: The data root when neither ``--data_root`` nor :data:`DATA_ROOT_ENV` is given (relative to the current directory).
DEFAULT_DATA_ROOT = "data"


def data_root(flag_value: str | None = None) -> str:
    """The folder holding the benchmarks: ``--data_root``, else ``$INSIGHT_O3_DATA_ROOT``, else ``data``."""
    return flag_value or os.environ.get(DATA_ROOT_ENV) or DEFAULT_DATA_ROOT


def _under(root: str, registered: str) -> str:
    """A registered path (``data/...``) under the data root ``root``."""
    parts = registered.split("/", 1)
    return root if len(parts) == 1 else os.path.join(root, parts[1])


def resolve_layout(name: str, root: str | None = None) -> BenchmarkFiles:
    """The benchmark's default (original) layout under the data root ``root`` (:func:`data_root` when None), or
    the first alias whose annotation file and image dir both exist while the default's do not. With the default
    root the paths stay relative as registered."""
    b = get_benchmark(name)
    root = data_root(root)
    layouts = [BenchmarkFiles(_under(root, lay.ann_file), _under(root, lay.img_dir)) for lay in b.layouts]

    def present(lay: BenchmarkFiles) -> bool:
        return os.path.isfile(lay.ann_file) and os.path.isdir(lay.img_dir)

    if present(layouts[0]):
        return layouts[0]
    return next((lay for lay in layouts[1:] if present(lay)), layouts[0])
