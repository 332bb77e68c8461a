"""Step ``filter``: the difficulty filter of §3.2 ("we discard any items solved by all three models").

Every candidate is answered by each ``--solver`` model (the paper: GPT-5-mini, Gemini-2.5-Flash, Doubao-Seed-1.6)
exactly as ``evaluate`` asks an O3-Bench question: :class:`~insight_o3.agents.single_model.SingleModelSolver`
with the model's default system prompt (no system message, E.3), the paper's image budget for the model
(:func:`~insight_o3.imaging.geometry.api_image_max_pixels`), ``detail: high`` and 16K completion tokens; every answer is
checked by the evaluation's :class:`~insight_o3.evaluation.judge.AnswerJudge` (the rule, then the judge model's
letter extraction). A model solves an item when one of its ``--attempts`` answers is correct (pass@k, through the
collage filter's :func:`~insight_o3.data.difficulty.check_collage`).

An item is dropped when at least ``threshold`` models solve it: ``--drop_when all`` (the paper; threshold = the
number of models), ``any`` (1) or a number. An item one of whose models lost an attempt to the API is recorded
``failed`` and asked again by the next run (only the lost attempts; answers already judged are kept).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..agents.single_model import DEFAULT_COMPLETION_KWARGS, SingleModelSolver
from ..base.json_types import JSONObject
from ..data.difficulty import check_collage
from ..endpoints.endpoint import Endpoint
from ..evaluation.judge import AnswerJudge
from ..imaging.geometry import api_image_max_pixels
from ..imaging.images import ImageStore, Resize
from ..jobs.clients import Clients
from ..jobs.execute import Emit, JobResult, unit_meter
from ..jobs.retried import execute_retried
from ..protocol.sample import Sample
from ..storage.atomic import write_jsonl_atomic
from .records import BenchItem, SourceImage, read_items
from .steps import (
    BenchStepRun,
    StepItems,
    close_step,
    limited,
    open_step,
    read_log,
    step_client,
    step_summary,
)
from .workspace import Workspace

DROP_RULES = ("all", "any")


def drop_threshold(rule: str, n_models: int) -> int:
    """How many solving models drop an item: ``all`` -> every model, ``any`` -> 1, ``N`` -> N (1..n_models)."""
    if rule == "all":
        return n_models
    if rule == "any":
        return 1
    try:
        n = int(rule)
    except ValueError:
        raise ValueError(f"drop_when must be 'all', 'any' or a number of models, got {rule!r}") from None
    if not 1 <= n <= n_models:
        raise ValueError(f"drop_when {n}: must be between 1 and the number of solver models ({n_models})")
    return n


@dataclass(frozen=True)
class FilterCoverage:
    """How much of ``validate/candidates.jsonl`` the difficulty filter has decided (an ok record each)."""

    candidates: int
    failed: int  # a failed record (retried by the next filter run)
    not_run: int  # no record (a --limit run, or a run stopped early)

    @property
    def unfiltered(self) -> int:
        return self.failed + self.not_run

    def describe(self) -> str:
        return (
            f"{self.unfiltered} of {self.candidates} candidate(s) have not been through the difficulty filter "
            f"({self.failed} failed, {self.not_run} not run yet)"
        )


def filter_coverage(ws: Workspace) -> FilterCoverage:
    """Which candidates the filter has decided (read under the caller's workspace lock)."""
    candidates = read_items(ws.require(ws.candidates, "validate"), "validate/candidates.jsonl")
    records = read_log(ws.records("filter"))
    status = [records[c.item_id].get("status") if c.item_id in records else None for c in candidates]
    return FilterCoverage(len(candidates), sum(s not in (None, "ok") for s in status), status.count(None))


def item_sample(item: BenchItem, source: SourceImage) -> Sample:
    """The evaluation sample of a candidate (what ``evaluate`` would load from the released metadata)."""
    return Sample(
        index=0,
        question_id=item.item_id,
        image=source.image,
        image_path=source.image,
        question=item.question,
        options=item.options,
        answer=item.answer,
        category=item.subset,
        key=item.item_id,
    )


STEP, DESC = "filter", "difficulty filter"


@dataclass(frozen=True)
class FilterSpec:
    """The filter's models: ``solvers`` (model -> endpoint), the judge, ``attempts`` per model and when an item is
    dropped (``drop_when``: :data:`DROP_RULES`)."""

    solvers: Mapping[str, Endpoint]
    judge_model: str
    judge: Endpoint
    attempts: int = 1
    drop_when: str = "all"
    separate_attempt_requests: bool = False


class FilterWork(StepItems[BenchItem]):
    """One candidate: per model ``{"solved", "attempts"}`` (or ``{"error", "attempts"}``), the number of models
    that solved it and whether it is dropped."""

    def __init__(
        self,
        run: BenchStepRun,
        records: dict[str, Any],
        spec: FilterSpec,
        models: dict[str, SingleModelSolver],
        judge: AnswerJudge,
        sources: dict[str, SourceImage],
    ):
        super().__init__(run, records)
        self.spec, self.models, self.judge, self.sources = spec, models, judge, sources
        self.threshold = drop_threshold(spec.drop_when, len(spec.solvers))

    def key(self, item: BenchItem) -> str:
        return item.item_id

    async def _model(self, name: str, sample: Sample, prev: dict | None) -> JSONObject:
        if prev is not None and "solved" in prev:
            return prev  # judged in an earlier run
        attempts = self.spec.attempts
        rec = await check_collage(sample, self.models[name], self.judge, attempts, (prev or {}).get("attempts"))
        rec.pop("sample_key", None)
        return rec

    async def work(self, item: BenchItem, emit: Emit) -> JSONObject:
        meter = unit_meter()
        sample = item_sample(item, self.sources[item.image_key])
        prev = self.previous(item).get("models") or {}
        names = list(self.spec.solvers)
        results = await asyncio.gather(*(self._model(n, sample, prev.get(n)) for n in names))
        models = dict(zip(names, results))
        errors = {n: r["error"] for n, r in models.items() if "solved" not in r}
        solved = sum(bool(r.get("solved")) for r in models.values())
        usage = meter.to_dict()
        rec = {
            "sample_key": item.item_id,
            "status": "failed" if errors else "ok",
            "models": models,
            "n_solved": solved,
            "dropped": None if errors else solved >= self.threshold,
            "usage": usage,
            "cost_usd": self.run.priced(usage),
        }
        if errors:
            rec["error"] = "; ".join(f"{n}: {e}" for n, e in errors.items())[:2000]
        return self.carried(rec)

    def failed(self, item: BenchItem, reason: str) -> JSONObject:
        models = self.previous(item).get("models") or {}
        return self.carried({"sample_key": item.item_id, "status": "failed", "models": models, "error": reason})


def _filter_work(
    run: BenchStepRun, records: dict[str, Any], spec: FilterSpec, sources: dict[str, SourceImage], clients: Clients
) -> FilterWork:
    """The solvers and the judge, their clients and image store closed with ``clients``."""
    images = ImageStore.for_image_workers(run.settings.controls.image_workers, originals_cached=0)
    clients.on_close(images.close)
    kwargs = {**DEFAULT_COMPLETION_KWARGS, **run.settings.chat_completion_kwargs}
    models: dict[str, SingleModelSolver] = {}
    for model, ep in spec.solvers.items():
        models[model] = SingleModelSolver(
            step_client(clients, run.settings, ep, model),
            model,
            images,
            Resize.fit(api_image_max_pixels(model)),
            system_prompt=None,
            completion_kwargs=kwargs,
            image_url_extra={"detail": "high"},
            separate_trial_requests=spec.separate_attempt_requests,
        )
    judge = AnswerJudge(step_client(clients, run.settings, spec.judge, "judge"), spec.judge_model)
    return FilterWork(run, records, spec, models, judge, sources)


def _summary(
    ws: Workspace, spec: FilterSpec, candidates: list[BenchItem], records: dict[str, Any], order: list[str]
) -> JSONObject:
    """The step's counts (``order``: the keys of this run), and ``kept.jsonl`` / ``dropped.jsonl`` written (of
    every candidate, a ``--limit`` run's included)."""
    out = step_summary(STEP, records, order)
    threshold = drop_threshold(spec.drop_when, len(spec.solvers))
    recs = [records[it.item_id] for it in candidates if it.item_id in records]
    done = [r for r in recs if r.get("status") == "ok"]
    by_count = Counter(r["n_solved"] for r in done)
    per_model = Counter(n for r in done for n, m in r["models"].items() if m.get("solved"))
    kept = [it for it in candidates if records.get(it.item_id, {}).get("dropped") is False]
    dropped = [it for it in candidates if records.get(it.item_id, {}).get("dropped") is True]
    write_jsonl_atomic(ws.kept, [it.to_dict() for it in kept])
    write_jsonl_atomic(ws.dropped, [it.to_dict() for it in dropped])
    out.update(
        candidates=len(candidates),
        kept=len(kept),
        dropped=len(dropped),
        pending=len(candidates) - len(kept) - len(dropped),
        drop_when=spec.drop_when,
        threshold=threshold,
        models=list(spec.solvers),
        solved_by_n_models={str(k): by_count.get(k, 0) for k in range(len(spec.solvers) + 1)},
        solved_per_model={m: per_model.get(m, 0) for m in spec.solvers},
    )
    return out


async def filter_candidates(
    run: BenchStepRun, spec: FilterSpec, sources: dict[str, SourceImage], items: list[BenchItem]
) -> JobResult[JSONObject]:
    """Every candidate not judged yet answered by each solver; ``kept.jsonl`` and ``dropped.jsonl`` written."""
    todo = limited(items, run.settings.limit)
    with open_step(run, STEP) as (rd, log):
        async with Clients(rd.guard) as clients:
            work = _filter_work(run, log.records, spec, sources, clients)
            await execute_retried(rd, todo, work, clients, desc=DESC)
        order = [it.item_id for it in todo]
        summary = _summary(run.ws, spec, items, log.records, order)
        close_step(run, STEP, log, order, summary)
    return JobResult(summary, int(summary["failed"]))
