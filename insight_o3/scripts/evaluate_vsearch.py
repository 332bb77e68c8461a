"""Standalone vSearcher localization evaluation (no vReasoner).

    python -m insight_o3.scripts.evaluate_vsearch --ann_file regions.jsonl --img_dir images \\
        --model m-Just/InSight-o3-vS --api_base_url http://localhost:8000/v1

Each annotation line is a JSON object with the image (``image`` or ``file_name``, relative to
``--img_dir``), the region description (``description``, ``region_description`` or ``target``) and
the ground-truth ``bbox`` ``[x1, y1, x2, y2]`` in original-image pixels; an optional ``id`` keys it.
Results go to ``<output_dir>/records.jsonl`` (one line per sample, appended durably as each
finishes; a rerun resumes and re-tries samples lost to API failures) and ``metrics.json``: mean
IoU, accuracy at IoU >= 0.5, format-valid rate, mean tool calls and not-found rate.

The run holds ``<output_dir>``'s lock (a second run on it exits with status 5); a 401/403/404 from the
vSearcher endpoint or more than ``--max_failure_ratio`` failed requests stop it (status 4), an
unwritable output stops it (status 3), each with one line; finished samples are kept.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from dataclasses import dataclass

from ..agents.clients import VSearcher
from ..agents.searcher_session import LocateResult
from ..api import DEFAULT_MAX_RETRIES, ENV_KEYS, Redactor, make_client, quiet_http_logs, resolve
from ..storage import RecordFileError, RecordLog, write_json_atomic
from ..geometry import VSEARCHER_EVAL_MAX_PIXELS, check_box, iou
from ..images import ImageStore, usable_cpus
from ..evaluation.samples import AnnotationError
from ..storage.jsonl import iter_jsonl
from ..run_guard import (DEFAULT_MAX_FAILURE_RATIO, EXIT_BAD_INPUT, STOP_ERRORS, RunGuard, gather_or_stop,
                         report_stop)
from ..run_lock import run_lock

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
            raise AnnotationError(f"{where}: field {'image' if 'image' in row else 'file_name'!r}: "
                                  f"image file not found: {path}")
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
    return {"sample_key": sample.key, "line": sample.line, "image": sample.image, "description": sample.description,
            "gt_bbox": list(sample.bbox), "pred_bbox": rec["box_original"], "status": r.status,
            "iou": iou(r.box_original, sample.bbox) if r.found else 0.0, "n_tool_calls": r.n_tool_calls,
            "n_turns": r.n_turns, "format_ok": r.format_ok, "error": r.error, "trajectory": rec["trajectory"]}


def metrics(records: list[dict]) -> dict:
    """Scores over samples that ran (API failures are counted, not scored)."""
    ok = [r for r in records if r["status"] != "failed"]
    n = len(ok)
    mean = (lambda xs: sum(xs) / n if n else 0.0)
    return {"n_samples": len(records), "n_scored": n, "n_failed": len(records) - n,
            "mean_iou": mean([r["iou"] for r in ok]), "acc_iou_0.5": mean([float(r["iou"] >= 0.5) for r in ok]),
            "format_valid_rate": mean([float(r["format_ok"]) for r in ok]),
            "mean_tool_calls": mean([r["n_tool_calls"] for r in ok]),
            "not_found_rate": mean([float(r["status"] == "not_found") for r in ok]),
            "invalid_rate": mean([float(r["status"] == "invalid") for r in ok])}


async def run(a: argparse.Namespace, samples: list[RegionSample], redactor: Redactor) -> dict:
    """The whole run under ``a.output_dir``'s lock."""
    with run_lock(a.output_dir, "evaluate_vsearch"):
        return await _run_locked(a, samples, redactor)


async def _run_locked(a: argparse.Namespace, samples: list[RegionSample], redactor: Redactor) -> dict:
    write_json_atomic(os.path.join(a.output_dir, "args.json"),
                      {k: v for k, v in vars(a).items() if k != "api_key"})
    records = RecordLog.open(os.path.join(a.output_dir, "records.jsonl"))
    workers = usable_cpus() if getattr(a, "image_workers", None) is None else a.image_workers
    images = ImageStore(workers=max(1, workers), processes=workers > 0)
    guard = RunGuard(getattr(a, "max_failure_ratio", DEFAULT_MAX_FAILURE_RATIO), redact=redactor)
    client = make_client(a.api_key, a.api_base_url, a.client_timeout, a.max_retries,
                         max_connections=max(2 * a.concurrency, 16), role="vSearcher", guard=guard)
    searcher = VSearcher(client, a.model, images, a.max_pixels, a.prompt, a.max_tool_calls,
                         completion_kwargs=a.chat_completion_kwargs, redactor=redactor)
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


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ann_file", required=True)
    p.add_argument("--img_dir", required=True)
    p.add_argument("--model", required=True, help="the vSearcher model name on the server")
    p.add_argument("--api_base_url", help="default: $VSEARCHER_API_BASE_URL")
    p.add_argument("--api_key", help="default: $VSEARCHER_API_KEY")
    p.add_argument("--max_pixels", type=int, default=VSEARCHER_EVAL_MAX_PIXELS)
    p.add_argument("--prompt", choices=("trained", "simple"), default="trained")
    p.add_argument("--max_tool_calls", type=int, default=6)
    p.add_argument("--chat_completion_kwargs", type=json.loads, default={},
                   help='JSON object, e.g. \'{"max_tokens": 4096}\' (temperature defaults to 0)')
    p.add_argument("--output_dir", default=None, help="default: results/vsearch/<model>")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--client_timeout", type=float, default=None)
    p.add_argument("--max_retries", type=int, default=DEFAULT_MAX_RETRIES)
    p.add_argument("--max_failure_ratio", type=float, default=DEFAULT_MAX_FAILURE_RATIO,
                   help="stop when more than this share of the requests failed (judged from the 20th on)")
    p.add_argument("--image_workers", type=int, default=None,
                   help="image decode/encode processes (default: the usable CPUs; 0 = threads)")
    return p


def main(argv=None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    quiet_http_logs()
    p = build_parser()
    a = p.parse_args(argv)
    if not isinstance(a.chat_completion_kwargs, dict) or "n" in a.chat_completion_kwargs:
        p.error("--chat_completion_kwargs must be a JSON object without 'n'")
    if a.concurrency < 1 or a.max_tool_calls < 1 or a.max_pixels < 4 * 28 * 28:
        p.error("--concurrency >= 1, --max_tool_calls >= 1 and --max_pixels >= 3136 are required")
    if not 0 < a.max_failure_ratio <= 1 or (a.image_workers is not None and a.image_workers < 0):
        p.error("--max_failure_ratio must be in (0, 1] and --image_workers >= 0")
    a.api_key = resolve(a.api_key, ENV_KEYS["vsearcher"][0])
    a.api_base_url = resolve(a.api_base_url, ENV_KEYS["vsearcher"][1])
    a.output_dir = a.output_dir or os.path.join("results", "vsearch", a.model.replace("/", "__"))
    redactor = Redactor(a.api_key)
    try:
        samples = load_regions(a.ann_file, a.img_dir)
        m = asyncio.run(run(a, samples, redactor))
    except (AnnotationError, RecordFileError) as e:
        print(f"error: {redactor(str(e))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except STOP_ERRORS as e:
        return report_stop(e, redactor, os.path.join(a.output_dir, "records.jsonl"))
    print(json.dumps(m, indent=2))
    if m["n_failed"]:
        print(f"warning: {m['n_failed']} sample(s) lost to API failures; run again to retry them", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
