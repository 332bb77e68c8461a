"""Generate a demo O3-Bench-like benchmark (charts + maps, six-option MCQs known by construction).

    python -m insight_o3.scripts.make_demo_bench --output_dir data/demo_bench --num_images 20

Writes ``OUT/images/{chart,map}/*.png`` and ``OUT/metadata.jsonl`` (O3-Bench layout; use
``--ann_file OUT/metadata.jsonl --img_dir OUT`` with the evaluate CLI). Images already present
with the right size are kept, so an interrupted run resumes; the metadata file is written
atomically at the end and is identical for the same arguments. Exit status: 0 done, 2 bad arguments
(:class:`insight_o3.scripts._shared.ExitCode`).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from insight_o3.scripts._shared import ExitCode, add_output_dir, entry_point, new_parser, run_main, setup_logging

log = logging.getLogger("make_demo_bench")


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size must look like 4600x3967, got {text!r}") from None
    if w < 64 or h < 64:
        raise argparse.ArgumentTypeError("--size sides must be at least 64 px")
    return w, h


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser("python -m insight_o3.scripts.make_demo_bench", __doc__)
    add_output_dir(
        ap, dest="out", required=True, help="output directory (images/ and metadata.jsonl)", aliases=("--out",)
    )
    ap.add_argument("--num_images", type=int, default=20)
    ap.add_argument("--questions_per_image", type=int, default=2)
    ap.add_argument(
        "--num_questions",
        type=int,
        default=None,
        help="total questions, spread over the images (overrides --questions_per_image)",
    )
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--min_side", type=int, default=3000, help="smallest image side in px")
    ap.add_argument("--max_side", type=int, default=None, help="largest image side (default 1.6 × min_side)")
    ap.add_argument("--size", type=parse_size, default=None, help="fixed WxH for every image, e.g. 4600x3967")
    ap.add_argument("--chart_fraction", type=float, default=0.5, help="share of chart images (rest are maps)")
    ap.add_argument("--f_rate", type=float, default=0.1, help="share of questions whose answer is F")
    ap.add_argument("--workers", type=int, default=1, help="processes used to draw images")
    ap.add_argument("--png_compress_level", type=int, default=3, choices=range(10))
    return ap


def _draw(job: tuple[dict, str, int]) -> bool:
    """Worker: rebuild the (deterministic) item in the child and draw it."""
    from insight_o3.demo.bench import build_item, write_image

    item_kwargs, out, level = job
    return write_image(build_item(**item_kwargs), Path(out), compress_level=level)


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.num_images < 1:
        ap.error("--num_images must be >= 1")
    if a.size is None and a.min_side < 64:
        ap.error("--min_side must be >= 64")
    if not 0.0 <= a.chart_fraction <= 1.0 or not 0.0 <= a.f_rate <= 1.0:
        ap.error("--chart_fraction and --f_rate must be within [0, 1]")
    if a.workers < 1:
        ap.error("--workers must be >= 1")
    max_side = a.max_side or int(a.min_side * 1.6)
    if max_side < a.min_side:
        ap.error("--max_side must be >= --min_side")
    from insight_o3.demo.bench import plan  # Pillow and numpy: loaded after parsing, so --help is quick

    try:
        layout = plan(
            a.num_images,
            seed=a.seed,
            chart_fraction=a.chart_fraction,
            questions_per_image=a.questions_per_image,
            num_questions=a.num_questions,
        )
    except ValueError as e:
        ap.error(str(e))
    return run_main(lambda: _make(a, layout, max_side))


def _make(a: argparse.Namespace, layout: list[tuple[int, str, int]], max_side: int) -> int:
    from insight_o3.demo.bench import build_item, write_image, write_metadata
    from insight_o3.storage.atomic import make_output_dir

    out = Path(a.out)
    make_output_dir(out)
    kws = [
        dict(
            seed=a.seed,
            index=i,
            subset=s,
            n_questions=k,
            size=a.size,
            min_side=a.min_side,
            max_side=max_side,
            f_rate=a.f_rate,
        )
        for i, s, k in layout
    ]
    t0 = time.perf_counter()
    items = [build_item(**kw) for kw in kws]
    drawn = 0
    if a.workers > 1:
        with ProcessPoolExecutor(a.workers) as pool:
            jobs = [(kw, str(out), a.png_compress_level) for kw in kws]
            drawn = sum(pool.map(_draw, jobs, chunksize=1))
    else:
        for item in items:
            drawn += write_image(item, out, compress_level=a.png_compress_level)
    meta = write_metadata(items, out)
    dt = time.perf_counter() - t0
    n_q = sum(len(it.questions) for it in items)
    print(
        f"{len(items)} images ({drawn} drawn, {len(items) - drawn} already present), {n_q} questions "
        f"-> {meta} in {dt:.1f}s ({dt / max(drawn, 1):.2f}s per drawn image)"
    )
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
