"""Get the paper's benchmarks ready under the data root: annotations in place, images (and O3-Bench) fetched from
their Hugging Face dataset repositories, everything checked.

    python -m insight_o3.scripts.download_benchmarks                    # all six
    python -m insight_o3.scripts.download_benchmarks vstar o3_bench     # some (case and dashes do not matter)
    python -m insight_o3.scripts.download_benchmarks --check_only       # no network: place and check only
    python -m insight_o3.scripts.download_benchmarks hr_bench_4k --extract hr_bench_4k=/path/hr_bench_4k.tsv

The annotation files of the five external benchmarks ship in the repository's ``data/`` (the original release's);
each benchmark's images come from its Hub repository at a pinned commit (README ``data/README.md`` names each),
every file checked against its sha256, resumed where a run stopped, with a progress bar; ``HF_HUB_OFFLINE=1``
checks what is there without the network, ``HF_ENDPOINT`` picks another Hub. Then each benchmark is checked with
the evaluation's own loader: one line ``NAME: ready: ...`` or ``NAME: NOT READY: <why>`` each.

Exit status: 0 every benchmark asked for is ready; 1 some is not (the line says why; rerun to resume); 2 bad input.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from ..base.setting_kinds import Kind
from ..evaluation.benchmarks import BENCHMARKS, DATA_ROOT_ENV, canonical_name, data_root
from ._shared import ExitCode, add_run_flags, entry_point, new_parser, setting, setup_logging

PROG = "python -m insight_o3.scripts.download_benchmarks"


def _name(text: str) -> str:
    try:
        return canonical_name(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _pair(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not value:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return _name(name), value


def build_parser() -> argparse.ArgumentParser:
    p = new_parser(PROG, __doc__.split("\n\n")[0])
    setting(
        p,
        "benchmarks",
        nargs="*",
        type=_name,
        metavar="NAME",
        help=f"default: all of {', '.join(BENCHMARKS)}",
        kind=Kind.EXTENT,
    )
    setting(
        p,
        "--data_root",
        default=None,
        help=f"the folder the benchmarks go to (default: ${DATA_ROOT_ENV}, else ./data, what --benchmark reads)",
        kind=Kind.OPERATIONAL,
    )
    setting(
        p,
        "--check_only",
        action="store_true",
        help="no download: place the annotations and check",
        kind=Kind.OPERATIONAL,
    )
    # result: which revision of the files (which benchmarks: an extent; where from: paths)
    setting(
        p,
        "--revision",
        action="append",
        type=_pair,
        default=[],
        metavar="NAME=REV",
        help="fetch this commit (or branch, resolved to its commit) of NAME's repository instead of the pinned one",
        kind=Kind.RESULT,
    )
    setting(
        p,
        "--extract",
        action="append",
        type=_pair,
        default=[],
        metavar="NAME=FILE",
        help="unpack NAME's images from a table (.parquet/.tsv: rows matched on question_id or index, the image in "
        "column 'image') or a .zip you already have (repeatable)",
        kind=Kind.OPERATIONAL,
    )
    # operational: where --benchmark looks (the annotation file's content is what counts)
    setting(
        p,
        "--source_dir",
        default=None,
        help="a folder holding the annotation .jsonl files by their own names (default: the repository's data/)",
        kind=Kind.OPERATIONAL,
    )
    setting(p, "--workers", type=int, default=8, help="files fetched at once (default 8)", kind=Kind.OPERATIONAL)
    add_run_flags(p, concurrency=None, failure_ratio=False, image_workers=False)  # --no_progress
    return p


def _download(name: str, root: Path, a: argparse.Namespace) -> str | None:
    """Fetch ``name``; None when done, else why not (one line)."""
    from ..evaluation.benchmark_download import download
    from ..evaluation.benchmark_files import BenchmarkDataError

    try:
        out = download(name, root, revision=dict(a.revision).get(name), workers=a.workers, progress=not a.no_progress)
    except BenchmarkDataError as e:
        return str(e)
    except Exception as e:  # the Hub's own errors: unreachable, a revision or repository not found, a refused request
        return f"download from {BENCHMARKS[name].hub} failed: {type(e).__name__}: {e}"
    for note in out.notes:
        print(f"note: {note}", file=sys.stderr)
    print(
        f"{name}: {BENCHMARKS[name].hub}@{out.revision[:12]}: {out.fetched} file(s) fetched, {out.kept} already there "
        f"and checked" + (f", {out.unpacked} image(s) unpacked" if out.unpacked else "")
    )
    return None


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging(logging.WARNING)
    p = build_parser()
    a = p.parse_args(argv)
    if a.workers < 1:
        p.error("--workers must be at least 1")
    from ..evaluation.benchmark_files import (  # loaded after parsing, so --help is quick
        BenchmarkDataError,
        check,
        extract_archive_images,
        extract_table_images,
        place_annotation,
    )

    names = list(dict.fromkeys(a.benchmarks or BENCHMARKS))
    root = Path(data_root(a.data_root))
    failures: dict[str, str] = {}
    for name in names:
        print(f"{name}: annotation {place_annotation(name, root, a.source_dir)}")
        if not a.check_only and not any(n == name for n, _ in a.extract):
            why = _download(name, root, a)
            if why:
                failures[name] = why
    for name, table in a.extract:
        path = Path(table)
        try:
            unpack = extract_archive_images if path.suffix == ".zip" else extract_table_images
            print(f"{name}: extracted {unpack(name, path, root)} image(s) from {table}")
        except (BenchmarkDataError, OSError, ValueError) as e:
            failures[name] = f"{table}: {e}"
    ready = True
    for name in names:
        ok, msg = check(name, root)
        if name in failures:
            ok, msg = False, f"{failures[name]} ({msg})" if not ok else failures[name]
        ready &= ok
        hint = f" (the images: {PROG} {name})" if not ok and a.check_only else ""
        print(f"{name}: {'ready' if ok else 'NOT READY'}: {msg}{hint}")
    return ExitCode.OK if ready else ExitCode.INCOMPLETE


if __name__ == "__main__":
    sys.exit(main())
