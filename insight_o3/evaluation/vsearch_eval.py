"""Standalone vSearcher localization evaluation (no vReasoner): annotations, scoring, metrics, the run.

The command line is :mod:`insight_o3.scripts.evaluate_vsearch`. Each annotation line is a JSON object
with the image (``image`` or ``file_name``, relative to the image directory), the region description
(``description``, ``region_description`` or ``target``) and the ground-truth ``bbox`` ``[x1, y1, x2, y2]``
in original-image pixels; an optional ``id`` keys it. :func:`run` writes ``<output_dir>/records.jsonl``
(one line per sample, appended durably as each finishes; a rerun resumes and re-tries samples lost to
API failures) and ``metrics.json``: mean IoU, accuracy at IoU >= 0.5, format-valid rate, mean tool calls
and not-found rate.
"""

from __future__ import annotations

import asyncio
import logging
import os
from dataclasses import asdict, dataclass, field

from ..agents.clients import VSearcher
from ..agents.searcher_session import LocateResult
from ..api import DEFAULT_MAX_RETRIES, make_client
from ..geometry import VSEARCHER_EVAL_MAX_PIXELS, check_box, iou
from ..images import ImageStore
from ..protocol import LIMITS
from ..redaction import Redactor
from ..run_guard import DEFAULT_MAX_FAILURE_RATIO, RunGuard, gather_or_stop
from ..run_lock import run_lock
from ..storage import RecordLog, write_json_atomic
from ..storage.jsonl import iter_jsonl
from .samples import AnnotationError

log = logging.getLogger(__name__)
DESCRIPTION_FIELDS = ("description", "region_description", "target")
IMAGE_FIELDS = ("image", "file_name")


@dataclass(frozen=True)
class RegionSample:
    key: str
    line: int
    image: str
    image_path: str
    description: str
    bbox: tuple[float, float, float, float]


def _field(row: dict, names: tuple[str, ...], where: str) -> str:
    for n in names:
        v = row.get(n)
        if isinstance(v, str) and v.strip():
            return v
    raise AnnotationError(f"{where}: missing or empty field {' / '.join(repr(n) for n in names)}")


def load_regions(ann_file: str, img_dir: str) -> list[RegionSample]:
    """Read and validate the annotation file (clear errors naming file, line and field)."""
    out, keys = [], set()
    for where, lineno, row in iter_jsonl(ann_file, AnnotationError):
        image = _field(row, IMAGE_FIELDS, where)
        desc = _field(row, DESCRIPTION_FIELDS, where)
        bbox = check_box(row.get("bbox"), where, "bbox", error=AnnotationError)
        path = os.path.join(img_dir, image)
        if not os.path.isfile(path):
            raise AnnotationError(
                f"{where}: field {'image' if 'image' in row else 'file_name'!r}: image file not found: {path}"
            )
        key = str(row["id"]) if row.get("id") is not None else f"#{lineno}"
        if key in keys:
            raise AnnotationError(f"{where}: field 'id': duplicate id {key!r}")
        keys.add(key)
        out.append(RegionSample(key, lineno, image, path, desc, bbox))
    if not out:
        raise AnnotationError(f"{ann_file}: no annotations")
    return out


def score(sample: RegionSample, r: LocateResult) -> dict:
    """One JSON record: prediction, IoU (0 when nothing valid was found) and the trajectory."""
    rec = r.to_record()
    return {
        "sample_key": sample.key,
        "line": sample.line,
        "image": sample.image,
        "description": sample.description,
        "gt_bbox": list(sample.bbox),
        "pred_bbox": rec["box_original"],
        "status": r.status,
        "iou": iou(r.box_original, sample.bbox) if r.found and r.box_original is not None else 0.0,
        "n_tool_calls": r.n_tool_calls,
        "n_turns": r.n_turns,
        "format_ok": r.format_ok,
        "error": r.error,
        "trajectory": rec["trajectory"],
    }


