"""The work of one run over items: :func:`execute` runs a :class:`Plan`'s units through a command's
:class:`ItemWork` inside a run directory (:func:`~insight_o3.jobs.run_directory.open_run`)::

    with open_run(out_dir, command, controls, store=..., invocation=...) as run:    # lock, card, history entry
        logs = run.open_logs({RECORDS: "records.jsonl"})                            # a torn last line dropped
        plan = left(items, work, logs[RECORDS])                                     # what is not final yet
        async with Clients(run.guard) as clients:
            work.api = clients.client(endpoint, role="model")                       # checked before the first item
            await execute(run, plan, work, clients, desc="items")                   # bounded, durable, budgeted
        summary = ...                                                               # compaction, outputs
    return JobResult(summary, incomplete)

A command's :class:`ItemWork` says per unit: its key, whether a stored record is final, the work, the record of a
failure, and what a record cost. What :func:`execute` guarantees, for every command alike:

* every finished item is one fsync'ed line before the next starts being counted
  (:class:`~insight_o3.storage.record_log.RecordLog`, one writer thread), so a crash loses nothing finished;
* before work starts, one line per log says where the run stands ("N of M done, K left"; :attr:`Plan.where`: per
  trial for an evaluation);
* every endpoint (:class:`~insight_o3.jobs.clients.Clients`) is checked before the first item
  (:mod:`insight_o3.endpoints.preflight`: unreachable, key refused or a named key variable unset -> status 4),
  unless ``check_endpoints`` is off (``--skip_endpoint_check``) or nothing is left to do;
* a 401/403/404 or too many failed requests (:class:`~insight_o3.endpoints.guard.RunGuard`, the run's) stops the
  run: work in flight is cancelled and not recorded;
* a budget (``max_cost`` / ``max_tokens_total``) stops starting new items; those in flight are recorded;
  then :class:`~insight_o3.jobs.budget.BudgetExceeded` is raised. It counts what :meth:`ItemWork.spend` says each
  record cost (earlier runs included: ``spent_before``) plus the tokens of every request made while a unit's work
  ran (this run only: records of the data tools carry no usage);
* at most ``concurrency`` items in flight; a progress bar counting records (``--no_progress`` hides it);
* the run's history entry (:class:`~insight_o3.jobs.run_directory.RunDirectory`) gets its spend every half second
  in which it changed, so a SIGKILL leaves its spend there;
* a failure of one item (:data:`insight_o3.endpoints.errors.EXPECTED_ERRORS`) becomes that item's record when
  :meth:`ItemWork.failed` says how (retried by the next run), never a lost run.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from tqdm.auto import tqdm

from ..base.exit_codes import ExitCode
from ..base.redaction import failure_reason
from ..endpoints.errors import EXPECTED_ERRORS
from ..endpoints.guard import RunStopped, gather_or_stop
from ..endpoints.preflight import acheck_endpoints
from ..endpoints.usage import UsageMeter, metering, metering_run, total_tokens
from ..storage.record_log import RecordLog
from .budget import Budget
from .clients import Clients
from .run_directory import RunDirectory

log = logging.getLogger(__name__)

UnitT = TypeVar("UnitT")
SummaryT = TypeVar("SummaryT")
#: The default record log of a run with one.
RECORDS = "records"
#: What an item's failure may be recorded with (a tripped guard's error included: that record is dropped).
RECORDED_ERRORS: tuple[type[Exception], ...] = (*EXPECTED_ERRORS, RunStopped)

#: ``await emit(record, log=name)``: append a record durably (False, nothing written, once the run is stopping).
Emit = Callable[..., Awaitable[bool]]


class ItemWork(abc.ABC, Generic[UnitT]):
    """What :func:`execute` needs of a command, per unit of work."""

    @abc.abstractmethod
    def key(self, unit: UnitT) -> str:
        """The ``sample_key`` of the unit's record in the default log."""

    def is_final(self, record: Any) -> bool:
        """Whether a stored record is done for good (otherwise its unit runs again)."""
        return True

    @abc.abstractmethod
    async def work(self, unit: UnitT, emit: Emit) -> Any | None:
        """Do one unit; return its record for the default log, or None when it wrote its records itself with
        ``await emit(record, log=name)`` (records of other logs, or written as they come)."""

    def failed(self, unit: UnitT, reason: str) -> Any | None:
        """The record of a unit whose work raised one of :data:`RECORDED_ERRORS` (``reason`` redacted);
        None: the error propagates (a programming error always does)."""
        return None

    def spend(self, record: Any) -> tuple[int, float]:
        """(tokens, dollars) a record cost, charged to the budget (nothing by default)."""
        return 0, 0.0


@dataclass
class Plan:
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


def unit_meter() -> UsageMeter:
    """A usage meter of the current unit's own requests (every client request of the task reports to it; it
    replaces the one :func:`execute` gave the unit)."""
    m = UsageMeter()
    metering(m)
    return m


