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
from enum import Enum


@dataclass(frozen=True)
class BenchmarkFiles:
    ann_file: str
    img_dir: str


class HubKind(str, Enum):
    """How a Hub dataset repository's files become the original release's layout."""

    FILES = "files"  # the files themselves (the images the annotation names, or every file under a folder)
    TABLE = "table"  # one table (.parquet/.tsv) holding each image in a column, one row per question
    ARCHIVE = "archive"  # one .zip holding the images


@dataclass(frozen=True)
class HubSource:
    """Where a benchmark's files are on the Hugging Face Hub (a dataset repository at a commit) and how they are laid
    out under the data root (:mod:`insight_o3.evaluation.benchmark_download` fetches them)."""

    repo: str
    #: The commit fetched; None: not confirmed from a networked machine, so ``main`` is resolved to its commit at the
    #: first download and that commit is recorded in the folder and used by every later run.
    revision: str | None
    kind: HubKind
    #: The folder below the data root the files go to.
    folder: str
    #: Where :attr:`revision` comes from.
    provenance: str
    #: FILES: fetch every file under this repository folder (O3-Bench ships its annotation with its images); empty:
    #: fetch the images the shipped annotation names, at their names less :attr:`strip`.
    prefix: str = ""
    strip: str = ""
    #: TABLE/ARCHIVE: the repository file, or glob patterns tried in order (one file must match).
    table: tuple[str, ...] = ()
    #: TABLE: the column holding the annotation's ``question_id``.
    key: str = "index"


@dataclass(frozen=True)
class Benchmark:
    name: str
    ann_file: str
    img_dir: str
    description: str
    source: HubSource
    aliases: tuple[BenchmarkFiles, ...] = field(default=())  # older layouts, tried when the default is absent

    @property
    def hub(self) -> str:
        """The Hub dataset repository the images come from."""
        return self.source.repo

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
            HubSource(
                "m-Just/O3-Bench",
                "281f08793930fe06801a0f07c8ebc2900e7d4460",
                HubKind.FILES,
                "O3-Bench",
                "the commit of the original release's data/O3-Bench submodule",
                prefix="test/",
            ),
        ),
        Benchmark(
            "vstar",
            "data/vstar_bench/vstar_bench.jsonl",
            "data/vstar_bench",
            "V*-Bench: 191 MCQs (direct_attributes, relative_position)",
            HubSource(
                "craigwu/vstar_bench",
                "d9ae62c903da0c98336e85c5ee89cd863b04b4da",
                HubKind.FILES,
                "vstar_bench",
                "a published evaluation suite's pin of the repository (its 191-question test split)",
            ),
            aliases=(BenchmarkFiles("data/VStar/vstar_bench.jsonl", "data/VStar/images"),),
        ),
        Benchmark(
            "hr_bench_4k",
            "data/HR-Bench/hrbench_4k.jsonl",
            "data/HR-Bench/images_4k",
            "HR-Bench 4K: MCQs on 4K images (single / cross instance)",
            HubSource(
                "DreamMr/HR-Bench",
                None,
                HubKind.TABLE,
                "HR-Bench",
                "not confirmed: main's commit is recorded at the first download",
                table=("hr_bench_4k.parquet", "hr_bench_4k.tsv"),
                key="index",
            ),
            aliases=(BenchmarkFiles("data/HR-Bench/hrbench_4k.jsonl", "data/HR-Bench/images"),),
        ),
        Benchmark(
            "treebench",
            "data/TreeBench/treebench.jsonl",
            "data/TreeBench/images",
            "TreeBench: 405 MCQs on perception and reasoning",
            HubSource(
                "HaochenWang/TreeBench",
                "a4eb437ab71d14f6ab1a4cf05213d0f72f831b71",
                HubKind.TABLE,
                "TreeBench",
                "a published evaluation suite's pin of the repository (405 rows, split train)",
                table=("*.parquet", "*.tsv"),
                key="index",
            ),
        ),
        Benchmark(
            "visual_probe_hard",
            "data/VisualProbe_Hard/visual_probe_hard.jsonl",
            "data",
            "VisualProbe (hard split): 106 open-ended questions",
            HubSource(
                "Mini-o3/VisualProbe_Hard",
                "bbe9b7a6c41d49844f45e51916ec0a60d1f0e378",
                HubKind.FILES,
                "VisualProbe_Hard",
                "a published evaluation suite's pin of the repository (val.json and data/*.jpg, 106 rows)",
                strip="VisualProbe_Hard/",
            ),
            aliases=(BenchmarkFiles("data/VisualProbe/visual_probe_hard.jsonl", "data/VisualProbe/images"),),
        ),
        Benchmark(
            "mme_realworld_lite",
            "data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl",
            "data/MME-RealWorld-Lite/imgs",
            "MME-RealWorld Lite: 50 MCQs per task type over real-world scenarios",
            HubSource(
                "yifanzhang114/MME-RealWorld-Lite",
                None,
                HubKind.ARCHIVE,
                "MME-RealWorld-Lite",
                "not confirmed: main's commit is recorded at the first download",
                table=("data.zip", "*.zip"),
            ),
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
