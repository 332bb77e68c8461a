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
:class:`~insight_o3.agents.single_model.SingleModelSolver` (the single-model think prompt, fixed)
and is checked by :class:`~insight_o3.evaluation.judge.AnswerJudge` (rules first, then
``--judge_model``).

Resumable like the difficulty filter (:func:`~insight_o3.jobs.execute.execute` in the output directory's
lock, a 401/403/404 or more than ``--max_failure_ratio`` failed requests stop it): one record per checked item is appended durably to
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..agents.single_model import SingleModelSolver
from ..base.json_types import JSONObject
from ..endpoints.endpoint import Endpoint
from ..evaluation.judge import AnswerJudge
from ..imaging.images import ImageStore, Resize
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS, Emit, ItemWork, JobResult, execute, left
from ..jobs.integrity import Invocation
from ..jobs.run_directory import open_run
from ..protocol import prompts
from ..protocol.attempt import Attempt
from ..protocol.parsing import format_options
from ..protocol.sample import Sample
from ..protocol.statuses import FailStage, VerdictStatus
from .difficulty import attempt_record
from .source_pool import VISCOT_NATURAL_SUBSETS, SourceItem, write_pool

RECORDS_FILE, KEPT_FILE = "reliability.jsonl", "pool_reliable.jsonl"
CARD_FILE = "reliability_card.json"
COMMAND = "check_reliability"
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


async def check_item(
    sample: Sample, checkers: list[Checker], judge: AnswerJudge, previous: dict | None = None
) -> JSONObject:
    """Ask the checkers in order until one does not answer correctly. ``previous``: the ``checks``
    of an earlier ``error`` record (judged ones kept, judge failures re-judged, lost ones re-asked)."""
    checks: dict[str, dict] = {}
    for c in checkers:
        old = (previous or {}).get(c.model)
        if old is not None and old.get("status") != VerdictStatus.FAILED:
            rec = old
        else:
            if old is not None and old.get("fail_stage") == FailStage.JUDGE and old.get("response") is not None:
                attempt = Attempt(old["response"], old.get("finish_reason"))
            else:
                attempt = (await c.solver.solve(sample, 1))[0]
            rec = attempt_record(attempt, await judge.check(sample, attempt))
        checks[c.model] = rec
        if rec["status"] == VerdictStatus.FAILED:
            return {"sample_key": sample.key, "error": rec["fail_reason"], "checks": checks}
        if rec["status"] != VerdictStatus.CORRECT:
            return {"sample_key": sample.key, "reliable": False, "checks": checks}
    return {"sample_key": sample.key, "reliable": True, "checks": checks}


def parse_checker(spec: str) -> tuple[str, str | None, str]:
    """``MODEL[,BASE_URL[,API_KEY_ENV]]`` -> (model, base_url or None, key env name)."""
    parts = [p.strip() for p in spec.split(",")]
    if not parts[0] or len(parts) > 3:
        raise ValueError(f"checker must be MODEL[,BASE_URL[,API_KEY_ENV]], got {spec!r}")
    base = parts[1] if len(parts) > 1 and parts[1] else None
    key_env = parts[2] if len(parts) > 2 and parts[2] else "OPENAI_API_KEY"
    return parts[0], base, key_env


@dataclass(frozen=True, kw_only=True)
class ReliabilitySettings:
    """One reliability check: the checker MLLMs by model name, each at its endpoint (keys in memory only), the judge,
    what is checked and how, and the run controls."""

    out_dir: str
    checkers: Mapping[str, Endpoint]
    judge_model: str = "gpt-5-nano"
    judge: Endpoint
    all_sources: bool = False
    chat_completion_kwargs: dict = field(default_factory=dict)
    max_pixels: int = 1280 * 1280
    controls: RunControls = field(default_factory=RunControls)


