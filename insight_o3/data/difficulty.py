"""Collage difficulty filter (C.1): a vReasoner answers each collage question *without* vSearcher
``--attempts`` times (pass@3 in the paper); any correct attempt removes the collage.

    python -m insight_o3.scripts.filter_difficulty --output_dir data/collages --model gpt-5-mini

(the same as ``python -m insight_o3.scripts.generate_collages filter ...``; the command-line flags are
in :mod:`insight_o3.scripts.filter_difficulty`, the engine is :func:`run_filter`.)

The request and the answer check are the evaluation's own: each collage row becomes an
``evaluation`` :class:`~insight_o3.evaluation.samples.Sample`, the attempts come from
:class:`~insight_o3.agents.single_model.SingleModelSolver` (one request with ``n=--attempts``,
or one request per attempt with ``--separate_attempt_requests``; think system prompt) and every
attempt is checked by :class:`~insight_o3.evaluation.judge.AnswerJudge` (rules first, then the judge
model ``--judge_model``, default ``gpt-5-nano`` on the same endpoint unless ``--judge_api_base_url`` /
``--judge_api_key`` or ``$JUDGE_API_BASE_URL`` / ``$JUDGE_API_KEY`` say otherwise).

Reads ``<out_dir>/collages.jsonl``; one record per collage is appended durably to
``difficulty.jsonl`` as it finishes: ``sample_key``, ``solved`` and ``attempts`` (per attempt the
judge's ``status``, ``extracted_answer``, ``response``, ``finish_reason``, ``judge_method``,
``fail_reason``, ``fail_stage``). A collage none of whose attempts is correct but some of whose
attempts were lost to API errors is recorded with ``error`` instead of ``solved``; the next run
retries only such collages (and those without a record), asking the vReasoner again only for the
lost attempts and re-judging stored responses whose judging failed. ``collages_hard.jsonl`` (the
rows with ``solved: false``, same schema as ``collages.jsonl``) is rewritten at the end; the exit
status is 1 while some collages are still errors.

The filter holds ``--output_dir``'s lock (shared with ``generate_collages``: status 5 if another run holds
it); a 401/403/404 from the vReasoner or judge endpoint, or more than ``--max_failure_ratio`` failed
requests, stop it (status 4); an unwritable output stops it (status 3). Each prints one line and keeps
every finished collage.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass, field
from typing import Any

from ..agents.single_model import SingleModelSolver
from ..base.json_types import JSONObject
from ..endpoints.endpoint import Endpoint
from ..evaluation.judge import AnswerJudge, Verdict
from ..imaging.images import ImageStore, Resize
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS, Emit, ItemWork, JobResult, execute, left
from ..jobs.integrity import Invocation
from ..jobs.run_directory import open_run
from ..protocol import prompts
from ..protocol.attempt import Attempt
from ..protocol.limits import LIMITS
from ..protocol.parsing import format_options
from ..protocol.sample import Sample
from ..protocol.statuses import FailStage, VerdictStatus
from ..storage.atomic import write_jsonl_atomic
from ..storage.jsonl import iter_jsonl

RECORDS_FILE, HARD_FILE, ROWS_FILE = "difficulty.jsonl", "collages_hard.jsonl", "collages.jsonl"
CARD_FILE = "difficulty_card.json"
COMMAND = "generate_collages filter"
_REQUIRED = ("sample_key", "image", "question", "answer")


class CollagesFileError(ValueError):
    """A bad ``collages.jsonl`` line; the message names the file, the line and the field."""


def collage_sample(row: dict, out_dir: str) -> Sample:
    """The evaluation sample of one ``collages.jsonl`` row (image paths are relative to ``out_dir``)."""
    return Sample(
        index=int(row.get("index") or 0),
        question_id=row["sample_key"],
        image=row["image"],
        image_path=os.path.join(out_dir, row["image"]),
        question=row["question"],
        options=format_options(row.get("options")),
        answer=str(row["answer"]).strip(),
        category=str(row.get("source") or "unknown"),
        key=str(row["sample_key"]),
    )


def attempt_record(att: Attempt, v: Verdict) -> JSONObject:
    """One judged attempt as stored in the filter's records (also used by :mod:`.reliability`)."""
    return {
        "status": v.status,
        "extracted_answer": v.extracted_answer,
        "response": att.text,
        "finish_reason": att.finish_reason,
        "judge_method": v.method,
        "fail_reason": v.fail_reason,
        "fail_stage": v.fail_stage,
    }


async def check_collage(
    sample: Sample, solver: SingleModelSolver, judge: AnswerJudge, attempts: int, previous: list[dict] | None = None
) -> JSONObject:
    """pass@``attempts`` for one collage. ``previous``: the attempts of an earlier ``error`` record;
    judged ones are kept, judge failures re-judged, and only lost ones asked again."""
    kept, rejudge = [], []
    for p in (previous or [])[:attempts]:
        if p.get("status") != VerdictStatus.FAILED:
            kept.append(p)
        elif p.get("fail_stage") == FailStage.JUDGE and p.get("response") is not None:
            rejudge.append(Attempt(p["response"], p.get("finish_reason")))
    n_new = attempts - len(kept) - len(rejudge)
    new = list(await solver.solve(sample, n_new)) if n_new > 0 else []
    todo = rejudge + new
    verdicts = await asyncio.gather(*(judge.check(sample, a) for a in todo))
    recs = kept + [attempt_record(a, v) for a, v in zip(todo, verdicts)]
    solved = any(r["status"] == VerdictStatus.CORRECT for r in recs)  # any success removes the collage
    failed = [r for r in recs if r["status"] == VerdictStatus.FAILED]
    if failed and not solved:
        return {"sample_key": sample.key, "error": failed[0]["fail_reason"], "attempts": recs}
    return {"sample_key": sample.key, "solved": solved, "attempts": recs}


