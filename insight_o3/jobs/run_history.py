"""Every run of a directory in its card's ``history``, however it ends — the run entry of :mod:`.integrity`.

:func:`~.integrity.settle` appends one entry per invocation (its time, command, provenance and operational
settings) before anything else is written. A :class:`~.run_directory.RunDirectory` keeps that entry up to date:

* at the start it says ``"status": "started"``;
* while the run works, every :data:`FLUSH_S` seconds in which it recorded or spent something (a reply counts
  before its item's record is written), the entry gets what the run has spent so far (:meth:`RunTally.fields`),
  written atomically in the record writer's thread, after the records it counts — so a run killed by SIGKILL,
  which nothing can catch, leaves an entry that says ``started`` with its spend as of its last half second;
* however it ends it gets its :class:`RunStatus`, the reason (a stop's or a failure's message), its wall time, its
  spend and its requests per endpoint;
* the next run of the directory (under its lock, so no run is alive) marks an entry still ``started`` as
  ``unfinished`` and logs a warning with its last recorded spend (:func:`close_unfinished`).

The spend of a run (:meth:`RunTally.fields`) counts every request whose reply arrived — including those of units
whose work never ended with a record (in flight when the run stopped, or ended by an error: ``tokens_unrecorded``)
— and ``requests_unanswered``: requests sent whose reply never came (cancelled by the stop; the server may still
bill them).
"""

from __future__ import annotations

import asyncio
import enum
import logging
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from ..endpoints.guard import RunGuard, RunStopped
from ..endpoints.usage import UsageMeter, merge, total_tokens
from .integrity import HISTORY_KEY

log = logging.getLogger(__name__)

#: Seconds between two updates of a working run's entry (a SIGKILL loses at most this much of its spend record).
FLUSH_S = 0.5


class RunStatus(str, enum.Enum):
    """How a run ended, as its history entry says."""

    STARTED = "started"  # working (or killed without a chance to say so: see UNFINISHED)
    FINISHED = "finished"  # every item was tried (some may have failed records: exit status 1)
    STOPPED = "stopped"  # a deliberate stop: a budget, a 401/403/404, too many failed requests, the endpoint check
    INTERRUPTED = "interrupted"  # SIGINT / SIGTERM
    FAILED = "failed"  # an error ended it (bad input found late, a programming error)
    UNFINISHED = "unfinished"  # found "started" by a later run: killed (SIGKILL), crashed or the machine stopped


class RunTally:
    """What one run has done and spent: records written per status, and the usage of every request whose reply
    arrived, per unit of work (:meth:`unit`: a meter fed by every client request of that unit's task through
    :func:`~insight_o3.endpoints.usage.metering_run`); a unit's usage counts as recorded once its work ended with
    its record written (:meth:`done`), else — cancelled by a stop or a signal, or ended by an error — as
    ``unrecorded``."""

    def __init__(self, price: Callable[[dict], float | None] | None = None):
        self.started = time.monotonic()  # wall time elapsed: a clock stepped back never makes it negative
        self.records: Counter = Counter()
        self.price = price
        self._done = UsageMeter()  # the usage of the units whose work ended with their record
        self._open: dict[int, UsageMeter] = {}  # the units at work (or cancelled)

    def unit(self) -> UsageMeter:
        """A new unit's meter (make it the task's run meter)."""
        meter = UsageMeter()
        self._open[id(meter)] = meter
        return meter

    def done(self, meter: UsageMeter) -> None:
        """The unit of ``meter`` ended with its record written."""
        if self._open.pop(id(meter), None) is not None:
            for role, counts in meter.to_dict().items():
                self._done.add(role, counts)

    def recorded(self, status: str | None) -> None:
        self.records[str(status)] += 1

    def fields(self, guard: RunGuard) -> dict[str, Any]:
        """The entry's spend fields as of now."""
        unrecorded = merge([m.to_dict() for m in self._open.values()])
        usage = merge([self._done.to_dict(), unrecorded])
        cost = self.price(usage) if self.price is not None else None
        ledger = guard.ledger()
        return {
            "updated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "wall_s": round(time.monotonic() - self.started, 3),
            "new_records": dict(self.records),
            "usage": usage,
            "tokens": total_tokens(usage),
            "tokens_unrecorded": total_tokens(unrecorded),
            "cost_usd": None if cost is None else round(cost, 6),
            "requests_unanswered": sum(int(c.get("unanswered", 0)) for c in ledger.values()),
            "endpoints": ledger,
        }


def close_unfinished(card: dict, where: str) -> None:
    """Mark the entries of ``card``'s history still ``started`` (their run ended without saying how) as
    ``unfinished``, with a warning naming each and its last recorded spend. Call only under the directory's lock."""
    for entry in card.get(HISTORY_KEY) or []:
        if isinstance(entry, dict) and entry.get("status") == RunStatus.STARTED.value:
            entry["status"] = RunStatus.UNFINISHED.value
            log.warning(
                "%s: the run started at %s did not finish (killed by SIGKILL, crashed or the machine stopped); as "
                "last recorded (%s) it wrote %s record(s) and spent %s token(s), $%s",
                where,
                entry.get("at"),
                entry.get("updated", "at its start"),
                sum((entry.get("new_records") or {}).values()),
                entry.get("tokens", 0),
                entry.get("cost_usd"),
            )


def ended(error: BaseException | None) -> RunStatus:
    """The status of a run that ended with ``error`` (None: it finished)."""
    if error is None:
        return RunStatus.FINISHED
    if isinstance(error, RunStopped):  # a budget, the guard, the endpoint check
        return RunStatus.STOPPED
    if isinstance(error, (KeyboardInterrupt, asyncio.CancelledError)):  # SIGINT/SIGTERM cancel the run
        return RunStatus.INTERRUPTED
    return RunStatus.FAILED