class ReliabilityWork(ItemWork[tuple[int, SourceItem]]):
    """One checked item (``(pool index, item)``): every checker asked, its earlier checks kept (``records``: the
    stored ones)."""

    def __init__(self, checkers: list[Checker], judge: AnswerJudge, records: dict[str, Any]):
        self.checkers, self.judge, self.records = checkers, judge, records

    def key(self, unit: tuple[int, SourceItem]) -> str:
        return unit[1].id

    def is_final(self, record: dict) -> bool:
        return "reliable" in record

    def _previous_checks(self, unit: tuple[int, SourceItem]) -> JSONObject | None:
        return (self.records.get(self.key(unit)) or {}).get("checks")

    async def work(self, unit: tuple[int, SourceItem], emit: Emit) -> JSONObject:
        i, item = unit
        return await check_item(item_sample(item, i), self.checkers, self.judge, self._previous_checks(unit))

    def failed(self, unit: tuple[int, SourceItem], reason: str) -> JSONObject:  # recorded as an error, retried next run
        return {"sample_key": unit[1].id, "error": reason, "checks": self._previous_checks(unit) or {}}


def _reliability_work(a: ReliabilitySettings, clients: Clients, records: dict[str, Any]) -> ReliabilityWork:
    """The checkers and the judge, their clients and image store closed with ``clients``."""
    conns = max(a.controls.concurrency, 16)
    store = ImageStore.for_image_workers(a.controls.image_workers, originals_cached=0)
    clients.on_close(store.close)
    resize = Resize.fit(a.max_pixels)
    checkers = [
        Checker(
            model,
            SingleModelSolver(
                clients.client(endpoint, role=f"checker {model}", max_connections=conns),
                model,
                store,
                resize,
                system_prompt=prompts.THINK_SYSTEM_PROMPT,
                completion_kwargs=a.chat_completion_kwargs,
                image_url_extra={"detail": "high"},
            ),
        )
        for model, endpoint in a.checkers.items()
    ]
    judge = AnswerJudge(clients.client(a.judge, role="judge", max_connections=conns), a.judge_model)
    return ReliabilityWork(checkers, judge, records)


def _summary(a: ReliabilitySettings, items: list[SourceItem], checked: list, recs: dict[str, Any]) -> JSONObject:
    """``pool_reliable.jsonl`` written (the unchecked items and those that passed); the counts."""
    checked_ids = {it.id for _, it in checked}
    kept = [it for it in items if it.id not in checked_ids or recs.get(it.id, {}).get("reliable") is True]
    verdicts = [recs.get(it.id, {}).get("reliable") for _, it in checked]
    write_pool(kept, os.path.join(a.out_dir, KEPT_FILE))
    passed, discarded = verdicts.count(True), verdicts.count(False)
    return {
        "items": len(items),
        "to_check": len(checked),
        "checked": passed + discarded,
        "passed": passed,
        "discarded": discarded,
        "errors": len(verdicts) - passed - discarded,
        "kept_unchecked": len(items) - len(checked),
        "kept": len(kept),
    }


async def _acheck(
    a: ReliabilitySettings, items: list[SourceItem], invocation: Invocation | None
) -> JobResult[JSONObject]:
    checked = [(i, it) for i, it in enumerate(items) if a.all_sources or needs_check(it)]
    store = CardFile.under(a.out_dir, CARD_FILE, [RECORDS_FILE])
    with open_run(a.out_dir, COMMAND, a.controls, store=store, invocation=invocation) as run:
        log = run.open_logs({RECORDS: RECORDS_FILE})[RECORDS]
        async with Clients(run.guard) as clients:
            work = _reliability_work(a, clients, log.records)
            await execute(run, left(checked, work, log), work, clients, desc="reliability")
        log.compact([it.id for _, it in checked])
        summary = _summary(a, items, checked, log.records)
    return JobResult(summary, summary["errors"])


def run_check(
    a: ReliabilitySettings, items: list[SourceItem], invocation: Invocation | None = None
) -> JobResult[JSONObject]:
    """Check ``items`` (resuming from ``<out_dir>/reliability.jsonl``, under the directory's lock) and write
    ``pool_reliable.jsonl``. The summary: ``items`` (the pool), ``to_check`` (the low-reliability stream, or all
    with ``all_sources``), ``checked`` = ``passed`` (every checker right) + ``discarded``, ``errors`` (still lost
    to API errors: not checked, not kept), ``kept_unchecked`` (the stream kept as it is) and ``kept``
    (= ``kept_unchecked`` + ``passed``)."""
    return asyncio.run(_acheck(a, items, invocation))
