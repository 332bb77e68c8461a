"""What the model-calling steps of the data engine share, around :func:`insight_o3.jobs.execute.execute`.

A step runs in the work directory (:func:`open_step`) (its lock is the directory's: one step at a time), with its
own record log ``<step>/records.jsonl`` keyed by the chain's key and its card ``<step>/step_card.json`` (the
settings its first run fixed, one history entry per run, the totals over all records). A record is final when its
status is one of its step's final statuses (:class:`EngineItems`); a ``failed`` one (an API error after the SDK's retries) is asked
again by the next run, keeping what the earlier attempts cost (``usage_earlier``, ``cost_usd_earlier``), so totals and
budgets stay true. After the run the log is rewritten in the order of the items (then records of items outside the
run), so a run killed and resumed writes the same bytes as one that was not.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from openai import AsyncOpenAI

from ..base.json_types import JSONObject
from ..endpoints.rate_limit import AdaptiveLimiter
from ..endpoints.usage import CostModel, UsageMeter
from ..imaging.images import ImageStore
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS
from ..jobs.integrity import FIXED_KEY, HISTORY_KEY, Invocation
from ..jobs.retried import RetriedItems, compact_keeping, totals
from ..jobs.run_directory import RunDirectory, open_run
from ..storage.atomic import write_json_atomic
from ..storage.jsonl import iter_jsonl
from ..storage.record_log import RecordLog
from .settings import ModelAccess
from .workspace import EngineInputError, WorkDir

#: How a user runs a step (what a message names as the command to run first).
PROG = "python -m insight_o3.scripts.build_reasoning_data"

ItemT = TypeVar("ItemT")


#: The name a step's run holds the work directory's lock under (``build_reasoning_data <step>``).
PROG_NAME = "build_reasoning_data"


@dataclass(frozen=True)
class EngineRun:
    """What a step's run is given besides its own settings: the work directory, the run's controls, the price
    model (``cost_usd`` of records, ``--max_cost``), what a first run's card holds besides the fixed settings
    (model, prompts) and the invocation (the settings the step's first run fixes)."""

    ws: WorkDir
    controls: RunControls
    invocation: Invocation
    card: JSONObject
    cost_model: CostModel | None = None

    def priced(self, usage: JSONObject) -> float | None:
        return self.cost_model.cost(usage) if self.cost_model is not None else None


class EngineItems(RetriedItems[ItemT]):
    """A step's per-item protocol, what the steps share: a record is final when its status is one of
    ``final_statuses`` and carries what the records it replaces cost (:class:`~insight_o3.jobs.retried.RetriedItems`);
    a failure is recorded as ``failed`` (asked again by the next run); ``records``: the step's log, as loaded."""

    def __init__(self, run: EngineRun, records: dict[str, Any], final_statuses: tuple[str, ...] = ("ok",)):
        super().__init__(records)
        self.run, self.final_statuses = run, final_statuses

    def is_final(self, record: Any) -> bool:
        return isinstance(record, dict) and record.get("status") in self.final_statuses

    def base(self, unit: ItemT) -> JSONObject:
        """The fields every record of ``unit`` starts with."""
        return {"sample_key": self.key(unit)}

    def failed(self, unit: ItemT, reason: str) -> JSONObject:
        return self.carried({**self.base(unit), "status": "failed", "error": reason})

    def with_usage(self, record: JSONObject, meter: UsageMeter) -> JSONObject:
        """``record`` with the usage of its unit's requests and their cost, :meth:`carried`."""
        usage = meter.to_dict()
        return self.carried({**record, "usage": usage, "cost_usd": self.run.priced(usage)})


def engine_client(clients: Clients, controls: RunControls, ep: ModelAccess, role: str) -> AsyncOpenAI:
    """A client of ``ep`` reporting to the run guard behind an adaptive limiter, closed with ``clients``."""
    n = controls.concurrency
    return clients.client(ep.api, role=role, max_connections=max(16, 2 * n), limiter=AdaptiveLimiter(n))


def engine_images(clients: Clients, controls: RunControls) -> ImageStore:
    """The image store of a step that sends images (generate, score): PNG views on white, the workers of
    ``--image_workers``, the last two originals kept decoded; closed with ``clients``."""
    images = ImageStore.for_image_workers(controls.image_workers, fmt="PNG", alpha="white", originals_cached=2)
    clients.on_close(images.close)
    return images


@contextmanager
def open_step(run: EngineRun, step: str) -> Iterator[tuple[RunDirectory, RecordLog]]:
    """``with open_step(run, "check") as (run_dir, log):`` — the step's run under the work directory's lock (one
    step at a time) with its log ``<step>/records.jsonl`` and its card ``<step>/step_card.json``."""
    root = str(run.ws.root)
    logs = [f"{step}/records.jsonl"]
    store = CardFile.under(root, f"{step}/step_card.json", logs)
    price = run.cost_model.cost if run.cost_model is not None else None
    with open_run(
        root,
        f"{PROG_NAME} {step}",
        run.controls,
        store=store,
        invocation=run.invocation,
        card=run.card,
        change_hint="use another work directory to run with other settings",
        price=price,
    ) as rd:
        run.ws.step(step).mkdir(parents=True, exist_ok=True)
        yield rd, rd.open_logs({RECORDS: logs[0]})[RECORDS]


def step_summary(step: str, records: dict[str, Any], order: list[str]) -> JSONObject:
    """What every step's summary starts with: its items and how many records have each status."""
    recs = [records[k] for k in order if k in records]
    counts = Counter(str(r.get("status")) for r in recs)
    return {"step": step, "items": len(order), **dict(sorted(counts.items()))}


def close_step(run: EngineRun, step: str, log: RecordLog, order: list[str], summary: JSONObject) -> None:
    """The step's log compacted (:func:`~insight_o3.jobs.retried.compact_keeping`) and ``<step>/step_card.json``
    written: what the step ran with and what all its records cost (the fixed settings and the history kept)."""
    compact_keeping(log, order)
    path = run.ws.card(step)
    try:
        old = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    card = {
        "step": step,
        **run.card,
        "summary": summary,
        "totals": totals(log.records),
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
