"""Index a folder of pages and images into the SQLite FTS5 corpus the keyless retrieval reads
(``evaluate --agent opensearch_vl --retrieval local --corpus OUT``; see :mod:`insight_o3.tools.corpus`).

    python -m insight_o3.scripts.index_corpus FOLDER --out corpus.sqlite      (or: insight-o3-index-corpus)

Exit status: 0 done, 2 bad input (no such folder, a bad corpus.jsonl line: file and line named), 3 the index
could not be written.
"""

from __future__ import annotations

import argparse
import sys

from ._shared import ExitCode, entry_point, new_parser


def build_parser() -> argparse.ArgumentParser:
    p = new_parser("python -m insight_o3.scripts.index_corpus", __doc__)
    p.add_argument(
        "folder", help="pages (*.md, *.txt, *.html) and images (*.png, *.jpg, *.webp); optional corpus.jsonl"
    )
    p.add_argument("--out", required=True, help="the index file to write (replaced whole)")
    return p


@entry_point
def main(argv: list[str] | None = None) -> int:
    a = build_parser().parse_args(argv)
    from ..tools.corpus import CorpusError, index_corpus  # Pillow: loaded after parsing, so --help is quick

    try:
        stats = index_corpus(a.folder, a.out)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return ExitCode.BAD_INPUT
    except OSError as e:
        print(f"error: {a.out}: {e}", file=sys.stderr)
        return ExitCode.OUTPUT_ERROR
    for s in stats.skipped:
        print(f"skipped {s}", file=sys.stderr)
    cut = f" ({stats.cut} cut at 8 MiB)" if stats.cut else ""
    print(f"{a.out}: {stats.pages} pages{cut}, {stats.images} images")
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