def metrics(records: list[dict]) -> dict:
    """Scores over samples that ran (API failures are counted, not scored)."""
    ok = [r for r in records if r["status"] != "failed"]
    n = len(ok)

    def mean(xs: list) -> float:
        return sum(xs) / n if n else 0.0

    return {
        "n_samples": len(records),
        "n_scored": n,
        "n_failed": len(records) - n,
        "mean_iou": mean([r["iou"] for r in ok]),
        "acc_iou_0.5": mean([float(r["iou"] >= 0.5) for r in ok]),
        "format_valid_rate": mean([float(r["format_ok"]) for r in ok]),
        "mean_tool_calls": mean([r["n_tool_calls"] for r in ok]),
        "not_found_rate": mean([float(r["status"] == "not_found") for r in ok]),
        "invalid_rate": mean([float(r["status"] == "invalid") for r in ok]),
    }


@dataclass(frozen=True, kw_only=True)
class VSearchEvalSettings:
    """One standalone vSearcher evaluation (``api_key`` is kept in memory only, never written)."""

    model: str
    output_dir: str
    api_key: str | None = None
    api_base_url: str | None = None
    max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS
    prompt: str = "trained"
    max_tool_calls: int = LIMITS.max_tool_calls
    chat_completion_kwargs: dict = field(default_factory=dict)
    concurrency: int = 16
    client_timeout: float | None = None
    max_retries: int = DEFAULT_MAX_RETRIES
    max_failure_ratio: float = DEFAULT_MAX_FAILURE_RATIO
    image_workers: int | None = None

    def record(self, **extra) -> dict:
        """What ``args.json`` holds: every setting except the key."""
        return {**{k: v for k, v in asdict(self).items() if k != "api_key"}, **extra}


async def run(
    s: VSearchEvalSettings, samples: list[RegionSample], *, redactor: Redactor, args_record: dict | None = None
) -> dict:
    """The whole run under ``s.output_dir``'s lock; returns :func:`metrics` (also in ``metrics.json``).
    ``args_record``: what ``args.json`` holds (default: :meth:`VSearchEvalSettings.record`)."""
    with run_lock(s.output_dir, "evaluate_vsearch"):
        return await _run_locked(s, samples, redactor, args_record if args_record is not None else s.record())


async def _run_locked(
    a: VSearchEvalSettings, samples: list[RegionSample], redactor: Redactor, args_record: dict
) -> dict:
    write_json_atomic(os.path.join(a.output_dir, "args.json"), args_record)
    records = RecordLog.open(os.path.join(a.output_dir, "records.jsonl"))
    images = ImageStore.for_image_workers(a.image_workers)
    guard = RunGuard(a.max_failure_ratio, redact=redactor)
    client = make_client(
        a.api_key,
        a.api_base_url,
        a.client_timeout,
        a.max_retries,
        max_connections=max(2 * a.concurrency, 16),
        role="vSearcher",
        guard=guard,
    )
    searcher = VSearcher(
        client,
        a.model,
        images,
        a.max_pixels,
        a.prompt,
        a.max_tool_calls,
        completion_kwargs=a.chat_completion_kwargs,
        redactor=redactor,
    )
    todo = [s for s in samples if records.records.get(s.key, {}).get("status", "failed") == "failed"]
    log.info("%d samples, %d to run (%d done)", len(samples), len(todo), len(samples) - len(todo))
    sem = asyncio.Semaphore(a.concurrency)

    async def one(s: RegionSample) -> None:
        async with sem:
            r = await searcher.locate(s.image_path, s.description)
            if guard.tripped:
                return  # stopping: this result may carry the failure that stopped the run
            await asyncio.to_thread(records.append, score(s, r))

    try:
        await gather_or_stop((one(s) for s in todo), guard)
        records.compact([s.key for s in samples])
        m = metrics([records.records[s.key] for s in samples if s.key in records.records])
        write_json_atomic(os.path.join(a.output_dir, "metrics.json"), m)
        return m
    finally:
        records.close()
        await client.close()
        images.close()
