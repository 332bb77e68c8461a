"""Region-localization data (Appendix C.2): layout filtering/merging, then region descriptions.

    python -m insight_o3.scripts.build_region_localization --layouts layouts/ --image_dir infographicvqa/ \\
        --out_dir out/region_localization --model gpt-5-nano --concurrency 32

Writes, under ``--out_dir``:

* ``boxes.jsonl``: the layout boxes kept by the C.2 rules (rewritten atomically each run; cheap);
* ``descriptions.jsonl``: one record per box as it finishes (``status`` ok/failed; the resume log);
* ``regions.jsonl``: the final rows (:class:`insight_o3.data.schema.RegionRow`, successes only),
  written atomically at the end, in ``boxes.jsonl`` order.

``--layouts`` is a directory of PaddleOCR ``*.json`` results, one ``.json`` or a ``.jsonl`` with one
result per line (see :mod:`insight_o3.data.layout`). API key and base URL: ``--api_key`` /
``--base_url`` or ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``.

The run holds ``--out_dir``'s lock (a second run exits with status 5); a 401/403/404 from the endpoint
or more than ``--max_failure_ratio`` failed requests stop it (status 4), an unwritable output stops it
(status 3); each prints one line and keeps every finished description.
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

from ..storage.atomic import write_jsonl_atomic
from ..api import ENV_KEYS, Redactor, make_client, quiet_http_logs, resolve
from ..data.describe import BoxTask, DescribeConfig, describe_all
from ..data.layout import LayoutError, LayoutRules, iter_layout_files, parse_layout, process_layout
from ..data.schema import RegionRow
from ..storage.record_log import RecordLog
from ..images import ImageError, ImageStore
from ..run_guard import DEFAULT_MAX_FAILURE_RATIO, STOP_ERRORS, RunGuard, report_stop
from ..run_lock import run_lock

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


def collect_boxes(layouts: str, image_dir: str | None, rules: LayoutRules, source: str,
                  progress: bool = True) -> list[BoxTask]:
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
            tasks.append(BoxTask(f"{stem}#{k}", path, size[0], size[1], tuple(round(v, 2) for v in b.box), b.label,
                                 tuple(b.members), source))
    store.close()
    return tasks


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_http_logs()
    ap = argparse.ArgumentParser(prog="python -m insight_o3.scripts.build_region_localization",
                                 description="C.2 region-localization data: layout rules + region descriptions.")
    ap.add_argument("--layouts", required=True, help="dir of PaddleOCR layout *.json, a .json or a .jsonl")
    ap.add_argument("--image_dir", default=None, help="where the images named by input_path are")
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--source", default="infographicvqa")
    ap.add_argument("--model", default="gpt-5-nano")
    ap.add_argument("--api_key", default=None)
    ap.add_argument("--base_url", default=None)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max_retries", type=int, default=5, help="openai SDK retries per request")
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--max_pixels", type=int, default=1280 * 1280, help="image sent downscaled under this (0: as is)")
    ap.add_argument("--max_tokens", type=int, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--no_retry_failed", action="store_true", help="keep failures of earlier runs as they are")
    ap.add_argument("--max_failure_ratio", type=float, default=DEFAULT_MAX_FAILURE_RATIO,
                    help="stop when more than this share of the requests failed (judged from the 20th on)")
    ap.add_argument("--limit", type=int, default=None, help="only the first N boxes")
    ap.add_argument("--layout_only", action="store_true", help="write boxes.jsonl and stop")
    ap.add_argument("--no_progress", action="store_true")
    g = ap.add_argument_group("C.2 layout rules")
    for f in dataclasses.fields(LayoutRules):
        g.add_argument(f"--{f.name}", type=float, default=f.default, help=f"default: {f.default}")
    a = ap.parse_args(argv)
    if not 0 < a.max_failure_ratio <= 1:
        ap.error("--max_failure_ratio must be in (0, 1]")
    redact = Redactor(resolve(a.api_key, ENV_KEYS["main"][0]))
    try:
        with run_lock(a.out_dir, "build_region_localization"):
            return _main_locked(a)
    except STOP_ERRORS as e:
        return report_stop(e, redact, os.path.join(a.out_dir, "descriptions.jsonl"))


def _main_locked(a: argparse.Namespace) -> int:
    rules = LayoutRules(**{f.name: getattr(a, f.name) for f in dataclasses.fields(LayoutRules)})
    try:
        tasks = collect_boxes(a.layouts, a.image_dir, rules, a.source, progress=not a.no_progress)
    except LayoutError as e:
        raise SystemExit(f"error: {e}")
    if a.limit is not None:
        tasks = tasks[:a.limit]
    write_jsonl_atomic(os.path.join(a.out_dir, "boxes.jsonl"),
                        [{"sample_key": t.sample_key, "image": t.image, "width": t.width, "height": t.height,
                          "bbox": list(t.bbox), "label": t.label, "merged_from": list(t.merged_from)} for t in tasks])
    log.info("%d layout boxes kept", len(tasks))
    if a.layout_only:
        return 0
    main_keys, main_urls = ENV_KEYS["main"]
    key, base = resolve(a.api_key, main_keys), resolve(a.base_url, main_urls)
    redact = Redactor(key)
    rec_log = RecordLog.open(os.path.join(a.out_dir, "descriptions.jsonl"))
    cfg = DescribeConfig(model=a.model, concurrency=a.concurrency, max_pixels=a.max_pixels or None,
                         max_tokens=a.max_tokens, temperature=a.temperature, retry_failed=not a.no_retry_failed)

    async def run():
        guard = RunGuard(a.max_failure_ratio, redact=redact)
        client = make_client(key, base, timeout=a.timeout, max_retries=a.max_retries, max_connections=a.concurrency,
                             role="describer", guard=guard)
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
            rows.append(RegionRow(sample_key=t.sample_key, image=t.image, width=t.width, height=t.height,
                                  description=rec["description"], bbox=list(t.bbox), label=t.label, source=t.source,
                                  merged_from=list(t.merged_from)).to_dict())
    write_jsonl_atomic(os.path.join(a.out_dir, "regions.jsonl"), rows)
    failed = len(tasks) - len(rows)
    print(json.dumps({**counts, "rows": len(rows), "failed_total": failed}))
    if failed:
        log.warning("%d boxes have no description yet (see descriptions.jsonl); rerun to retry them", failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