def load_rows(path: str) -> list[JSONObject]:
    """The rows of a ``collages.jsonl`` (:class:`CollagesFileError` naming file, line and field)."""
    rows, keys = [], set()
    for where, _, row in iter_jsonl(path, CollagesFileError, what="collages file"):
        missing = [f for f in _REQUIRED if row.get(f) in (None, "")]
        if missing:
            raise CollagesFileError(f"{where}: field {missing[0]!r} is missing or empty")
        if row["sample_key"] in keys:
            raise CollagesFileError(f"{where}: field 'sample_key': duplicate {row['sample_key']!r}")
        keys.add(row["sample_key"])
        rows.append(row)
    return rows


@dataclass(frozen=True, kw_only=True)
class FilterSettings:
    """One difficulty-filter run: the solving model and the judge, each at its endpoint (keys are resolved by the
    caller and never written anywhere), the attempts per collage, the image budget and the run controls."""

    out_dir: str
    model: str
    endpoint: Endpoint
    judge_model: str = "gpt-5-nano"
    judge: Endpoint
    attempts: int = LIMITS.difficulty_attempts
    separate_attempt_requests: bool = False
    max_pixels: int = 1280 * 1280
    controls: RunControls = field(default_factory=RunControls)


class CollageFilterWork(ItemWork[JSONObject]):
    """One collage row: pass@``attempts`` of the model, its earlier attempts kept (``records``: the stored ones)."""

    def __init__(self, f: FilterSettings, solver: SingleModelSolver, judge: AnswerJudge, records: dict[str, Any]):
        self.f, self.solver, self.judge, self.records = f, solver, judge, records

    def key(self, row: JSONObject) -> str:
        return row["sample_key"]

    def is_final(self, record: dict) -> bool:
        return "solved" in record

    async def work(self, row: JSONObject, emit: Emit) -> JSONObject:
        sample = collage_sample(row, self.f.out_dir)
        return await check_collage(sample, self.solver, self.judge, self.f.attempts, self._previous_attempts(row))

    def _previous_attempts(self, row: JSONObject) -> list[JSONObject] | None:
        return (self.records.get(self.key(row)) or {}).get("attempts")

    def failed(self, row: JSONObject, reason: str) -> JSONObject:  # recorded as an error, retried next run
        return {"sample_key": row["sample_key"], "error": reason, "attempts": self._previous_attempts(row) or []}


def _filter_work(f: FilterSettings, clients: Clients, records: dict[str, Any]) -> CollageFilterWork:
    """The filter's solver and judge, their clients and image store closed with ``clients``."""
    conns = max(f.controls.concurrency * (f.attempts if f.separate_attempt_requests else 1), 16)
    client = clients.client(f.endpoint, role="vReasoner", max_connections=conns)
    judge_client = clients.client(f.judge, role="judge", max_connections=conns)
    store = ImageStore.for_image_workers(f.controls.image_workers, originals_cached=0)
    clients.on_close(store.close)
    solver = SingleModelSolver(
        client,
        f.model,
        store,
        Resize.fit(f.max_pixels),
        system_prompt=prompts.THINK_SYSTEM_PROMPT,
        image_url_extra={"detail": "high"},
        separate_trial_requests=f.separate_attempt_requests,
    )
    return CollageFilterWork(f, solver, AnswerJudge(judge_client, f.judge_model), records)


async def _afilter(f: FilterSettings, rows: list[JSONObject], invocation: Invocation | None) -> JobResult[JSONObject]:
    store = CardFile.under(f.out_dir, CARD_FILE, [RECORDS_FILE])
    with open_run(f.out_dir, COMMAND, f.controls, store=store, invocation=invocation) as run:
        log = run.open_logs({RECORDS: RECORDS_FILE})[RECORDS]
        async with Clients(run.guard) as clients:
            work = _filter_work(f, clients, log.records)
            await execute(run, left(rows, work, log), work, clients, desc=f"pass@{f.attempts}")
        log.compact([r["sample_key"] for r in rows])
        recs = log.records
        hard = [r for r in rows if recs.get(r["sample_key"], {}).get("solved") is False]
        errors = sum(1 for r in rows if "solved" not in recs.get(r["sample_key"], {}))
        write_jsonl_atomic(os.path.join(f.out_dir, HARD_FILE), hard)
    return JobResult({"collages": len(rows), "hard": len(hard), "errors": errors}, errors)


def run_filter(f: FilterSettings, invocation: Invocation | None = None) -> JobResult[JSONObject]:
    """Filter ``<out_dir>/collages.jsonl`` under the directory's lock; the summary counts
    ``{"collages", "hard", "errors"}`` (``errors``: collages still lost to API errors). Raises
    :class:`CollagesFileError` for a bad collages file and the stop errors of :mod:`insight_o3.endpoints.guard`;
    with ``invocation``, :class:`~insight_o3.jobs.integrity.SettingsChanged` when the directory's first filter
    run had other result-changing settings (``difficulty_card.json``)."""
    rows = load_rows(os.path.join(f.out_dir, ROWS_FILE))
    return asyncio.run(_afilter(f, rows, invocation))
