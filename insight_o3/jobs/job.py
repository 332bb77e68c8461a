"""One resumable run over items — the mechanism every long command shares.

A :class:`ResumableJob` is the one implementation of::

    lock the directory -> open the record logs (a torn last line dropped) -> plan what is left
    -> run guard, budget, clients -> bounded concurrency -> records appended durably as items finish
    -> compaction -> summary -> exit code

A command's spec is small: what an item's key is (:meth:`~ResumableJob.key`), the per-item work
(:meth:`~ResumableJob.work`), the summary (:meth:`~ResumableJob.finish`), and where its directory keeps the card
and what it holds (a :class:`CardStore`, given to the constructor: a :class:`CardFile` by default, the
evaluation's :class:`~insight_o3.evaluation.run_dir.RunDir`). Optional hooks: which stored record is final
(:meth:`~ResumableJob.is_final`), what to write before the logs open (:meth:`~ResumableJob.prepare`,
:meth:`~ResumableJob.collect`), the record logs (:meth:`~ResumableJob.log_files`) and a custom plan
(:meth:`~ResumableJob.plan`, e.g. the evaluation's one log per trial: a :class:`Plan` says what is left and, with
``where``, how to say so), the clients it needs (:meth:`~ResumableJob.setup`, with :meth:`~ResumableJob.client` and
:meth:`~ResumableJob.on_close`), what a recorded failure looks like (:meth:`~ResumableJob.failed`), what a record
cost (:meth:`~ResumableJob.spend`, :meth:`~ResumableJob.spent_before`) and how many items are not done
(:meth:`~ResumableJob.incomplete`); and two values, :attr:`~ResumableJob.record_parser` (how a stored line becomes
a record) and :attr:`~ResumableJob.progress_postfix`. ``work`` returns one thing: the unit's record for the
default log, or None when it wrote its records itself through ``emit``. ``job.run(items)`` returns a
:class:`JobResult` whose :attr:`~JobResult.exit_code` is ``INCOMPLETE`` while items are still failed.

What the job guarantees, for every command alike:

* one run per directory (:mod:`insight_o3.storage.lock`: a second run exits with status 5);
* a directory's settings are fixed by its first run that writes a record (:mod:`insight_o3.jobs.integrity`;
  the store's ``wrote_records``): a job whose
  :meth:`~ResumableJob.invocation` says what it runs with is refused (status 2, nothing written) when a
  result-changing setting differs from the first run's; otherwise the run is appended to the card's history
  (the store) before anything else is written; a run asking for less than the directory holds (fewer trials) is
  refused the same way (the store's ``held``);
* every finished item is one fsync'ed line before the next starts being counted
  (:class:`~insight_o3.storage.record_log.RecordLog`, one writer thread), so a crash loses nothing finished;
* every endpoint (the clients made with :meth:`~ResumableJob.client`, and those given) is checked before the
  first item (:mod:`insight_o3.endpoints.preflight`: unreachable, key refused or a named key variable unset -> status 4),
  unless ``check_endpoints`` is off (``--skip_endpoint_check``) or nothing is left to do;
* a 401/403/404 or too many failed requests (:class:`~insight_o3.endpoints.guard.RunGuard`, shared by the clients
  made with :meth:`~ResumableJob.client`) stops the run: work in flight is cancelled and not recorded;
* a budget (``max_cost`` / ``max_tokens_total``) stops starting new items; those in flight are recorded;
  then :class:`BudgetExceeded` is raised. It counts what :meth:`~ResumableJob.spend` says each record cost
  (earlier runs included: the evaluation's records carry their usage) plus the tokens of every request
  made while a unit's work ran (this run only: records of the data tools carry no usage);
* before work starts, one line per log says where the run stands ("N of M done, K left"; :attr:`Plan.where`: per
  trial for an evaluation);
* at most ``concurrency`` items in flight; a progress bar counting records (``--no_progress`` hides it);
* every run is an entry of the card's history (:mod:`insight_o3.jobs.run_history`): ``started`` before the first
  item, its spend so far written every half second in which it changed (so a SIGKILL leaves its spend there),
  and however it ends its status (finished, stopped, interrupted, failed), reason, wall time, spend — the replies
  of items it never recorded and the requests left unanswered included, priced by the constructor's ``price`` — and
  requests per endpoint (ok, failed, replies escaped or without valid usage) (:meth:`~ResumableJob.record_run`);
  the next run marks an entry left ``started`` as ``unfinished``, with a warning;
* a failure of one item (:data:`insight_o3.endpoints.errors.EXPECTED_ERRORS`) becomes that item's record when
  :meth:`~ResumableJob.failed` says how (retried by the next run), never a lost run.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from openai import AsyncOpenAI
from tqdm.auto import tqdm

from ..base.exit_codes import ExitCode
from ..base.json_types import JSONObject
from ..base.redaction import failure_reason
from ..endpoints.client import make_client
from ..endpoints.endpoint import Endpoint
from ..endpoints.errors import EXPECTED_ERRORS
from ..endpoints.guard import RunGuard, RunStopped, gather_or_stop
from ..endpoints.preflight import Called, acheck_endpoints
from ..endpoints.usage import UsageMeter, metering, metering_run, total_tokens
from ..storage.atomic import write_json_atomic
from ..storage.lock import run_lock
from ..storage.record_log import RecordLog, has_lines
from .controls import RunControls
from .integrity import HISTORY_KEY, Invocation, read_card, settle
from .run_history import FLUSH_S, RunStatus, RunTally, close_unfinished, ended

log = logging.getLogger(__name__)

ItemT = TypeVar("ItemT")
SummaryT = TypeVar("SummaryT")
#: The default record log of a job with one.
RECORDS = "records"
#: What an item's failure may be recorded with (a tripped guard's error included: that record is dropped).
RECORDED_ERRORS: tuple[type[Exception], ...] = (*EXPECTED_ERRORS, RunStopped)


class BudgetExceeded(RunStopped):
    """``--max_cost`` / ``--max_tokens_total`` reached: no new work started, work in flight recorded."""

    resume_hint = None  # not "rerun the same command": the same budget stops again (``str()`` says what to do)

    def __init__(self, what: str, used: float, limit: float):
        super().__init__(what, used, limit)
        self.what, self.used, self.limit = what, used, limit

    def __str__(self) -> str:
        flag = "--max_cost" if self.what == "cost" else "--max_tokens_total"
        used = f"${self.used:.4f}" if self.what == "cost" else f"{int(self.used)} tokens"
        return (
            f"budget reached: {used} used, {flag} {self.limit:g}; stopped starting new samples "
            f"(rerun with a higher {flag} to resume)"
        )


class Budget:
    """Tokens and dollars spent against the limits (None: no limit); trips once, on the first limit reached."""

    def __init__(self, max_cost: float | None = None, max_tokens_total: int | None = None):
        self.max_cost, self.max_tokens_total = max_cost, max_tokens_total
        self.tokens, self.cost = 0, 0.0
        self.exceeded: BudgetExceeded | None = None

    def charge(self, tokens: int = 0, cost: float = 0.0) -> None:
        self.tokens += tokens
        self.cost += cost
        if self.exceeded is not None:
            return
        if self.max_cost is not None and self.cost >= self.max_cost:
            self.exceeded = BudgetExceeded("cost", self.cost, self.max_cost)
        elif self.max_tokens_total is not None and self.tokens >= self.max_tokens_total:
            self.exceeded = BudgetExceeded("tokens", self.tokens, self.max_tokens_total)


class Progress:
    """A progress bar over records, with counts per status (``postfix`` turns them into the bar's postfix)."""

    def __init__(
        self,
        desc: str,
        total: int,
        initial: Iterable[str | None] = (),
        enabled: bool = True,
        postfix: Callable[[Counter, int], dict] | None = None,
    ):
        self.counts: Counter = Counter(initial)  # statuses of every record, earlier runs included
        self.new: Counter = Counter()  # statuses of the records of this run
        self.done = sum(self.counts.values())
        self.postfix = postfix
        self.bar = tqdm(total=total, initial=self.done, desc=desc, disable=not enabled, dynamic_ncols=True)
        self._show()

    def _show(self) -> None:
        if self.postfix is not None:
            self.bar.set_postfix(**self.postfix(self.counts, self.done), refresh=False)

    def add(self, status: str | None) -> None:
        self.counts[status] += 1
        self.new[status] += 1
        self.done += 1
        self._show()
        self.bar.update(1)

    def close(self) -> None:
        self.bar.close()


@dataclass
class Plan(Generic[ItemT]):
    """What a run does: the ``units`` of work left, the records the bar counts in all (``total``), the
    statuses of those already final (``initial``) and the lines logged before work starts (``where``; None:
    one "<desc>: N of M done, K left")."""

    units: list
    total: int
    initial: list[str | None] = field(default_factory=list)
    where: list[str] | None = None


@dataclass
class JobResult(Generic[SummaryT]):
    """How a run ended: its summary and how many items are still not done (failed or lost)."""

    summary: SummaryT
    incomplete: int = 0

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.INCOMPLETE if self.incomplete else ExitCode.OK


Emit = Callable[..., Awaitable[bool]]


class CardStore(Protocol):
    """Where a job keeps its card — the settings its directory's first run fixed and the history of its runs
    (:mod:`insight_o3.jobs.integrity`) — and what its directory holds. :class:`CardFile` is the default; an
    evaluation's :class:`~insight_o3.evaluation.run_dir.RunDir` is another (its ``run_card.json``, format-checked;
    its trials)."""

    def card_path(self) -> str: ...

    def check(self) -> None:
        """Raise for a directory this run must not write into (what it holds is another run's); called once, before
        the card is read and anything is written."""
        ...

    def read_card(self) -> JSONObject | None:
        """The stored card (None: the directory's first run)."""
        ...

    def write_card(self, card: dict) -> None: ...

    def held(self) -> dict[str, int]:
        """What the directory already holds of each :data:`~insight_o3.jobs.integrity.Kind.EXTENT` setting
        (a run asking for less is refused), e.g. ``{"num_trials": 3}``."""
        ...

    def wrote_records(self) -> bool:
        """Whether an earlier run wrote a record (until one has, the next run's settings are the fixed ones)."""
        ...


class CardFile:
    """A card in a JSON file of its own (its directory made on the first write), beside the record logs at
    ``logs``. ``fixes``: which records fix the directory's settings (default: any; a builder step's: a succeeded
    one, so a run whose every item failed — a wrong model name — leaves the next run free to change them)."""

    def __init__(self, path: str, logs: Iterable[str] = (), fixes: Callable[[Any], bool] | None = None):
        self.path = path
        self.logs = list(logs)
        self.fixes = fixes

    def card_path(self) -> str:
        return self.path

    def check(self) -> None:
        """Nothing to check: the card's settings check (:func:`~insight_o3.jobs.integrity.settle`) is all."""

    def read_card(self) -> JSONObject | None:
        return read_card(self.path)

    def write_card(self, card: dict) -> None:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)  # a card in a subdirectory (build_o3_bench)
        write_json_atomic(self.path, card)

    def held(self) -> dict[str, int]:
        return {}

    def wrote_records(self) -> bool:
        if self.fixes is None:
            return any(has_lines(f) for f in self.logs)
        return any(self.fixes(rec) for f in self.logs for rec in _stored_records(f))


