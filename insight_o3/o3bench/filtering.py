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
from ..jobs.job import Emit, Plan
from ..protocol.sample import Sample
from ..storage.atomic import write_jsonl_atomic
from .records import BenchItem, SourceImage, read_items
from .steps import StepJob, StepSettings, read_log
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


class BenchFilterJob(StepJob[BenchItem]):
    """One record per candidate: per model ``{"solved", "attempts"}`` (or ``{"error", "attempts"}``), the number of
    models that solved it and whether it is dropped."""

    step = "filter"
    desc = "difficulty filter"

    def __init__(
        self,
        workspace: Workspace,
        settings: StepSettings,
        solvers: Mapping[str, Endpoint],
        judge_model: str,
        judge: Endpoint,
        sources: dict[str, SourceImage],
        *,
        attempts: int = 1,
        drop_when: str = "all",
        separate_attempt_requests: bool = False,
        **kw: Any,
    ) -> None:
        super().__init__(workspace, settings, **kw)
        self.solvers, self.judge_model, self.judge_ep, self.sources = dict(solvers), judge_model, judge, sources
        self.attempts, self.drop_when = attempts, drop_when
        self.threshold = drop_threshold(drop_when, len(solvers))
        self.separate = separate_attempt_requests
        self.candidates: list[BenchItem] = []

    def key(self, item: BenchItem) -> str:
        return item.item_id

    def plan(self, items: list[BenchItem]) -> Plan:
        self.candidates = list(items)
        return super().plan(items)

    async def setup(self) -> None:
        images = ImageStore.for_image_workers(self.s.controls.image_workers, originals_cached=0)
        self.on_close(images.close)
        kwargs = {**DEFAULT_COMPLETION_KWARGS, **self.s.chat_completion_kwargs}
        self.models: dict[str, SingleModelSolver] = {}
        for model, ep in self.solvers.items():
            client = self.endpoint_client(ep, model, self.limiter())
            self.models[model] = SingleModelSolver(
                client,
                model,
                images,
                Resize.fit(api_image_max_pixels(model)),
                system_prompt=None,
                completion_kwargs=kwargs,
                image_url_extra={"detail": "high"},
                separate_trial_requests=self.separate,
            )
        judge_client = self.endpoint_client(self.judge_ep, "judge", self.limiter())
        self.judge = AnswerJudge(judge_client, self.judge_model)

    async def _model(self, name: str, sample: Sample, prev: dict | None) -> JSONObject:
        if prev is not None and "solved" in prev:
            return prev  # judged in an earlier run
        rec = await check_collage(sample, self.models[name], self.judge, self.attempts, (prev or {}).get("attempts"))
        rec.pop("sample_key", None)
        return rec

    async def work(self, item: BenchItem, emit: Emit) -> JSONObject:
        meter = self.meter()
        sample = item_sample(item, self.sources[item.image_key])
        prev = (self.previous(item) or {}).get("models") or {}
        names = list(self.solvers)
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
            "cost_usd": self.priced(usage),
        }
        if errors:
            rec["error"] = "; ".join(f"{n}: {e}" for n, e in errors.items())[:2000]
        return rec

    def failed(self, item: BenchItem, reason: str) -> JSONObject:
        prev = self.previous(item) or {}
        return {"sample_key": item.item_id, "status": "failed", "models": prev.get("models") or {}, "error": reason}

    def summary(self) -> JSONObject:
        out = super().summary()
        recs = [self.records[it.item_id] for it in self.candidates if it.item_id in self.records]
        done = [r for r in recs if r.get("status") == "ok"]
        by_count = Counter(r["n_solved"] for r in done)
        per_model = Counter(n for r in done for n, m in r["models"].items() if m.get("solved"))
        kept = [it for it in self.candidates if self.records.get(it.item_id, {}).get("dropped") is False]
        dropped = [it for it in self.candidates if self.records.get(it.item_id, {}).get("dropped") is True]
        write_jsonl_atomic(self.ws.kept, [it.to_dict() for it in kept])
        write_jsonl_atomic(self.ws.dropped, [it.to_dict() for it in dropped])
        out.update(
            candidates=len(self.candidates),
            kept=len(kept),
            dropped=len(dropped),
            pending=len(self.candidates) - len(kept) - len(dropped),
            drop_when=self.drop_when,
            threshold=self.threshold,
            models=list(self.solvers),
            solved_by_n_models={str(k): by_count.get(k, 0) for k in range(len(self.solvers) + 1)},
            solved_per_model={m: per_model.get(m, 0) for m in self.solvers},
        )
        return out
