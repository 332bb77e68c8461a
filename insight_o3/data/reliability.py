"""C.1 MLLM reliability check of the source pool: an item of the natural-image stream is kept only if
every checker MLLM answers it correctly (the paper: Qwen2.5-VL-7B and GPT-5-nano, "under a
deterministic prompt"; any other outcome, including ambiguous or poorly aligned items, discards it).

    python -m insight_o3.scripts.check_reliability --source_pool pool.jsonl --out_dir out/reliability \\
        --checker "Qwen/Qwen2.5-VL-7B-Instruct,http://localhost:8000/v1,VLLM_API_KEY" --checker gpt-5-nano \\
        --judge_model gpt-5-nano

``--checker MODEL[,BASE_URL[,API_KEY_ENV]]``: the endpoint defaults to ``$OPENAI_BASE_URL``, the key is
read from the named environment variable (default ``OPENAI_API_KEY``; keys never appear on the
command line, in files or in logs). Checkers answer in the order given and the check stops at the
first one that does not answer correctly (the item is discarded whatever the others say).

Which items are checked: C.1 treats the natural-image Visual CoT subsets (flickr30k, gqa, openimages,
v7w) and V* as the low-reliability stream (:func:`needs_check`); the Chart/OCR subsets are kept as
they are. ``--all_sources`` checks every item.

The request and the answer check are the evaluation's, as in the difficulty filter
(:mod:`insight_o3.data.difficulty`): each item becomes an evaluation
:class:`~insight_o3.evaluation.samples.Sample`, one attempt per checker comes from
:class:`~insight_o3.evaluation.single_model.SingleModelSolver` (the single-model think prompt, fixed)
and is checked by :class:`~insight_o3.evaluation.judge.AnswerJudge` (rules first, then
``--judge_model``).

Resumable like the difficulty filter: one record per checked item is appended durably to
``<out_dir>/reliability.jsonl`` as it finishes: ``sample_key`` (the pool id), ``reliable`` and
``checks`` (per checker model the judge's ``status``, ``extracted_answer``, ``response``,
``finish_reason``, ``judge_method``, ``fail_reason``, ``fail_stage``). An item whose check was cut by
an API error before any checker answered wrongly is recorded with ``error``; the next run retries
only such items (and those without a record), keeping the checkers' judged answers, re-judging
stored responses whose judging failed and asking again only the lost ones. At the end
``<out_dir>/pool_reliable.jsonl`` (source-pool format: the unchecked items plus the reliable ones, in
pool order) is rewritten atomically; the exit status is 1 while some items are still errors.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import dataclass

from tqdm import tqdm

from .. import prompts
from ..api import Redactor, make_client, resolve
from ..errors import EXPECTED_ERRORS
from ..evaluation.judge import AnswerJudge
from ..storage.record_log import RecordLog
from ..evaluation.samples import Sample
from ..evaluation.single_model import SingleModelSolver
from ..evaluation.solver import Attempt
from ..images import ImageStore, Resize
from ..parsing import format_options
from ..run_guard import RunStopped
from .difficulty import attempt_record
from .source_pool import VISCOT_NATURAL_SUBSETS, PoolError, SourceItem, load_pool, write_pool

RECORDS_FILE, KEPT_FILE = "reliability.jsonl", "pool_reliable.jsonl"
#: C.1's low-reliability stream: the natural-image Visual CoT subsets and V*
CHECKED_SOURCES = tuple(f"viscot/{s}" for s in VISCOT_NATURAL_SUBSETS) + ("vstar",)


def needs_check(item: SourceItem) -> bool:
    return item.source in CHECKED_SOURCES or item.source.split("/")[0] == "vstar"


def item_sample(item: SourceItem, index: int) -> Sample:
    """The evaluation sample of one pool item (options as the evaluation formats them)."""
    options = format_options(list(item.options)) if item.options else None
    return Sample(index=index, question_id=item.id, image=item.image, image_path=item.image, question=item.question,
                  options=options, answer=str(item.answer).strip(), category=item.source, key=item.id)


@dataclass
class Checker:
    """One MLLM of the check: its solver (request) and the shared judge (answer check)."""

    model: str
    solver: SingleModelSolver


async def check_item(sample: Sample, checkers: list[Checker], judge: AnswerJudge,
                     previous: dict | None = None) -> dict:
    """Ask the checkers in order until one does not answer correctly. ``previous``: the ``checks``
    of an earlier ``error`` record (judged ones kept, judge failures re-judged, lost ones re-asked)."""
    checks: dict[str, dict] = {}
    for c in checkers:
        old = (previous or {}).get(c.model)
        if old is not None and old.get("status") != "failed":
            rec = old
        else:
            if old is not None and old.get("fail_stage") == "judge" and old.get("response") is not None:
                attempt = Attempt(old["response"], old.get("finish_reason"))
            else:
                attempt = (await c.solver.solve(sample, 1))[0]
            rec = attempt_record(attempt, await judge.check(sample, attempt))
        checks[c.model] = rec
        if rec["status"] == "failed":
            return {"sample_key": sample.key, "error": rec["fail_reason"], "checks": checks}
        if rec["status"] != "correct":
            return {"sample_key": sample.key, "reliable": False, "checks": checks}
    return {"sample_key": sample.key, "reliable": True, "checks": checks}


def parse_checker(spec: str) -> tuple[str, str | None, str]:
    """``MODEL[,BASE_URL[,API_KEY_ENV]]`` -> (model, base_url or None, key env name)."""
    parts = [p.strip() for p in spec.split(",")]
    if not parts[0] or len(parts) > 3:
        raise ValueError(f"--checker must be MODEL[,BASE_URL[,API_KEY_ENV]], got {spec!r}")
    base = parts[1] if len(parts) > 1 and parts[1] else None
    key_env = parts[2] if len(parts) > 2 and parts[2] else "OPENAI_API_KEY"
    return parts[0], base, key_env


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m insight_o3.scripts.check_reliability",
                                 description="C.1 MLLM reliability check of a collage source pool.")
    ap.add_argument("--source_pool", required=True, help="pool table (.jsonl or .parquet), see data/source_pool.py")
    ap.add_argument("--image_root", default=None, help="image paths are relative to this (default: the pool's dir)")
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--checker", action="append", required=True, metavar="MODEL[,BASE_URL[,API_KEY_ENV]]",
                    help="a checker MLLM (repeat; the paper uses Qwen2.5-VL-7B and GPT-5-nano)")
    ap.add_argument("--judge_model", default="gpt-5-nano", help="decides answers the rules cannot")
    ap.add_argument("--judge_base_url", default=None, help="default: $JUDGE_API_BASE_URL / $JUDGE_BASE_URL / "
                                                            "$OPENAI_BASE_URL")
    ap.add_argument("--judge_api_key_env", default=None, help="default: JUDGE_API_KEY, then OPENAI_API_KEY")
    ap.add_argument("--all_sources", action="store_true", help="check every item, not only the natural-image stream")
    ap.add_argument("--chat_completion_kwargs", type=json.loads, default={},
                    help="JSON object passed to every checker request (e.g. {\"temperature\": 0})")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max_retries", type=int, default=5, help="the openai SDK's retries")
    ap.add_argument("--max_pixels", type=int, default=1280 * 1280, help="resize budget; 0 = no limit")
    ap.add_argument("--skip_image_check", action="store_true", help="do not open every image when loading the pool")
    ap.add_argument("--no_progress", action="store_true")
    return ap


def main(argv: list[str]) -> int:
    ap = build_parser()
    a = ap.parse_args(argv)
    if a.concurrency < 1 or a.max_retries < 0 or a.max_pixels < 0:
        ap.error("--concurrency must be >= 1, --max_retries and --max_pixels >= 0")
    if not isinstance(a.chat_completion_kwargs, dict):
        ap.error("--chat_completion_kwargs must be a JSON object")
    try:
        specs = [parse_checker(s) for s in a.checker]
    except ValueError as e:
        ap.error(str(e))
    if len({m for m, _, _ in specs}) != len(specs):
        ap.error("--checker models must be distinct")
    try:
        items = load_pool(a.source_pool, a.image_root, check_images=not a.skip_image_check)
    except PoolError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.makedirs(a.out_dir, exist_ok=True)
    keys = [resolve(None, (env,)) for _, _, env in specs]
    judge_key = resolve(None, (a.judge_api_key_env,) if a.judge_api_key_env else ("JUDGE_API_KEY", "OPENAI_API_KEY"))
    judge_base = resolve(a.judge_base_url, ("JUDGE_API_BASE_URL", "JUDGE_BASE_URL", "OPENAI_BASE_URL"))
    redact = Redactor(*keys, judge_key)
    rec_log = RecordLog.open(os.path.join(a.out_dir, RECORDS_FILE))
    checked = [(i, it) for i, it in enumerate(items) if a.all_sources or needs_check(it)]
    todo = [(i, it) for i, it in checked if "reliable" not in rec_log.records.get(it.id, {})]

    async def run():
        clients = [make_client(k, resolve(base, ("OPENAI_BASE_URL",)), max_retries=a.max_retries,
                               max_connections=max(a.concurrency, 16)) for (_, base, _), k in zip(specs, keys)]
        judge_client = make_client(judge_key, judge_base, max_retries=a.max_retries,
                                   max_connections=max(a.concurrency, 16))
        store = ImageStore(originals_cached=0)
        resize = Resize(max_pixels=a.max_pixels or None)
        checkers = [Checker(m, SingleModelSolver(cl, m, store, resize, system_prompt=prompts.THINK_SYSTEM_PROMPT,
                                                 completion_kwargs=a.chat_completion_kwargs,
                                                 image_url_extra={"detail": "high"}, redact=redact))
                    for (m, _, _), cl in zip(specs, clients)]
        judge = AnswerJudge(judge_client, a.judge_model, redact=redact)
        sem = asyncio.Semaphore(a.concurrency)
        bar = tqdm(total=len(checked), initial=len(checked) - len(todo), desc="reliability", disable=a.no_progress)

        async def one(i: int, item: SourceItem):
            async with sem:
                previous = rec_log.records.get(item.id, {}).get("checks")
                try:
                    rec = await check_item(item_sample(item, i), checkers, judge, previous)
                except asyncio.CancelledError:
                    raise
                except (*EXPECTED_ERRORS, RunStopped) as e:  # recorded as an error, retried next run
                    rec = {"sample_key": item.id, "error": redact(f"{type(e).__name__}: {e}")[:2000],
                           "checks": previous or {}}
                await asyncio.to_thread(rec_log.append, rec)
                bar.update(1)
        try:
            await asyncio.gather(*(one(i, it) for i, it in todo))
        finally:
            bar.close()
            store.close()
            for cl in (*clients, judge_client):
                await cl.close()

    try:
        asyncio.run(run())
        rec_log.compact([it.id for _, it in checked])
    finally:
        rec_log.close()
    checked_ids = {it.id for _, it in checked}
    kept = [it for it in items if it.id not in checked_ids or rec_log.records.get(it.id, {}).get("reliable") is True]
    errors = sum(1 for _, it in checked if "reliable" not in rec_log.records.get(it.id, {}))
    write_pool(kept, os.path.join(a.out_dir, KEPT_FILE))
    print(json.dumps({"items": len(items), "checked": len(checked), "kept": len(kept), "errors": errors}))
    if errors:
        print(f"warning: {errors} item(s) lost to API errors; run again to retry them", file=sys.stderr)
        return 1
    return 0
