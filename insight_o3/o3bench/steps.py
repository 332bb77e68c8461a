"""What the model-calling steps of an O3-Bench build share, around :func:`insight_o3.jobs.execute.execute`.

A step runs in the workspace directory (:func:`open_step`) (its lock is the workspace's: one step at a time),
with its own record log ``<step>/records.jsonl``. This module adds what the three steps (``extract``,
``synthesize``, ``filter``) have in common: the settings (:class:`StepSettings`, one per command line), clients
behind an adaptive rate limiter, token usage and cost per record (and so ``--max_cost``), ``--limit``, records
kept for items outside a limited run, and the step card (``<step>/step_card.json``: model, prompts' sha256,
settings, totals over all records, and the job's ``history``: one entry per run, however it ended — finished,
stopped by a budget or the guard, interrupted by a signal, or ``unfinished`` when killed — with its wall time,
records, tokens and cost, see :mod:`insight_o3.jobs.run_history`).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, Generic, TypeVar

from openai import AsyncOpenAI

from ..base.json_types import JSONObject
from ..endpoints.chat import NoChoice, chat_once
from ..endpoints.endpoint import Endpoint
from ..endpoints.rate_limit import AdaptiveLimiter
from ..endpoints.usage import CostModel
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import RECORDS
from ..jobs.integrity import FIXED_KEY, HISTORY_KEY, Invocation
from ..jobs.retried import RetriedItems, compact_keeping, totals
from ..jobs.run_directory import RunDirectory, open_run
from ..storage.atomic import write_json_atomic
from ..storage.record_log import RecordLog
from .records import BuildFileError
from .workspace import PROG, PROG_NAME, Workspace

#: Record statuses that are final (others run again).
FINAL_STATUSES = ("ok",)

ItemT = TypeVar("ItemT")
ParsedT = TypeVar("ParsedT")


def model_card(model: str, endpoint: Endpoint) -> JSONObject:
    """What a step card says of a model and where it is served (never the key)."""
    return {"model": model, **endpoint.public()}


@dataclass(frozen=True, kw_only=True)
class StepSettings:
    """The run settings of one step (the command line's shared flags; each endpoint carries its own timeout and
    retries)."""

    rpm: float | None = None
    tpm: float | None = None
    adaptive_concurrency: bool = True
    parse_retries: int = 2
    retry_failed: bool = True
    limit: int | None = None
    chat_completion_kwargs: dict = field(default_factory=dict)
    controls: RunControls = field(default_factory=RunControls)

    def public(self) -> JSONObject:
        """The settings as the step card lists them (the run controls among them)."""
        out = asdict(self)
        return {**out.pop("controls"), **out}


@dataclass(frozen=True)
class Asked(Generic[ParsedT]):
    """What :meth:`StepItems.ask_parsed` got: the parsed reply (None when no attempt gave one), the last reply's
    text, the attempts made and why the last one was not taken."""

    parsed: ParsedT | None
    reply: str
    attempts: int
    reason: str


@dataclass(frozen=True)
class BenchStepRun:
    """What a step's run is given besides its own settings: the workspace, the step's settings, the price model
    (``cost_usd`` of records, ``--max_cost``), what its step card says of the run (model, prompts) and its
    invocation (the settings the step's first run that succeeds fixes)."""

    ws: Workspace
    settings: StepSettings
    cost_model: CostModel | None = None
    card: JSONObject = field(default_factory=dict)
    invocation: Invocation | None = None

    def priced(self, usage: dict) -> float | None:
        return self.cost_model.cost(usage) if self.cost_model is not None else None


class StepItems(RetriedItems[ItemT]):
    """A step's per-item protocol, what the three steps share: a record is final when its ``status`` is ``"ok"``
    (failed ones are retried by the next run unless ``retry_failed`` is off) and carries what the records it replaces
    cost (:class:`~insight_o3.jobs.retried.RetriedItems`); ``records``: the step's log, as loaded."""

    def __init__(self, run: BenchStepRun, records: dict[str, Any]):
        super().__init__(records)
        self.run, self.s = run, run.settings

    def is_final(self, record: Any) -> bool:
        return record.get("status") in FINAL_STATUSES or not self.s.retry_failed

    def previous(self, unit: ItemT) -> JSONObject:
        """The stored record of ``unit`` ({} when none)."""
        return self.records.get(self.key(unit)) or {}

    async def ask_parsed(
        self,
        api: Any,
        model: str,
        messages: list[JSONObject],
        parse: Callable[[str], Awaitable[ParsedT]],
    ) -> Asked[ParsedT]:
        """Ask ``model`` behind ``api`` up to ``1 + parse_retries`` times until ``parse`` takes the reply (it raises ``ValueError`` on
        one it cannot use; a coroutine function, so a parse may do CPU-heavy work off the event loop); a
        reply without a choice or cut off at the token limit is asked again the same way. API errors raise (the
        run records the item as failed)."""
        reason, reply = "", ""
        for attempt in range(1, self.s.parse_retries + 2):
            try:
                c = await chat_once(api, model, messages, **self.s.chat_completion_kwargs)
            except NoChoice as e:
                reason, reply = str(e), ""
                continue
            reply = c.text
            if c.finish_reason == "length":
                reason = "the reply was cut off at the token limit"
                continue
            try:
                return Asked(await parse(reply), reply, attempt, "")
            except ValueError as e:
                reason = str(e)
        return Asked(None, reply, self.s.parse_retries + 1, reason)


def step_client(clients: Clients, s: StepSettings, ep: Endpoint, role: str) -> AsyncOpenAI:
    """A client of ``ep`` reporting to the run guard, behind its own adaptive limiter (or ``--rpm``/``--tpm``),
    closed with ``clients``."""
    n = s.controls.concurrency
    limiter = AdaptiveLimiter(n, s.rpm, s.tpm) if s.adaptive_concurrency or s.rpm or s.tpm else None
    return clients.client(ep, role=role, max_connections=max(16, 2 * n), limiter=limiter)


def limited(items: list, limit: int | None) -> list:
    """The items of a ``--limit`` run (the first N)."""
    return items if limit is None else items[:limit]


def _succeeded(record: Any) -> bool:
    return isinstance(record, dict) and record.get("status") in FINAL_STATUSES


@contextmanager
def open_step(run: BenchStepRun, step: str) -> Iterator[tuple[RunDirectory, RecordLog]]:
    """``with open_step(run, "extract") as (run_dir, log):`` — the step's run under the workspace's lock (one step
    at a time) with its log ``<step>/records.jsonl``. The step card fixes the settings with the first run that
    writes a *succeeded* record: a run whose every item failed (a wrong model name, a refused key) fixes nothing,
    so the next run may change them."""
    ws = run.ws
    root = str(ws.root)
    store = CardFile(str(ws.step_card(step)), [str(ws.records(step))], fixes=_succeeded)
    price = run.cost_model.cost if run.cost_model is not None else None  # the run's history entry, as its records
    command = f"{PROG_NAME} {step}"
    with open_run(root, command, run.settings.controls, store=store, invocation=run.invocation, price=price) as rd:
        os.makedirs(ws.step(step), exist_ok=True)
        yield rd, rd.open_logs({RECORDS: os.path.join(step, "records.jsonl")})[RECORDS]


def step_summary(step: str, records: dict[str, Any], order: list[str]) -> JSONObject:
    """The counts every step's summary starts with: its items, those ok and those failed (exit status 1)."""
    recs = [records[k] for k in order if k in records]
    counts = Counter(r.get("status") for r in recs)
    return {
        "step": step,
        "items": len(order),
        "ok": counts.get("ok", 0),
        "failed": sum(n for s, n in counts.items() if s not in FINAL_STATUSES),
    }


def close_step(run: BenchStepRun, step: str, log: RecordLog, order: list[str], summary: dict) -> None:
    """The step's log compacted (:func:`~insight_o3.jobs.retried.compact_keeping`) and ``<step>/step_card.json``
    written: what the step ran with and what all its records cost (the settings fixed by the step's first run and
    the history of its runs are kept)."""
    compact_keeping(log, order)
    old = read_step_card(run.ws, step) or {}
    card = {
        "step": step,
        **run.card,
        "settings": run.settings.public(),
        "summary": summary,
        "totals": totals(log.records),
        **{k: old[k] for k in (FIXED_KEY, HISTORY_KEY) if k in old},
    }
    write_json_atomic(run.ws.step_card(step), card)


class InputNotReady(BuildFileError):
    """A step with nothing to do because the step before it has not produced its input yet (status 2); the
    message names the command to run first."""


def step_command(ws: Workspace, step: str) -> str:
    """The command line of ``step`` in ``ws``, with the model (and endpoint) of its last run where its step card
    has one (``MODEL`` otherwise), for a message that says what to run first."""
    cmd = f"{PROG} {step} --output_dir {ws.root}"
    if step not in ("extract", "synthesize", "filter"):
        return cmd
    card = read_step_card(ws, step) or {}
    if step == "filter":
        models = [m for m in card.get("models") or [] if isinstance(m, dict)]
        solvers = [",".join(x for x in (m.get("model"), m.get("api_base_url")) if x) for m in models]
        return cmd + "".join(f" --solver {s}" for s in solvers or ["MODEL"])
    model = card.get("model")
    if not isinstance(model, dict):
        model = {}
    cmd += f" --model {model.get('model') or 'MODEL'}"
    return cmd + (f" --api_base_url {model['api_base_url']}" if model.get("api_base_url") else "")


def read_step_card(ws: Workspace, step: str) -> JSONObject | None:
    try:
        with open(ws.step_card(step), encoding="utf-8") as f:
            card = json.load(f)
    except (OSError, ValueError):
        return None
    return card if isinstance(card, dict) else None


def read_log(path: str | os.PathLike) -> dict[str, JSONObject]:
    """The records of a step's log by ``sample_key`` (last line of a key wins; a torn last line is skipped), for
    the steps that read another step's results. Missing file: empty."""
    out: dict[str, dict] = {}
    try:
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
    except FileNotFoundError:
        return out
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            rec = json.loads(raw)
        except ValueError:
            if i >= len(lines) - 2:
                continue  # a torn last line of an interrupted run
            raise ValueError(f"{path}:{i + 1}: corrupt record") from None
        if isinstance(rec, dict) and "sample_key" in rec:
            out[str(rec["sample_key"])] = rec
    return out
