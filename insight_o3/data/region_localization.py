"""Region-localization data (Appendix C.2) as a resumable job: layout boxes -> region descriptions -> rows.

:class:`RegionLocalizationJob` (a :class:`~insight_o3.jobs.job.ResumableJob`) reads the layouts under
``--output_dir``'s lock, writes the boxes the C.2 rules keep (``boxes.jsonl``, rewritten each run), describes
every box not described yet (``descriptions.jsonl``, one fsync'ed record per box; failures retried by the
next run unless ``retry_failed=False``) and writes the final rows (``regions.jsonl``, successes only, in
``boxes.jsonl`` order). The command line is :mod:`insight_o3.scripts.build_region_localization`.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from tqdm import tqdm

from ..base.json_types import JSONObject
from ..endpoints.endpoint import Endpoint
from ..imaging.images import ImageError, ImageStore
from ..jobs.controls import RunControls
from ..jobs.integrity import Invocation
from ..jobs.job import Emit, Plan, ResumableJob
from ..storage.atomic import write_jsonl_atomic
from .describe import BoxTask, DescribeConfig, describe_box
from .layout import LayoutError, LayoutRules, iter_layout_files, parse_layout, process_layout
from .schema import RegionRow

log = logging.getLogger(__name__)
BOXES_FILE, DESCRIPTIONS_FILE, REGIONS_FILE = "boxes.jsonl", "descriptions.jsonl", "regions.jsonl"


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


class RegionLocalizationJob(ResumableJob[BoxTask, dict]):
    command = "build_region_localization"
    desc = "descriptions"
    records_file = DESCRIPTIONS_FILE

    def __init__(
        self,
        out_dir: str,
        inputs: LayoutInput,
        cfg: DescribeConfig,
        endpoint: Endpoint,
        controls: RunControls,
        invocation: Invocation | None = None,
    ):
        super().__init__(out_dir, controls, invocation=invocation)
        self.inputs, self.cfg, self.endpoint = inputs, cfg, endpoint
        self.tasks: list[BoxTask] = []
        self.skipped = 0

    def collect(self, items: list[BoxTask]) -> list[BoxTask]:
        """The boxes of the layouts (read under the lock), written to ``boxes.jsonl``."""
        i = self.inputs
        tasks = collect_boxes(i.layouts, i.image_dir, i.rules, i.source, progress=self.controls.progress)
        self.tasks = tasks[: i.limit] if i.limit is not None else tasks
        write_boxes(self.path(BOXES_FILE), self.tasks)
        log.info("%d layout boxes kept", len(self.tasks))
        return self.tasks

    def key(self, t: BoxTask) -> str:
        return t.sample_key

    def is_final(self, record: dict) -> bool:
        return record.get("status") == "ok" or not self.cfg.retry_failed

    def plan(self, items: list[BoxTask]) -> Plan:
        plan = super().plan(items)
        self.skipped = plan.total - len(plan.units)
        return plan

    async def setup(self) -> None:
        self.api = self.client(self.endpoint, role="describer", max_connections=self.controls.concurrency)

    async def work(self, t: BoxTask, emit: Emit) -> JSONObject:
        return await describe_box(self.api, t, self.cfg)

    def finish(self) -> JSONObject:
        order = [t.sample_key for t in self.tasks]
        known = set(order)
        self.compact(order + [k for k in self.records if k not in known])  # boxes of other runs' --limit stay
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
            for t in self.tasks
            if (rec := self.records.get(t.sample_key)) and rec.get("status") == "ok"
        ]
        write_jsonl_atomic(self.path(REGIONS_FILE), rows)
        new = self.progress.new if self.progress is not None else {}
        counts = {"ok": new.get("ok", 0), "failed": new.get("failed", 0), "skipped": self.skipped}
        return {**counts, "rows": len(rows), "failed_total": len(self.tasks) - len(rows)}

    def incomplete(self, summary: dict) -> int:
        return summary["failed_total"]
