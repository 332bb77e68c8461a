"""C.1 MLLM reliability check of the source pool: an item of the natural-image stream is kept only if
every checker MLLM answers it correctly (the paper: Qwen2.5-VL-7B and GPT-5-nano, "under a
deterministic prompt"; any other outcome, including ambiguous or poorly aligned items, discards it).

    python -m insight_o3.scripts.check_reliability --source_pool pool.jsonl --output_dir out/reliability \\
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
``<output_dir>/reliability.jsonl`` as it finishes: ``sample_key`` (the pool id), ``reliable`` and
``checks`` (per checker model the judge's ``status``, ``extracted_answer``, ``response``,
``finish_reason``, ``judge_method``, ``fail_reason``, ``fail_stage``). An item whose check was cut by
an API error before any checker answered wrongly is recorded with ``error``; the next run retries
only such items (and those without a record), keeping the checkers' judged answers, re-judging
stored responses whose judging failed and asking again only the lost ones. At the end
``<output_dir>/pool_reliable.jsonl`` (source-pool format: the unchecked items plus the reliable ones, in
pool order) is rewritten atomically; the exit status is 1 while some items are still errors.

The command line is :mod:`insight_o3.scripts.check_reliability`; the engine is :func:`run_check`.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field

from tqdm import tqdm

from .. import prompts
from ..api import make_client
from ..errors import EXPECTED_ERRORS
from ..evaluation.judge import AnswerJudge
from ..evaluation.samples import Sample
from ..evaluation.single_model import SingleModelSolver
from ..images import ImageStore, Resize
from ..parsing import format_options
from ..run_guard import RunStopped
from ..solver import Attempt
from ..storage.atomic import OutputError
from ..storage.record_log import RecordLog
from .difficulty import attempt_record
from .source_pool import VISCOT_NATURAL_SUBSETS, SourceItem, write_pool

#: errors an item is recorded with (and retried on the next run) instead of stopping the run
RECORDED_ERRORS: tuple[type[Exception], ...] = (*EXPECTED_ERRORS, RunStopped)

RECORDS_FILE, KEPT_FILE = "reliability.jsonl", "pool_reliable.jsonl"
#: C.1's low-reliability stream: the natural-image Visual CoT subsets and V*
CHECKED_SOURCES = tuple(f"viscot/{s}" for s in VISCOT_NATURAL_SUBSETS) + ("vstar",)


def needs_check(item: SourceItem) -> bool:
    return item.source in CHECKED_SOURCES or item.source.split("/")[0] == "vstar"


def item_sample(item: SourceItem, index: int) -> Sample:
    """The evaluation sample of one pool item (options as the evaluation formats them)."""
    options = format_options(list(item.options)) if item.options else None
    return Sample(
        index=index,
        question_id=item.id,
        image=item.image,
        image_path=item.image,
        question=item.question,
        options=options,
        answer=str(item.answer).strip(),
        category=item.source,
        key=item.id,
    )


@dataclass
class Checker:
    """One MLLM of the check: its solver (request) and the shared judge (answer check)."""

    model: str
    solver: SingleModelSolver


async def check_item(sample: Sample, checkers: list[Checker], judge: AnswerJudge, previous: dict | None = None) -> dict:
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


@dataclass(frozen=True, kw_only=True)
class CheckerEndpoint:
    """One checker MLLM: its model name, endpoint and key (the key is kept in memory only)."""

    model: str
    api_base_url: str | None = None
    api_key: str | None = None


@dataclass(frozen=True, kw_only=True)
class ReliabilitySettings:
    out_dir: str
    checkers: tuple[CheckerEndpoint, ...]
    judge_model: str = "gpt-5-nano"
    judge_api_key: str | None = None
    judge_api_base_url: str | None = None
    all_sources: bool = False
    chat_completion_kwargs: dict = field(default_factory=dict)
    concurrency: int = 16
    max_retries: int = 5
    client_timeout: float | None = None
    max_pixels: int = 1280 * 1280
    progress: bool = True


def run_check(a: ReliabilitySettings, items: list[SourceItem], *, redact=lambda s: s) -> dict:
    """Check ``items`` (resuming from ``<out_dir>/reliability.jsonl``) and write ``pool_reliable.jsonl``;
    returns ``{"items", "checked", "kept", "errors"}`` (``errors``: items still lost to API errors)."""
    try:
        os.makedirs(a.out_dir, exist_ok=True)
    except OSError as e:
        raise OutputError.from_os_error(a.out_dir, e, "create") from None
    rec_log = RecordLog.open(os.path.join(a.out_dir, RECORDS_FILE))
    checked = [(i, it) for i, it in enumerate(items) if a.all_sources or needs_check(it)]
    todo = [(i, it) for i, it in checked if "reliable" not in rec_log.records.get(it.id, {})]

    async def run():
        clients = [
            make_client(
                c.api_key,
                c.api_base_url,
                timeout=a.client_timeout,
                max_retries=a.max_retries,
                max_connections=max(a.concurrency, 16),
            )
            for c in a.checkers
        ]
        judge_client = make_client(
            a.judge_api_key,
            a.judge_api_base_url,
            timeout=a.client_timeout,
            max_retries=a.max_retries,
            max_connections=max(a.concurrency, 16),
        )
        store = ImageStore(originals_cached=0)
        resize = Resize(max_pixels=a.max_pixels or None)
        checkers = [
            Checker(
                c.model,
                SingleModelSolver(
                    cl,
                    c.model,
                    store,
                    resize,
                    system_prompt=prompts.THINK_SYSTEM_PROMPT,
                    completion_kwargs=a.chat_completion_kwargs,
                    image_url_extra={"detail": "high"},
                    redact=redact,
                ),
            )
            for c, cl in zip(a.checkers, clients)
        ]
        judge = AnswerJudge(judge_client, a.judge_model, redact=redact)
        sem = asyncio.Semaphore(a.concurrency)
        bar = tqdm(total=len(checked), initial=len(checked) - len(todo), desc="reliability", disable=not a.progress)

        async def one(i: int, item: SourceItem):
            async with sem:
                previous = rec_log.records.get(item.id, {}).get("checks")
                try:
                    rec = await check_item(item_sample(item, i), checkers, judge, previous)
                except asyncio.CancelledError:
                    raise
                except RECORDED_ERRORS as e:  # recorded as an error, retried next run
                    rec = {
                        "sample_key": item.id,
                        "error": redact(f"{type(e).__name__}: {e}")[:2000],
                        "checks": previous or {},
                    }
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
    return {"items": len(items), "checked": len(checked), "kept": len(kept), "errors": errors}