def record_status(record: Any) -> str | None:
    """The status the progress bar counts a record under: its ``status`` field."""
    return record.get("status") if isinstance(record, dict) else getattr(record, "status", None)


def left(items: list[UnitT], work: ItemWork[UnitT], records: RecordLog) -> Plan:
    """The plan of a run with one record per item in ``records``: the items whose record is missing or not final."""
    stored = records.records
    units: list[UnitT] = []
    initial: list[str | None] = []
    for it in items:
        k = work.key(it)
        if k in stored and work.is_final(stored[k]):
            initial.append(record_status(stored[k]))
        else:
            units.append(it)
    return Plan(units, len(items), initial)


def spent(work: ItemWork, logs: Mapping[Hashable, RecordLog]) -> tuple[int, float]:
    """What the records of ``logs`` cost (:meth:`ItemWork.spend` of each): what earlier runs spent."""
    costs = [work.spend(r) for lg in logs.values() for r in lg.records.values()]
    return sum(t for t, _ in costs), sum(c for _, c in costs)


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


async def execute(
    run: RunDirectory,
    plan: Plan,
    work: ItemWork,
    clients: Clients,
    *,
    desc: str,
    postfix: Callable[[Counter, int], dict] | None = None,
    spent_before: Callable[[], tuple[int, float]] | None = None,
) -> Counter:
    """Run ``plan``'s units through ``work`` into ``run``'s logs (the module docstring says how); ``desc``: the
    progress bar's label, ``postfix``: its postfix from the status counts and the number done; ``spent_before``:
    what earlier runs spent (default: :func:`spent` over the loaded records). Returns the statuses of the records
    this run wrote; raises :class:`~insight_o3.jobs.budget.BudgetExceeded` when a budget stopped it."""
    done = len(plan.initial)
    for line in plan.where or [f"{desc}: {done} of {plan.total} done, {plan.total - done} left"]:
        log.info("%s", line)
    c = run.controls
    budget = Budget(c.max_cost, c.max_tokens_total)
    if plan.units:
        budget.charge(*(spent_before() if spent_before is not None else spent(work, run.logs)))
    progress = Progress(desc, plan.total, plan.initial, c.progress, postfix)
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="records")
    ex = _Execution(run, work, budget, progress, writer)
    keeper = asyncio.create_task(run.keep_entry(writer)) if run.settled else None
    try:
        if plan.units and c.check_endpoints:
            await acheck_endpoints(clients.endpoints)
        sem = asyncio.Semaphore(c.concurrency)
        await gather_or_stop((ex.one(u, sem) for u in plan.units), run.guard)
    finally:
        if keeper is not None:
            keeper.cancel()
            await asyncio.gather(keeper, return_exceptions=True)
        progress.close()
        writer.shutdown(wait=True)
    if budget.exceeded is not None:
        raise budget.exceeded
    return progress.new


class _Execution:
    """One :func:`execute`: a unit's work, its records written and counted, its spend charged."""

    def __init__(
        self, run: RunDirectory, work: ItemWork, budget: Budget, progress: Progress, writer: ThreadPoolExecutor
    ):
        self.run, self.work, self.budget, self.progress, self.writer = run, work, budget, progress, writer

    async def one(self, unit: Any, sem: asyncio.Semaphore) -> None:
        async with sem:
            if self.budget.exceeded is not None:
                return  # budget reached: start nothing new (a rerun with a higher budget resumes)
            meter = unit_meter()  # this unit's requests (work that meters its own, as the evaluation, replaces it)
            spent = self.run.tally.unit()
            metering_run(spent)  # every reply of this unit, for the run's history entry (recorded or not)
            try:
                out = await self.work.work(unit, self.emit)
            except asyncio.CancelledError:
                raise
            except RECORDED_ERRORS as e:
                out = self.work.failed(unit, failure_reason(e, 2000))
                if out is None:
                    raise
            await _to_the_end(self._conclude(out, spent, meter))

    async def _conclude(self, out: Any, spent: UsageMeter, meter: UsageMeter) -> None:
        """The unit's record written, then counted with its spend (as recorded only when written)."""
        if out is None or await self.emit(out):
            self.run.tally.done(spent)
        self.budget.charge(total_tokens(meter.to_dict()))

    async def emit(self, record: Any, log: Hashable = RECORDS) -> bool:
        """Append ``record`` to log ``log`` durably (in the writer thread), count it and charge its cost.
        Returns False, writing nothing, once the run is stopping (the record may carry the failure that
        stopped it). A record handed to the writer is written and counted even when the run is cancelled
        meanwhile (SIGINT/SIGTERM): the run's history entry counts every record it wrote."""
        if self.run.guard.tripped:
            return False
        return await _to_the_end(self._write(record, log))

    async def _write(self, record: Any, log: Hashable) -> bool:
        await asyncio.get_running_loop().run_in_executor(self.writer, self.run.logs[log].append, record)
        status = record_status(record)
        self.progress.add(status)
        self.budget.charge(*self.work.spend(record))
        self.run.tally.recorded(status)
        return True


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
