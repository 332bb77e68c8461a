"""Region-localization data (Appendix C.2): layout filtering/merging, then region descriptions.

    python -m insight_o3.scripts.build_region_localization --layouts layouts/ --image_dir infographicvqa/ \\
        --output_dir out/region_localization --model gpt-5-nano --concurrency 32

Writes, under ``--output_dir``:

* ``boxes.jsonl``: the layout boxes kept by the C.2 rules (rewritten atomically each run; cheap);
* ``descriptions.jsonl``: one record per box as it finishes (``status`` ok/failed; the resume log);
* ``regions.jsonl``: the final rows (:class:`insight_o3.data.schema.RegionRow`, successes only),
  written atomically at the end, in ``boxes.jsonl`` order.

``--layouts`` is a directory of PaddleOCR ``*.json`` results, one ``.json`` or a ``.jsonl`` with one
result per line (see :mod:`insight_o3.data.layout`). API key and base URL: ``--api_key`` /
``--api_base_url`` or ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.

Exit status (:class:`insight_o3.cli.ExitCode`): 0 done; 1 some boxes have no description yet (lost to
API errors; rerun to retry them); 2 bad input (a layout file, a missing image); 3 an output could not be
written; 4 stopped by the API (a 401/403/404 or more than ``--max_failure_ratio`` failed requests); 5
another run holds ``--output_dir``. Each stop prints one line and keeps every finished description.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import logging
import os
import sys

from tqdm import tqdm

from ..api import ENV_KEYS, make_client, resolve
from ..cli import (
    ExitCode,
    add_api_flags,
    add_client_flags,
    add_output_dir,
    add_run_flags,
    check_run_flags,
    new_parser,
    run_main,
    setup_logging,
)
from ..data.describe import BoxTask, DescribeConfig, describe_all
from ..data.layout import LayoutError, LayoutRules, iter_layout_files, parse_layout, process_layout
from ..data.schema import RegionRow
from ..images import ImageError, ImageStore
from ..redaction import Redactor
from ..run_guard import RunGuard
from ..run_lock import run_lock
from ..storage.atomic import write_jsonl_atomic
from ..storage.record_log import RecordLog

log = logging.getLogger("build_region_localization")


def resolve_image(image: str, image_dir: str | None, where: str) -> str:
    candidates = [image] if os.path.isabs(image) else []
    if image_dir:
        candidates += [os.path.join(image_dir, image), os.path.join(image_dir, os.path.basename(image))]
    candidates.append(image)
    for c in candidates:
        if os.path.isfile(c):
            return c
    raise LayoutError(f"{where}: image file not found: {image} (looked in {image_dir or '.'})")


def collect_boxes(
    layouts: str, image_dir: str | None, rules: LayoutRules, source: str, progress: bool = True
) -> list[BoxTask]:
    store = ImageStore(originals_cached=0)
    tasks, seen = [], set()
    for where, obj in tqdm(list(iter_layout_files(layouts)), desc="layouts", disable=not progress):
        doc = parse_layout(obj, where)
        path = resolve_image(doc.image, image_dir, where)
        try:
            size = store.size(path)
        except ImageError as e:
            raise LayoutError(f"{where}: {e}") from None
        doc = parse_layout(obj, where, size)
        stem = os.path.splitext(os.path.basename(path))[0]
        if stem in seen:
            raise LayoutError(f"{where}: a second layout result for image {stem}")
        seen.add(stem)
        for k, b in enumerate(process_layout(doc, size, rules)):
            x1, y1, x2, y2 = b.box
            box = (round(x1, 2), round(y1, 2), round(x2, 2), round(y2, 2))
            tasks.append(BoxTask(f"{stem}#{k}", path, size[0], size[1], box, b.label, tuple(b.members), source))
    store.close()
    return tasks


def build_parser() -> argparse.ArgumentParser:
    ap = new_parser(
        "python -m insight_o3.scripts.build_region_localization",
        "C.2 region-localization data: layout rules + region descriptions.",
    )
    ap.add_argument("--layouts", required=True, help="dir of PaddleOCR layout *.json, a .json or a .jsonl")
    ap.add_argument("--image_dir", default=None, help="where the images named by input_path are")
    add_output_dir(ap, dest="out_dir", required=True, help="boxes.jsonl, descriptions.jsonl, regions.jsonl go here")
    ap.add_argument("--source", default="infographicvqa")
    ap.add_argument("--model", default="gpt-5-nano")
    add_api_flags(ap, env="main", aliases=True)
    add_client_flags(ap, max_retries=5, client_timeout=300.0, aliases=True)
    ap.add_argument("--max_pixels", type=int, default=1280 * 1280, help="image sent downscaled under this (0: as is)")
    ap.add_argument("--max_tokens", type=int, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--no_retry_failed", action="store_true", help="keep failures of earlier runs as they are")
    ap.add_argument("--limit", type=int, default=None, help="only the first N boxes")
    ap.add_argument("--layout_only", action="store_true", help="write boxes.jsonl and stop")
    add_run_flags(ap, concurrency=16, image_workers=False)
    g = ap.add_argument_group("C.2 layout rules")
    for f in dataclasses.fields(LayoutRules):
        g.add_argument(f"--{f.name}", type=float, default=f.default, help=f"default: {f.default}")
    return ap


def main(argv: list[str] | None = None) -> int:
    setup_logging()
    ap = build_parser()
    a = ap.parse_args(argv)
    check_run_flags(ap, a)
    redact = Redactor(resolve(a.api_key, ENV_KEYS["main"][0]))

    def body() -> int:
        with run_lock(a.out_dir, "build_region_localization"):
            return _main_locked(a)

    return run_main(
        body, bad_input=(LayoutError,), redact=redact, results=os.path.join(a.out_dir, "descriptions.jsonl")
    )


def _main_locked(a: argparse.Namespace) -> int:
    rules = LayoutRules(**{f.name: getattr(a, f.name) for f in dataclasses.fields(LayoutRules)})
    tasks = collect_boxes(a.layouts, a.image_dir, rules, a.source, progress=not a.no_progress)
    if a.limit is not None:
        tasks = tasks[: a.limit]
    write_jsonl_atomic(
        os.path.join(a.out_dir, "boxes.jsonl"),
        [
            {
                "sample_key": t.sample_key,
                "image": t.image,
                "width": t.width,
                "height": t.height,
                "bbox": list(t.bbox),
                "label": t.label,
                "merged_from": list(t.merged_from),
            }
            for t in tasks
        ],
    )
    log.info("%d layout boxes kept", len(tasks))
    if a.layout_only:
        return ExitCode.OK
    main_keys, main_urls = ENV_KEYS["main"]
    key, base = resolve(a.api_key, main_keys), resolve(a.api_base_url, main_urls)
    redact = Redactor(key)
    rec_log = RecordLog.open(os.path.join(a.out_dir, "descriptions.jsonl"))
    cfg = DescribeConfig(
        model=a.model,
        concurrency=a.concurrency,
        max_pixels=a.max_pixels or None,
        max_tokens=a.max_tokens,
        temperature=a.temperature,
        retry_failed=not a.no_retry_failed,
    )

    async def run():
        guard = RunGuard(a.max_failure_ratio, redact=redact)
        client = make_client(
            key,
            base,
            timeout=a.client_timeout,
            max_retries=a.max_retries,
            max_connections=a.concurrency,
            role="describer",
            guard=guard,
        )
        try:
            return await describe_all(tasks, client, cfg, rec_log, redact, progress=not a.no_progress, guard=guard)
        finally:
            await client.close()

    try:
        counts = asyncio.run(run())
        order = [t.sample_key for t in tasks]
        rec_log.compact(order + [k for k in rec_log.records if k not in set(order)])
    finally:
        rec_log.close()
    rows = []
    for t in tasks:
        rec = rec_log.records.get(t.sample_key)
        if rec and rec.get("status") == "ok":
            rows.append(
                RegionRow(
                    sample_key=t.sample_key,
                    image=t.image,
                    width=t.width,
                    height=t.height,
                    description=rec["description"],
                    bbox=list(t.bbox),
                    label=t.label,
                    source=t.source,
                    merged_from=list(t.merged_from),
                ).to_dict()
            )
    write_jsonl_atomic(os.path.join(a.out_dir, "regions.jsonl"), rows)
    failed = len(tasks) - len(rows)
    print(json.dumps({**counts, "rows": len(rows), "failed_total": failed}))
    if failed:
        log.warning("%d boxes have no description yet (see descriptions.jsonl); rerun to retry them", failed)
        return ExitCode.INCOMPLETE
    return ExitCode.OK


if __name__ == "__main__":
    sys.exit(main())
