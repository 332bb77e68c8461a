"""Standalone vSearcher localization evaluation (no vReasoner): annotations, scoring, metrics, the run.

The command line is :mod:`insight_o3.scripts.evaluate_vsearch`. Each annotation line is a JSON object
with the image (``image`` or ``file_name``, relative to the image directory), the region description
(``description``, ``region_description`` or ``target``) and the ground-truth ``bbox`` ``[x1, y1, x2, y2]``
in original-image pixels; an optional ``id`` keys it. :func:`run` writes ``<output_dir>/records.jsonl``
(one line per sample, appended durably as each finishes; a rerun resumes and re-tries samples lost to
API failures) and ``metrics.json``: mean IoU, accuracy at IoU >= 0.5, format-valid rate, mean tool calls
and not-found rate. ``run_card.json`` holds the settings the directory's first run fixed (a rerun with another
model, prompt, image budget, ... or annotation file is refused, :mod:`insight_o3.jobs.integrity`) and the history.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import __version__
from ..agents.drivers import VSearcher
from ..agents.searcher_session import LocateResult
from ..base.caps import DEFAULT_MAX_REPLY_CHARS, cut_messages
from ..base.json_types import JSONObject
from ..base.paths import OutsideImageDir, outside_message, resolve_image_path
from ..base.setting_kinds import Kind
from ..endpoints.endpoint import Endpoint
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS, check_box, iou
from ..imaging.images import DEFAULT_MAX_DECODE_VALUES, ImageStore
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS, Emit, ItemWork, JobResult, execute, left
from ..jobs.integrity import Invocation, git_commit, sha256_file
from ..jobs.run_directory import open_run
from ..protocol.limits import LIMITS
from ..protocol.sample import AnnotationError
from ..protocol.statuses import LocateStatus
from ..storage import write_json_atomic
from ..storage.jsonl import iter_jsonl
from .samples import IMAGE_FIELDS

log = logging.getLogger(__name__)
DESCRIPTION_FIELDS = ("description", "region_description", "target")
COMMAND = "evaluate_vsearch"


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


def load_regions(ann_file: str, img_dir: str, allow_outside: bool = False) -> list[RegionSample]:
    """Read and validate the annotation file (clear errors naming file, line and field). Image names must
    stay inside ``img_dir`` (:func:`insight_o3.base.paths.resolve_image_path`) unless ``allow_outside``."""
    out, keys = [], set()
    for where, lineno, row in iter_jsonl(ann_file, AnnotationError):
        image = _field(row, IMAGE_FIELDS, where)
        desc = _field(row, DESCRIPTION_FIELDS, where)
        bbox = check_box(row.get("bbox"), where, "bbox", error=AnnotationError)
        image_field = next(n for n in IMAGE_FIELDS if row.get(n) == image)
        try:
            path = resolve_image_path(img_dir, image, allow_outside=allow_outside)
        except OutsideImageDir as e:
            raise AnnotationError(outside_message(where, image_field, e)) from None
        if not os.path.isfile(path):
            raise AnnotationError(f"{where}: field {image_field!r}: image file not found: {path}")
        key = str(row["id"]) if row.get("id") is not None else f"#{lineno}"
        if key in keys:
            raise AnnotationError(f"{where}: field 'id': duplicate id {key!r}")
        keys.add(key)
        out.append(RegionSample(key, lineno, image, path, desc, bbox))
    if not out:
        raise AnnotationError(f"{ann_file}: no annotations")
    return out


def score(sample: RegionSample, r: LocateResult, max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS) -> JSONObject:
    """One JSON record: prediction, IoU (0 when nothing valid was found) and the trajectory (each reply text cut
    to ``max_reply_chars``, :func:`insight_o3.base.caps.cut_messages`)."""
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
        "trajectory": cut_messages(rec["trajectory"], max_reply_chars),
    }


def metrics(records: list[JSONObject]) -> JSONObject:
    """Scores over samples that ran (API failures are counted, not scored)."""
    ok = [r for r in records if r["status"] != LocateStatus.FAILED]
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
        "not_found_rate": mean([float(r["status"] == LocateStatus.NOT_FOUND) for r in ok]),
        "invalid_rate": mean([float(r["status"] == LocateStatus.INVALID) for r in ok]),
    }


@dataclass(frozen=True, kw_only=True)
class VSearchEvalSettings:
    """One standalone vSearcher evaluation: the vSearcher (``model`` at ``endpoint``; its key in memory only),
    its protocol settings, the caps on untrusted sizes and the run controls."""

    model: str
    output_dir: str
    endpoint: Endpoint
    max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS
    prompt: str = "trained"
    max_tool_calls: int = LIMITS.max_tool_calls
    chat_completion_kwargs: dict = field(default_factory=dict)
    max_reply_chars: int = DEFAULT_MAX_REPLY_CHARS
    max_decode_values: int = DEFAULT_MAX_DECODE_VALUES
    ann_file: str | None = None  # its sha256 is fixed by the output directory's first run
    controls: RunControls = field(default_factory=RunControls)


class VSearchWork(ItemWork[RegionSample]):
    """One sample: the vSearcher asked to locate its region, the answer scored (a failed one runs again)."""

    def __init__(self, searcher: VSearcher, max_reply_chars: int):
        self.searcher, self.max_reply_chars = searcher, max_reply_chars

    def key(self, sample: RegionSample) -> str:
        return sample.key

    def is_final(self, record: dict) -> bool:
        return record.get("status", LocateStatus.FAILED) != LocateStatus.FAILED

    async def work(self, sample: RegionSample, emit: Emit) -> JSONObject:
        return score(sample, await self.searcher.locate(sample.image_path, sample.description), self.max_reply_chars)


def _searcher(s: VSearchEvalSettings, clients: Clients) -> VSearcher:
    """The vSearcher of the run, its client and image store closed with ``clients``."""
    images = ImageStore.for_image_workers(
        s.controls.image_workers,
        max_decode_values=s.max_decode_values,
        alpha="white",  # RGBA on white: the fork's to_rgb
    )
    clients.on_close(images.close)
    client = clients.client(
        s.endpoint,
        role="vSearcher",
        max_connections=max(2 * s.controls.concurrency, 16),
        max_reply_chars=s.max_reply_chars,
    )
    return VSearcher(
        client, s.model, images, s.max_pixels, s.prompt, s.max_tool_calls, completion_kwargs=s.chat_completion_kwargs
    )


async def run(
    s: VSearchEvalSettings, samples: list[RegionSample], *, args_record: JSONObject, kinds: Mapping[str, Kind]
) -> JobResult:
    """The whole run under ``s.output_dir``'s lock; the result's summary is :func:`metrics` (also in
    ``metrics.json``). ``args_record``: what ``args.json`` holds (every flag, never a key), of the ``kinds`` the
    flags declare."""
    provenance = {"version": __version__, "git_commit": git_commit()}
    card = {"package": "insight_o3", **provenance, "settings": args_record}
    derived = {"annotation_sha256": sha256_file(s.ann_file) if s.ann_file else None}
    inv = Invocation(COMMAND, args_record, derived=derived, provenance=provenance, kinds=kinds)
    store = CardFile.under(s.output_dir, "run_card.json", ["records.jsonl"])
    with open_run(s.output_dir, COMMAND, s.controls, store=store, invocation=inv, card=card) as run_dir:
        write_json_atomic(run_dir.path("args.json"), args_record)
        records = run_dir.open_logs({RECORDS: "records.jsonl"})[RECORDS]
        async with Clients(run_dir.guard) as clients:
            work = VSearchWork(_searcher(s, clients), s.max_reply_chars)
            plan = left(samples, work, records)
            n = len(samples)
            log.info("%d samples, %d to run (%d done)", n, len(plan.units), n - len(plan.units))
            await execute(run_dir, plan, work, clients, desc="vsearch")
        keys = [x.key for x in samples]
        records.compact(keys)
        m = metrics([records.records[k] for k in keys if k in records.records])
        write_json_atomic(run_dir.path("metrics.json"), m)
    return JobResult(m, m["n_failed"])
