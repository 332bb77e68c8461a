"""Records of the model-calling steps, whose failed items the next run asks again: a retried item's record carries
what the records it replaces cost (``usage_earlier`` / ``cost_usd_earlier``), so a step's totals and budgets stay
true. One implementation for the O3-Bench steps and the data engine's steps: :class:`RetriedItems` (the per-item
protocol's ``spend``, and :meth:`~RetriedItems.carried`), :func:`execute_retried` (earlier runs' spend with what each
record replaced), :func:`compact_keeping` and :func:`totals` (a step card's totals over all records)."""

from __future__ import annotations

from collections import Counter
from typing import Any, TypeVar

from ..base.json_types import JSONObject
from ..endpoints.usage import merge, total_tokens
from ..storage.record_log import RecordLog
from .clients import Clients
from .execute import RECORDS, ItemWork, execute, left
from .run_directory import RunDirectory

UnitT = TypeVar("UnitT")


def record_spend(record: Any, earlier: bool = False) -> tuple[int, float]:
    """(tokens, dollars) of a record's ``usage`` and ``cost_usd`` (``earlier``: plus what the records it replaced
    cost, ``usage_earlier`` / ``cost_usd_earlier``)."""
    if not isinstance(record, dict):
        return 0, 0.0
    tokens, cost = total_tokens(record.get("usage")), float(record.get("cost_usd") or 0.0)
    if earlier:
        tokens += total_tokens(record.get("usage_earlier"))
        cost += float(record.get("cost_usd_earlier") or 0.0)
    return tokens, cost


def all_usage(record: dict) -> JSONObject:
    """A record's usage including that of the records it replaced (a failed attempt retried later)."""
    return merge([record.get("usage"), record.get("usage_earlier")])


class RetriedItems(ItemWork[UnitT]):
    """A step's per-item protocol where a record costs what its ``usage`` says and carries what the records it
    replaces cost (:meth:`carried`); ``records``: the step's log by ``sample_key``, as loaded."""

    def __init__(self, records: dict[str, Any]):
        self.records = records

    def spend(self, record: Any) -> tuple[int, float]:
        return record_spend(record)  # a new record: what it cost itself (the replaced ones are already counted)

    def carried(self, record: JSONObject) -> JSONObject:
        """``record`` with what the record it replaces cost (a retried item: its earlier attempts' usage and cost
        kept, so totals and budgets stay true)."""
        old = self.records.get(str(record.get("sample_key")))
        if isinstance(old, dict) and (old.get("usage") or old.get("usage_earlier")):
            record["usage_earlier"] = all_usage(old)
            c0, c1 = old.get("cost_usd"), old.get("cost_usd_earlier")
            if c0 is not None or c1 is not None:
                record["cost_usd_earlier"] = round(float(c0 or 0.0) + float(c1 or 0.0), 8)
        return record


async def execute_retried(
    run: RunDirectory, items: list, work: RetriedItems, clients: Clients, *, desc: str
) -> Counter:
    """:func:`~insight_o3.jobs.execute.execute` over the items whose record in ``run``'s default log is not final;
    earlier runs' spend counts what each record and those it replaced cost."""
    records = work.records

    def before() -> tuple[int, float]:
        spent = [record_spend(r, earlier=True) for r in records.values()]
        return sum(t for t, _ in spent), sum(c for _, c in spent)

    return await execute(run, left(items, work, run.logs[RECORDS]), work, clients, desc=desc, spent_before=before)


def compact_keeping(log: RecordLog, order: list[str]) -> None:
    """Rewrite ``log`` in ``order`` (the keys of this run), then the records of items outside it (an earlier run
    without ``--limit``) kept: a run killed and resumed writes the same bytes as one that was not."""
    known = set(order)
    log.compact(order + [k for k in log.records if k not in known])


def totals(records: dict[str, Any]) -> JSONObject:
    """A step card's ``totals``: what all the records cost, those they replaced included."""
    recs = [r for r in records.values() if isinstance(r, dict)]
    usage = merge([all_usage(r) for r in recs])
    costs = [record_spend(r, earlier=True)[1] for r in recs if r.get("cost_usd") is not None]
    return {
        "records": len(recs),
        "usage": usage,
        "tokens_total": total_tokens(usage),
        "cost_usd": round(sum(costs), 6) if costs else None,
    }
