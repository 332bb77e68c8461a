"""Region-localization data (Appendix C.2) as a resumable job: layout boxes -> region descriptions -> rows.

:func:`build_regions` (:func:`~insight_o3.jobs.execute.execute` in a run directory) reads the layouts under
``--output_dir``'s lock, writes the boxes the C.2 rules keep (``boxes.jsonl``, rewritten each run), describes
every box not described yet (``descriptions.jsonl``, one fsync'ed record per box; failures retried by the
next run unless ``retry_failed=False``) and writes the final rows (``regions.jsonl``, successes only, in
``boxes.jsonl`` order). The command line is :mod:`insight_o3.scripts.build_region_localization`.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import dataclass
from typing import Any

from openai import AsyncOpenAI
from tqdm import tqdm

from ..base.json_types import JSONObject
from ..endpoints.endpoint import Endpoint
from ..imaging.images import ImageError, ImageStore
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS, Emit, ItemWork, JobResult, execute, left
from ..jobs.integrity import Invocation
from ..jobs.run_directory import open_run
from ..storage.atomic import write_jsonl_atomic
from .describe import BoxTask, DescribeConfig, describe_box
from .layout import LayoutError, LayoutRules, iter_layout_files, parse_layout, process_layout
from .schema import RegionRow

log = logging.getLogger(__name__)
BOXES_FILE, DESCRIPTIONS_FILE, REGIONS_FILE = "boxes.jsonl", "descriptions.jsonl", "regions.jsonl"
CARD_FILE = "descriptions_card.json"
COMMAND = "build_region_localization"


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


def write_boxes(path: str, tasks: list[BoxTask]) -> None:
    rows = [
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
    ]
    write_jsonl_atomic(path, rows)


@dataclass(frozen=True, kw_only=True)
class LayoutInput:
    """Where the layouts are and how their boxes are kept (C.2 rules); ``limit``: only the first N boxes."""

    layouts: str
    image_dir: str | None
    rules: LayoutRules
    source: str = "infographicvqa"
    limit: int | None = None


class DescribeWork(ItemWork[BoxTask]):
    """One layout box described by the model (a failed one runs again unless ``retry_failed`` is off)."""

    def __init__(self, api: AsyncOpenAI, cfg: DescribeConfig):
        self.api, self.cfg = api, cfg

    def key(self, t: BoxTask) -> str:
        return t.sample_key

    def is_final(self, record: dict) -> bool:
        return record.get("status") == "ok" or not self.cfg.retry_failed

    async def work(self, t: BoxTask, emit: Emit) -> JSONObject:
        return await describe_box(self.api, t, self.cfg)


def _write_regions(path: str, tasks: list[BoxTask], records: dict[str, Any]) -> int:
    """``regions.jsonl``: a row per box described, in ``tasks`` order; returns how many."""
    rows = [
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
        for t in tasks
        if (rec := records.get(t.sample_key)) and rec.get("status") == "ok"
    ]
    write_jsonl_atomic(path, rows)
    return len(rows)


async def _abuild(
    out_dir: str,
    inputs: LayoutInput,
    cfg: DescribeConfig,
    endpoint: Endpoint,
    controls: RunControls,
    invocation: Invocation | None,
) -> JobResult[JSONObject]:
    store = CardFile.under(out_dir, CARD_FILE, [DESCRIPTIONS_FILE])
    with open_run(out_dir, COMMAND, controls, store=store, invocation=invocation) as run:
        i = inputs  # the boxes of the layouts, read under the lock and written to boxes.jsonl
        tasks = collect_boxes(i.layouts, i.image_dir, i.rules, i.source, progress=controls.progress)
        tasks = tasks[: i.limit] if i.limit is not None else tasks
        write_boxes(run.path(BOXES_FILE), tasks)
        log.info("%d layout boxes kept", len(tasks))
        records = run.open_logs({RECORDS: DESCRIPTIONS_FILE})[RECORDS]
        async with Clients(run.guard) as clients:
            work = DescribeWork(clients.client(endpoint, role="describer", max_connections=controls.concurrency), cfg)
            plan = left(tasks, work, records)
            new = await execute(run, plan, work, clients, desc="descriptions")
        order = [t.sample_key for t in tasks]
        known = set(order)
        records.compact(order + [k for k in records.records if k not in known])  # boxes of other runs' --limit stay
        rows = _write_regions(run.path(REGIONS_FILE), tasks, records.records)
    skipped = plan.total - len(plan.units)
    summary = {"ok": new.get("ok", 0), "failed": new.get("failed", 0), "skipped": skipped, "rows": rows}
    summary["failed_total"] = len(tasks) - rows
    return JobResult(summary, summary["failed_total"])


def build_regions(
    out_dir: str,
    inputs: LayoutInput,
    cfg: DescribeConfig,
    endpoint: Endpoint,
    controls: RunControls,
    invocation: Invocation | None = None,
) -> JobResult[JSONObject]:
    """Describe every box of ``inputs`` not described yet under ``out_dir``'s lock and write the rows; the summary
    counts this run's ``ok``/``failed`` descriptions, the boxes ``skipped`` (final already), the ``rows`` written
    and ``failed_total`` (boxes without a description yet: exit status 1)."""
    return asyncio.run(_abuild(out_dir, inputs, cfg, endpoint, controls, invocation))