def _stored_records(path: str) -> Iterator[Any]:
    """The whole JSON lines of a record log (a torn or unreadable line skipped: it fixes nothing)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    yield json.loads(line)
                except ValueError:
                    continue
    except OSError:
        return


class ResumableJob(Generic[ItemT, SummaryT]):
    """Base of every resumable command; see the module docstring for the flow and the hooks."""

    #: Names the run in the lock file (``RunLockedError`` shows it) and in logs.
    command: str = "job"
    #: The progress bar's label.
    desc: str = "items"
    #: The file of the default record log, under :attr:`directory`.
    records_file: str = "records.jsonl"
    #: The card holding the settings fixed by the directory's first run and the history of its runs
    #: (None: ``<records_file without .jsonl>_card.json``).
    card_file: str | None = None
    #: What the refusal of changed settings advises.
    change_hint: str = "use another --output_dir to run with other settings"
    #: How a stored line of every log becomes a record: ``parse(obj, "<file>:<line>")`` (None: the dict as is).
    record_parser: Callable[[dict, str], Any] | None = None
    #: The progress bar's postfix from the status counts and the number done (None: none).
    progress_postfix: Callable[[Counter, int], dict] | None = None

    def __init__(
        self,
        directory: str,
        controls: RunControls | None = None,
        *,
        guard: RunGuard | None = None,
        invocation: Invocation | None = None,
        endpoints: Iterable[Called] = (),
        store: CardStore | None = None,
        card: dict | None = None,
        price: Callable[[dict], float | None] | None = None,
        entry_fields: Callable[[], JSONObject] | None = None,
    ):
        """``store``: where the card lives and what the directory holds (None: a :class:`CardFile` at
        :attr:`card_file`); ``card``: what a first run's card holds besides the fixed settings and the history;
        ``price``: the dollars of a usage dict (per role), for the run's history entry (None: no prices);
        ``entry_fields``: more fields of the run's history entry, asked each time it is written (what a store
        outside the job did, e.g. the prepared-image cache's hits)."""
        self.directory = os.fspath(directory)
        self._invocation = invocation
        self._store, self._card = store, card
        self.endpoints: list[Called] = list(endpoints)  # + one per client made with :meth:`client`
        self.controls = controls or RunControls()
        self.guard = guard if guard is not None else RunGuard(self.controls.max_failure_ratio)
        self.budget = Budget(self.controls.max_cost, self.controls.max_tokens_total)
        self.logs: dict[Hashable, RecordLog] = {}
        self.progress: Progress | None = None
        self._closers: list[Callable[[], Any]] = []
        self._writer: ThreadPoolExecutor | None = None
        self.price = price
        self.entry_fields = entry_fields
        self.tally = RunTally(price)  # this run's records and spend (its history entry; remade by arun)
        self._settled = False  # whether this run has a history entry to keep up to date

    # ------------------------------------------------------------------------------------------- hooks
    def invocation(self) -> Invocation | None:
        """This run's command and settings (:mod:`insight_o3.jobs.integrity`; by default the one given to the
        constructor); None: nothing is fixed or recorded."""
        return self._invocation

    def prepare(self) -> None:
        """Under the lock, before the logs open: write ``args.json``, check settings, make directories."""

    def collect(self, items: list[ItemT]) -> list[ItemT]:
        """Under the lock, after :meth:`prepare`: the items to run (those given, by default); a job that
        reads its inputs under the lock (and writes what it derived) does it here."""
        return items

    def log_files(self) -> dict[Hashable, str]:
        """The record logs: name -> path (relative to :attr:`directory` unless absolute)."""
        return {RECORDS: self.records_file}

    def key(self, item: ItemT) -> str:
        """The ``sample_key`` of an item's record in the default log."""
        raise NotImplementedError

    def is_final(self, record: Any) -> bool:
        """Whether a stored record is done for good (otherwise the item runs again)."""
        return True

    def plan(self, items: list[ItemT]) -> Plan:
        """What is left: by default the items whose default-log record is missing or not final."""
        records = self.logs[RECORDS].records
        final = [records[k] for k in map(self.key, items) if k in records and self.is_final(records[k])]
        units = [it for it in items if not (self.key(it) in records and self.is_final(records[self.key(it)]))]
        return Plan(units, len(items), [self.status(r) for r in final])

    async def setup(self) -> None:
        """Make the clients/stores the work needs (:meth:`client`, :meth:`on_close`); runs inside the loop."""

    async def work(self, unit: Any, emit: Emit) -> Any | None:
        """Do one unit; return its record for the default log, or None when it wrote its records itself with
        ``await emit(record, log=name)`` (records of other logs, or written as they come)."""
        raise NotImplementedError

    def failed(self, unit: Any, reason: str) -> Any:
        """The record of a unit whose work raised one of :data:`RECORDED_ERRORS` (``reason`` redacted);
        None: the error propagates (a programming error always does)."""
        return None

    def spend(self, record: Any) -> tuple[int, float]:
        """(tokens, dollars) a record cost, charged to the budget (nothing by default)."""
        return 0, 0.0

    def spent_before(self) -> tuple[int, float]:
        """What earlier runs spent: by default :meth:`spend` over every loaded record."""
        spent = [self.spend(r) for lg in self.logs.values() for r in lg.records.values()]
        return sum(t for t, _ in spent), sum(c for _, c in spent)

    def finish(self) -> SummaryT:
        """After all work: compact the logs (:meth:`compact`) and return the summary."""
        raise NotImplementedError

    def incomplete(self, summary: SummaryT) -> int:
        """How many items are not done yet (exit code 1 when any)."""
        return 0

    # ----------------------------------------------------------------------------------- for the hooks
    def store(self) -> CardStore:
        """Where the card lives: the one given to the constructor, else a :class:`CardFile` at :attr:`card_file`
        (default ``<records_file without .jsonl>_card.json``) beside the record logs."""
        if self._store is not None:
            return self._store
        card = self.card_file or os.path.splitext(self.records_file)[0] + "_card.json"
        return CardFile(self.path(card), [self.path(f) for f in self.log_files().values()])

    def status(self, record: Any) -> str | None:
        """The status the progress bar counts a record under: its ``status`` field."""
        return record.get("status") if isinstance(record, dict) else getattr(record, "status", None)

    @property
    def records(self) -> dict[str, Any]:
        """The default log's records by key."""
        return self.logs[RECORDS].records

    def previous(self, item: ItemT) -> Any:
        """The stored record of ``item`` in the default log, or None."""
        return self.records.get(self.key(item))

    def path(self, name: str) -> str:
        return name if os.path.isabs(name) else os.path.join(self.directory, name)

    def compact(self, order: list[str], name: Hashable = RECORDS) -> None:
        """Rewrite log ``name`` with one line per key, in ``order`` (keys not in it are dropped)."""
        self.logs[name].compact(order)

    def client(self, endpoint: Endpoint, *, role: str = "model", **kwargs: Any) -> AsyncOpenAI:
        """A client of ``endpoint`` reporting to this run's guard (see :func:`insight_o3.endpoints.client.make_client`),
        closed at the end; the endpoint is checked before the first item."""
        self.endpoints.append((role, endpoint))
        c = make_client(endpoint, role=role, guard=self.guard, **kwargs)
        self.on_close(c.close)
        return c

    def on_close(self, close: Callable[[], Any]) -> None:
        """Call ``close`` (a function or a coroutine function) when the work is over."""
        self._closers.append(close)

    # ---------------------------------------------------------------------------------------- the run
    def run(self, items: Iterable[ItemT]) -> JobResult[SummaryT]:
        """:meth:`arun` in a new event loop (for synchronous commands)."""
        return asyncio.run(self.arun(items))

    async def arun(self, items: Iterable[ItemT]) -> JobResult[SummaryT]:
        """The whole run under the directory's lock (:class:`~insight_o3.storage.lock.RunLockedError` if held)."""
        items = list(items)
        with run_lock(self.directory, self.command):
            self.tally = RunTally(self.price)
            self._settled = self.settle_settings()
            error: BaseException | None = None
            try:
                self.prepare()
                items = self.collect(items)
                try:
                    self._open_logs()
                    plan = self.plan(items)
                    done = len(plan.initial)
                    for line in plan.where or [f"{self.desc}: {done} of {plan.total} done, {plan.total - done} left"]:
                        log.info("%s", line)
                    if plan.units:
                        self.budget.charge(*self.spent_before())
                    await self._execute(plan)
                    if self.budget.exceeded is not None:
                        raise self.budget.exceeded
                    summary = self.finish()
                finally:
                    self._close_logs()
            except BaseException as e:
                error = e
                raise
            finally:
                if self._settled:
                    self.record_run(error)
        return JobResult(summary, self.incomplete(summary))

    def _update_entry(self, fields: dict) -> None:
        """Update this run's entry (the last) of the card's history with ``fields``; a failure is logged, never
        raised (it must not end a run nor hide how one ended)."""
        store = self.store()
        try:
            card = store.read_card()
            history = card.get(HISTORY_KEY) if card else None
            if not card or not isinstance(history, list) or not history or not isinstance(history[-1], dict):
                return
            history[-1].update(fields)
            store.write_card(card)
        except Exception as e:  # noqa: BLE001 - see the docstring
            log.warning("could not record this run in %s: %s", store.card_path(), e)

    def _entry_now(self) -> dict[str, Any]:
        """The run's history entry fields as of now: its spend and requests (:class:`RunTally`) and
        ``entry_fields``."""
        fields = self.tally.fields(self.guard)
        if self.entry_fields is not None:
            try:
                fields.update(self.entry_fields())
            except Exception as e:  # noqa: BLE001 - a report must not end a run nor hide how one ended
                log.warning("could not report %r for the run's history entry: %s", self.entry_fields, e)
        return fields

    def record_run(self, error: BaseException | None) -> None:
        """However the run ends: its status, the reason (a stop's or an error's message, redacted), its spend and
        its requests per endpoint — URL, ok, failed, unanswered, and the replies :mod:`insight_o3.base.untrusted`
        had to escape or whose usage was invalid or missing (:meth:`~insight_o3.endpoints.guard.RunGuard.ledger`)
        — go into its entry of the card's history, and a warning names the endpoints whose replies needed
        either."""
        status = ended(error)
        fields = {"status": status.value, **self._entry_now()}
        if status in (RunStatus.STOPPED, RunStatus.FAILED) and error is not None:
            fields["reason"] = failure_reason(error, 500)
        self._update_entry(fields)
        for role, c in fields["endpoints"].items():
            if c["escaped_replies"] or c["missing_usage"]:
                log.warning(
                    "%s endpoint: %d repl(ies) with text escaped, %d without valid usage (%d invalid); counted in %s",
                    role,
                    c["escaped_replies"],
                    c["missing_usage"],
                    c["invalid_usage"],
                    self.store().card_path(),
                )

    def settle_settings(self) -> bool:
        """Refuse a run whose result-changing settings differ from the directory's first run's (nothing written:
        :class:`~insight_o3.jobs.integrity.SettingsChanged`); else record this run in the card's history.
        Returns whether a card was written."""
        inv = self.invocation()
        if inv is None:
            return False
        store = self.store()
        store.check()
        stored = store.read_card()
        if stored is not None:
            close_unfinished(stored, store.card_path())  # under the lock: no run of this directory is alive
        written = stored is not None and store.wrote_records()
        card = settle(
            stored,
            dict(self._card or {}),
            inv,
            where=store.card_path(),
            hint=self.change_hint,
            records_written=written,
            held=store.held(),
        )
        card[HISTORY_KEY][-1]["status"] = RunStatus.STARTED.value
        store.write_card(card)
        return True

    def _open_logs(self) -> None:
        for name, file in self.log_files().items():
            self.logs[name] = RecordLog.open(self.path(file), parse=self.record_parser)

    def _close_logs(self) -> None:
        for lg in self.logs.values():
            lg.close()

    async def _execute(self, plan: Plan) -> None:
        self.progress = Progress(self.desc, plan.total, plan.initial, self.controls.progress, self.progress_postfix)
        self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="records")
        sem = asyncio.Semaphore(self.controls.concurrency)

        async def one(unit: ItemT) -> None:
            async with sem:
                if self.budget.exceeded is not None:
                    return  # budget reached: start nothing new (a rerun with a higher budget resumes)
                meter = UsageMeter()
                metering(meter)  # this unit's requests (work that meters its own, as EvalJob, replaces it)
                spent = self.tally.unit()
                metering_run(spent)  # every reply of this unit, for the run's history entry (recorded or not)
                try:
                    out = await self.work(unit, self.emit)
                except asyncio.CancelledError:
                    raise
                except RECORDED_ERRORS as e:
                    out = self.failed(unit, failure_reason(e, 2000))
                    if out is None:
                        raise
                await _to_the_end(conclude(out, spent, meter))

        async def conclude(out: Any, spent: UsageMeter, meter: UsageMeter) -> None:
            """The unit's record written, then counted with its spend (as recorded only when written)."""
            if out is None or await self.emit(out):
                self.tally.done(spent)
            self.budget.charge(total_tokens(meter.to_dict()))

        keeper = asyncio.create_task(self._keep_entry()) if self._settled else None
        try:
            await self.setup()
            if plan.units and self.controls.check_endpoints:
                await acheck_endpoints(self.endpoints)
            await gather_or_stop((one(u) for u in plan.units), self.guard)
        finally:
            if keeper is not None:
                keeper.cancel()
                await asyncio.gather(keeper, return_exceptions=True)
            self.progress.close()
            await self._close_resources()
            self._writer.shutdown(wait=True)

    async def emit(self, record: Any, log: Hashable = RECORDS) -> bool:
        """Append ``record`` to log ``log`` durably (in the writer thread), count it and charge its cost.
        Returns False, writing nothing, once the run is stopping (the record may carry the failure that
        stopped it). A record handed to the writer is written and counted even when the run is cancelled
        meanwhile (SIGINT/SIGTERM): the run's history entry counts every record it wrote."""
        if self.guard.tripped:
            return False
        return await _to_the_end(self._write(record, log))

    async def _write(self, record: Any, log: Hashable) -> bool:
        assert self._writer is not None and self.progress is not None
        await asyncio.get_running_loop().run_in_executor(self._writer, self.logs[log].append, record)
        self.progress.add(self.status(record))
        self.budget.charge(*self.spend(record))
        self.tally.recorded(self.status(record))
        return True

    async def _keep_entry(self) -> None:
        """While the run works: every :data:`~.run_history.FLUSH_S` seconds in which it recorded or spent
        something, its history entry gets its spend so far (written in the record writer's thread, after the
        records it counts), so a SIGKILL loses at most the last interval's."""
        loop, last = asyncio.get_running_loop(), None
        while True:
            await asyncio.sleep(FLUSH_S)
            fields = self._entry_now()
            now = {k: v for k, v in fields.items() if k not in ("updated", "wall_s")}
            if now != last and self._writer is not None:
                await loop.run_in_executor(self._writer, self._update_entry, fields)
                last = now

    async def _close_resources(self) -> None:
        for close in reversed(self._closers):
            try:
                res = close()
                if inspect.isawaitable(res):
                    await res
            except Exception:  # noqa: BLE001 - closing must not hide how the run ended
                log.warning("closing %r failed", close, exc_info=True)
        self._closers.clear()


_T = TypeVar("_T")


async def _to_the_end(step: Awaitable[_T]) -> _T:
    """Await ``step`` to its end even when the awaiting task is cancelled meanwhile, then let the cancellation go
    on: a record written by the writer thread is counted in the same run (a cancellation between the write and its
    count would leave the record on disk but missing from the run's history entry)."""
    task = asyncio.ensure_future(step)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        await asyncio.wait({task})
        if not task.cancelled() and task.exception() is not None:
            log.warning("a record could not be written while the run was cancelled: %s", task.exception())
        raise
