"""What the model-calling steps of the data engine share, on top of :class:`insight_o3.jobs.job.ResumableJob`.

A step runs as a resumable job over the work directory (its lock is the directory's: one step at a time), with its
own record log ``<step>/records.jsonl`` keyed by the chain's key and its card ``<step>/step_card.json`` (the
settings its first run fixed, one history entry per run, the totals over all records). A record is final when its
status is one of :attr:`EngineJob.final_statuses`; a ``failed`` one (an API error after the SDK's retries) is asked
again by the next run, keeping what the earlier attempts cost (``usage_earlier``, ``cost_usd_earlier``), so totals and
budgets stay true. After the run the log is rewritten in the order of the items (then records of items outside the
run), so a run killed and resumed writes the same bytes as one that was not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Hashable
from pathlib import Path
from typing import Any, TypeVar

from openai import AsyncOpenAI

from ..base.json_types import JSONObject
from ..endpoints.rate_limit import AdaptiveLimiter
from ..endpoints.usage import CostModel, UsageMeter, merge, metering, total_tokens
from ..jobs.controls import RunControls
from ..jobs.integrity import FIXED_KEY, HISTORY_KEY, Invocation
from ..jobs.job import Plan, ResumableJob
from ..storage.atomic import write_json_atomic
from ..storage.jsonl import iter_jsonl
from .settings import ModelAccess
from .workspace import EngineInputError, WorkDir

#: How a user runs a step (what a message names as the command to run first).
PROG = "python -m insight_o3.scripts.build_reasoning_data"

ItemT = TypeVar("ItemT")


def record_spend(record: Any, earlier: bool = False) -> tuple[int, float]:
    """(tokens, dollars) of a record's ``usage`` and ``cost_usd`` (``earlier``: plus those of the records it
    replaced)."""
    if not isinstance(record, dict):
        return 0, 0.0
    tokens, cost = total_tokens(record.get("usage")), float(record.get("cost_usd") or 0.0)
    if earlier:
        tokens += total_tokens(record.get("usage_earlier"))
        cost += float(record.get("cost_usd_earlier") or 0.0)
    return tokens, cost


class EngineJob(ResumableJob[ItemT, JSONObject]):
    """Base of the model-calling steps; subclasses set :attr:`step`, :meth:`key`, :meth:`work`, :meth:`summary`."""

    step: str = ""
    final_statuses: tuple[str, ...] = ("ok",)

    def __init__(
        self,
        ws: WorkDir,
        run: RunControls,
        *,
        invocation: Invocation,
        card: JSONObject,
        cost_model: CostModel | None = None,
    ):
        super().__init__(
            str(ws.root),
            run,
            invocation=invocation,
            card=card,
            price=cost_model.cost if cost_model is not None else None,
        )
        self.ws, self.run_controls, self.cost_model = ws, run, cost_model
        self.card = dict(card)
        self.command = f"build_reasoning_data {self.step}"
        self.records_file = f"{self.step}/records.jsonl"
        self.card_file = f"{self.step}/step_card.json"
        self.change_hint = "use another work directory to run with other settings"
        self.order: list[str] = []

    # -- ResumableJob hooks
    def prepare(self) -> None:
        self.ws.step(self.step).mkdir(parents=True, exist_ok=True)

    def is_final(self, record: Any) -> bool:
        return isinstance(record, dict) and record.get("status") in self.final_statuses

    def plan(self, items: list[ItemT]) -> Plan:
        self.order = [self.key(it) for it in items]
        return super().plan(items)

    def failed(self, unit: Any, reason: str) -> JSONObject:
        return {**self.base(unit), "status": "failed", "error": reason}

    def spend(self, record: Any) -> tuple[int, float]:
        return record_spend(record)

    def spent_before(self) -> tuple[int, float]:
        spent = [record_spend(r, earlier=True) for r in self.records.values()]
        return sum(t for t, _ in spent), sum(c for _, c in spent)

    async def emit(self, record: Any, log: Hashable = "records") -> bool:
        old = self.records.get(str(record.get("sample_key"))) if isinstance(record, dict) else None
        if isinstance(old, dict) and (old.get("usage") or old.get("usage_earlier")):
            record["usage_earlier"] = merge([old.get("usage"), old.get("usage_earlier")])
            c0, c1 = old.get("cost_usd"), old.get("cost_usd_earlier")
            if c0 is not None or c1 is not None:
                record["cost_usd_earlier"] = round(float(c0 or 0.0) + float(c1 or 0.0), 8)
        return await super().emit(record, log=log)

    def finish(self) -> JSONObject:
        order = self.order + [k for k in self.records if k not in set(self.order)]
        self.compact(order)
        summary = self.summary()
        self.write_card(summary)
        return summary

    def incomplete(self, summary: JSONObject) -> int:
        return int(summary.get("failed", 0))

    # -- for the steps
    def base(self, unit: Any) -> JSONObject:
        """The fields every record of ``unit`` starts with."""
        return {"sample_key": self.key(unit)}

    def summary(self) -> JSONObject:
        recs = [self.records[k] for k in self.order if k in self.records]
        counts = Counter(str(r.get("status")) for r in recs)
        return {"step": self.step, "items": len(self.order), **dict(sorted(counts.items()))}

    def endpoint_client(self, ep: ModelAccess, role: str) -> AsyncOpenAI:
        """A client of ``ep`` reporting to the run guard behind an adaptive limiter, closed at the end."""
        n = self.run_controls.concurrency
        return self.client(ep.api, role=role, max_connections=max(16, 2 * n), limiter=AdaptiveLimiter(n))

    @staticmethod
    def meter() -> UsageMeter:
        """A usage meter for the current unit (every request of it reports there)."""
        m = UsageMeter()
        metering(m)
        return m

    def priced(self, usage: JSONObject) -> float | None:
        return self.cost_model.cost(usage) if self.cost_model is not None else None

    def with_usage(self, record: JSONObject, meter: UsageMeter) -> JSONObject:
        usage = meter.to_dict()
        return {**record, "usage": usage, "cost_usd": self.priced(usage)}

    def write_card(self, summary: JSONObject) -> None:
        """``<step>/step_card.json``: what the step ran with and what all its records cost (the fixed settings and
        the history kept)."""
        path = self.ws.card(self.step)
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            old = {}
        recs = [r for r in self.records.values() if isinstance(r, dict)]
        usage = merge([merge([r.get("usage"), r.get("usage_earlier")]) for r in recs])
        costs = [record_spend(r, earlier=True)[1] for r in recs if r.get("cost_usd") is not None]
        card = {
            "step": self.step,
            **self.card,
            "summary": summary,
            "totals": {
                "records": len(recs),
                "usage": usage,
                "tokens_total": total_tokens(usage),
                "cost_usd": round(sum(costs), 6) if costs else None,
            },
            **{k: old[k] for k in (FIXED_KEY, HISTORY_KEY) if isinstance(old, dict) and k in old},
        }
        write_json_atomic(path, card)


def read_records(path: Path, made_by: str) -> dict[str, JSONObject]:
    """The records of a step's log by key, in file order (the last line of a key wins). A step reads another's log
    under the directory's lock, so that one is not running; a torn last line (a step killed mid-write) is reported
    with the step to rerun, which drops it."""
    out: dict[str, JSONObject] = {}
    try:
        for where, _, rec in iter_jsonl(path, EngineInputError, what=f"'{made_by}' records"):
            if "sample_key" not in rec:
                raise EngineInputError(f"{where}: a record without 'sample_key'")
            out[str(rec["sample_key"])] = rec
    except EngineInputError as e:
        raise EngineInputError(f"{e} (rerun '{PROG} {made_by}' to resume and repair it)") from None
    return out
