"""Collage synthesis (Appendix C.1, Algorithm 1) and its tools.

Generate (resumable; same ``--seed`` gives byte-identical rows and images for any ``--num_workers``)::

    python -m insight_o3.scripts.generate_collages --source_pool pool.jsonl --output_dir out \\
        --num_collages 20000 --seed 0 --num_workers 8

Build a source pool from public annotations (C.1 bbox filter ``< 0.04`` applied)::

    python -m insight_o3.scripts.generate_collages pool --format viscot --input a.jsonl [b.jsonl ...] \\
        --image_root VisCoT/ --out pool.jsonl

Difficulty filter (pass@k with a vReasoner through an OpenAI-compatible API; any success removes)::

    python -m insight_o3.scripts.generate_collages filter --output_dir out --model gpt-5-mini --attempts 3

(``filter`` is also the command ``python -m insight_o3.scripts.filter_difficulty``.) Determinism and
resume: see :mod:`insight_o3.data.collage_jobs` (the engine; this module only parses flags).

Generate and filter hold ``--output_dir``'s lock for the whole run: a second run on the same directory
(either command) exits at once with status 5; an unwritable output ends the run with status 3; bad
input (pool, flags, a directory generated with other settings) exits with 2; ``filter`` exits with 1
while some collages are lost to API errors. Each prints one line; finished collages are kept and a
rerun resumes. Exit codes: :class:`insight_o3.scripts._shared.ExitCode`.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
from typing import Any

from ..base.setting_kinds import Kind, field_kinds
from ..data.collage_config import DEFAULT_QUESTION_TEMPLATE, CollageConfig
from ._shared import ExitCode, add_output_dir, add_run_flags, entry_point, new_parser, run_main, setting, setup_logging

log = logging.getLogger("generate_collages")
__all__ = ["main", "add_config_flags", "config_from_args", "DEFAULT_QUESTION_TEMPLATE"]


# ----------------------------------------------------------------------------- config flags
def add_config_flags(ap: argparse.ArgumentParser) -> None:
    """One flag per :class:`CollageConfig` field, of the kind the field declares; ranges take two numbers."""
    g = ap.add_argument_group("Algorithm 1 parameters (defaults in insight_o3/data/collage_config.py)")
    kinds = field_kinds(CollageConfig)
    for f in dataclasses.fields(CollageConfig):
        default = f.default
        if isinstance(default, tuple):
            setting(
                g,
                f"--{f.name}",
                kind=kinds[f.name],
                type=float,
                nargs=2,
                default=list(default),
                metavar=("MIN", "MAX"),
                help=f"default: {default[0]:g} {default[1]:g}",
            )
        else:
            setting(
                g, f"--{f.name}", type=type(default), default=default, help=f"default: {default}", kind=kinds[f.name]
            )


def config_from_args(a: argparse.Namespace) -> CollageConfig:
    kw: dict[str, Any] = {}
    for f in dataclasses.fields(CollageConfig):
        v = getattr(a, f.name)
        kw[f.name] = tuple(v) if isinstance(f.default, tuple) else v
    cfg = CollageConfig(**kw)
    cfg.validate()
    return cfg


# ----------------------------------------------------------------------------- CLI
SUBCOMMANDS_HELP = """\
Subcommands (each with its own --help):
  pool    build the source pool from Visual CoT / V* annotations:
          python -m insight_o3.scripts.generate_collages pool --format viscot|vstar --input FILE ... \\
              --image_root DIR --out pool.jsonl
  filter  the difficulty filter (pass@k with a vReasoner; the same as insight-o3-filter-difficulty):
          python -m insight_o3.scripts.generate_collages filter --output_dir OUT --model M --attempts 3"""

#: The input formats ``pool`` reads (the module docstring of insight_o3.data.source_pool has the pool table itself).
POOL_FORMATS_HELP = """\
Input formats (--format):
  viscot  Visual CoT metadata JSONL (metadata/<subset>_cot_train.jsonl), one QA per line: question, answer,
          image (relative to --image_root), bboxs (list of [x1, y1, x2, y2]; several are enclosed in one),
          width, height, dataset, question_id.
  vstar   V*-style JSON array or JSONL: image, question, bbox ([x, y, w, h] or a list of them, enclosed in
          one), options (the first is the correct one; shuffled per item, answer = its letter) or answer,
          optional width/height (else read from the image), optional question_id (else id, else the image's
          file stem; several questions on one image get #2, #3 ...).
Output: a pool JSONL (id, image (absolute), width, height, bbox, question, answer, options, source) with the
C.1 filter area(bbox)/area(image) < --max_bbox_ratio applied; the input of generate_collages --source_pool."""


def build_parser(command: str = "generate") -> argparse.ArgumentParser:
    """The parser of ``generate`` (the default), ``pool`` or ``filter``."""
    if command == "pool":
        return _pool_parser()
    if command == "filter":
        from .filter_difficulty import build_parser as filter_parser

        return filter_parser("python -m insight_o3.scripts.generate_collages filter")
    ap = new_parser(
        "python -m insight_o3.scripts.generate_collages",
        "Target-and-fill collage synthesis (Algorithm 1 of the paper).",
        epilog=SUBCOMMANDS_HELP,
    )
    setting(
        ap,
        "--source_pool",
        required=True,
        help="pool table (.jsonl or .parquet), see insight_o3/data/source_pool.py",
        kind=Kind.OPERATIONAL,
    )
    setting(
        ap,
        "--image_root",
        default=None,
        help="root of relative image paths (default: the pool's directory)",
        kind=Kind.OPERATIONAL,
    )
    add_output_dir(ap, dest="out_dir", required=True, help="collages.jsonl, images/, failures.jsonl go here")
    setting(ap, "--num_collages", type=int, required=True, kind=Kind.OPERATIONAL)
    setting(ap, "--seed", type=int, default=0, kind=Kind.RESULT)
    setting(
        ap,
        "--num_workers",
        type=int,
        default=1,
        help="worker processes (output does not depend on it)",
        kind=Kind.OPERATIONAL,
    )
    # result: the generator's random stream is per chunk
    setting(
        ap,
        "--chunk_size",
        type=int,
        default=16,
        help="collages per generator chunk (part of the seed)",
        kind=Kind.RESULT,
    )
    setting(
        ap,
        "--target_retries",
        type=int,
        default=3,
        help="other targets tried when a target is infeasible after T attempts",
        kind=Kind.RESULT,
    )
    setting(
        ap,
        "--max_bbox_ratio",
        type=float,
        default=0.04,
        help="C.1 pool filter area(bbox)/area(image) < this (default 0.04)",
        kind=Kind.RESULT,
    )
    setting(ap, "--question_template", default=DEFAULT_QUESTION_TEMPLATE, kind=Kind.RESULT)
    setting(ap, "--image_format", choices=("jpg", "png"), default="jpg", kind=Kind.RESULT)
    setting(ap, "--jpeg_quality", type=int, default=95, kind=Kind.RESULT)
    setting(
        ap, "--skip_image_check", action="store_true", help="do not open every pool image header", kind=Kind.OPERATIONAL
    )
    add_run_flags(ap, concurrency=None, failure_ratio=False, image_workers=False)  # --no_progress
    add_config_flags(ap)
    return ap


def _generate_main(argv: list[str]) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    from ..data.collage_jobs import ROWS_FILE, CollageSpec, generate  # numpy, Pillow: after --help
    from ..data.source_pool import PoolError, filter_small_targets, load_pool

    try:
        cfg = config_from_args(a)
    except ValueError as e:
        ap.error(str(e))
    if "{tile_id}" not in a.question_template or "{question}" not in a.question_template:
        ap.error("--question_template must contain {tile_id} and {question}")
    if a.num_collages < 1 or a.chunk_size < 1 or a.num_workers < 1 or a.target_retries < 0:
        ap.error("--num_collages, --chunk_size and --num_workers must be >= 1, --target_retries >= 0")

    def body() -> int:
        items = load_pool(a.source_pool, a.image_root, check_images=not a.skip_image_check)
        kept = filter_small_targets(items, a.max_bbox_ratio)
        log.info("source pool: %d items, %d with bbox ratio < %g", len(items), len(kept), a.max_bbox_ratio)
        if not kept:
            raise PoolError(f"{a.source_pool}: no item has a bbox ratio below {a.max_bbox_ratio}")
        job = CollageSpec(
            out_dir=a.out_dir,
            seed=a.seed,
            num_collages=a.num_collages,
            chunk_size=a.chunk_size,
            target_retries=a.target_retries,
            question_template=a.question_template,
            image_format=a.image_format,
            jpeg_quality=a.jpeg_quality,
            cfg=cfg,
        )
        stats = generate(job, kept, num_workers=a.num_workers, progress=not a.no_progress)
        print(json.dumps(stats))
        if stats["collages"] == 0 and stats["failures"] > 0:
            raise PoolError(_no_collage_hint(a, len(kept)))
        # some infeasible targets (failures.jsonl) are an outcome of Algorithm 1, not errors
        return ExitCode.OK

    return run_main(body, bad_input=(PoolError,), results=os.path.join(a.out_dir, ROWS_FILE))


def _no_collage_hint(a: argparse.Namespace, pool_size: int) -> str:
    """Why every target was infeasible, from failures.jsonl, and what to change."""
    from ..data.collage_jobs import FAILURES_FILE
    from ..storage.jsonl import iter_jsonl

    reasons: dict[str, int] = {}
    for _, _, row in iter_jsonl(os.path.join(a.out_dir, FAILURES_FILE)):
        for per_target in (row.get("reasons") or {}).values():  # {target id: {reason: attempts}}
            for why, n in per_target.items():
                reasons[why] = reasons.get(why, 0) + int(n)
    top = ", ".join(f"{why} x{n}" for why, n in sorted(reasons.items(), key=lambda kv: -kv[1])[:4])
    return (
        f"no collage could be built from {pool_size} pool item(s): every target was infeasible "
        f"({os.path.join(a.out_dir, FAILURES_FILE)}; rejections: {top or 'none recorded'}). Algorithm 1 fills a "
        f"canvas of {a.canvas_area[0]:g}-{a.canvas_area[1]:g} px with other pool items around the target: use a "
        "larger pool (hundreds of items or more; the paper's has tens of thousands), or a smaller canvas "
        "(--canvas_area MIN MAX) / a larger --bbox_cap"
    )


def _pool_parser() -> argparse.ArgumentParser:
    ap = new_parser(
        "python -m insight_o3.scripts.generate_collages pool",
        "Build a source pool from Visual CoT / V* annotations.",
        epilog=POOL_FORMATS_HELP,
    )
    ap.add_argument("--format", choices=("viscot", "vstar"), required=True)
    ap.add_argument("--input", nargs="+", required=True)
    setting(ap, "--image_root", required=True, kind=Kind.OPERATIONAL)
    ap.add_argument("--out", required=True)
    setting(ap, "--max_bbox_ratio", type=float, default=0.04, kind=Kind.RESULT)
    return ap


def _pool_main(argv: list[str]) -> int:
    from ..data.source_pool import PoolError, UniqueIds, convert_viscot, convert_vstar, filter_small_targets, write_pool

    a = _pool_parser().parse_args(argv)
    conv = convert_viscot if a.format == "viscot" else convert_vstar

    def body() -> int:
        ids = UniqueIds()  # one id space for all input files
        items = [it for path in a.input for it in conv(path, os.path.abspath(a.image_root), ids)]  # absolute paths
        kept = filter_small_targets(items, a.max_bbox_ratio)
        write_pool(kept, a.out)
        print(json.dumps({"read": len(items), "kept": len(kept), "out": a.out}))
        return ExitCode.OK

    return run_main(body, bad_input=(PoolError,))


@entry_point
def main(argv: list[str] | None = None) -> int:
    setup_logging()
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "pool":
        return _pool_main(argv[1:])
    if argv and argv[0] == "filter":
        from .filter_difficulty import main as filter_main

        return filter_main(argv[1:], prog="python -m insight_o3.scripts.generate_collages filter")
    return _generate_main(argv)


if __name__ == "__main__":
    sys.exit(main())
