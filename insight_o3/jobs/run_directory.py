"""One run of a directory, opened around its work (:func:`open_run`; the work itself is
:func:`~insight_o3.jobs.execute.execute`). What it guarantees, for every command alike:

* one run per directory (:mod:`insight_o3.storage.lock`: a second run exits with status 5);
* a directory's settings are fixed by its first run that writes a record (:mod:`insight_o3.jobs.integrity`; the
  store's ``wrote_records``): a run whose invocation says what it runs with is refused (status 2, nothing written)
  when a result-changing setting differs from the first run's; otherwise the run is appended to the card's history
  (the :class:`~insight_o3.jobs.card_store.CardStore`) before anything else is written; a run asking for less than
  the directory holds (fewer trials) is refused the same way (the store's ``held``);
* the record logs open with a torn last line dropped (:class:`~insight_o3.storage.record_log.RecordLog`) and are
  closed however the run ends;
* every run is an entry of the card's history (:mod:`insight_o3.jobs.run_history`): ``started`` before the first
  item, its spend so far written every half second in which it changed (:meth:`RunDirectory.keep_entry`, so a
  SIGKILL leaves its spend there), and however it ends its status (finished, stopped, interrupted, failed),
  reason, wall time, spend — the replies of items it never recorded and the requests left unanswered included,
  priced by ``price`` — and requests per endpoint (ok, failed, replies escaped or without valid usage)
  (:meth:`RunDirectory.record_run`); the next run marks an entry left ``started`` as ``unfinished``, with a
  warning.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Hashable, Iterator, Mapping
from concurrent.futures import Executor
from contextlib import contextmanager
from typing import Any, TypeVar

from ..base.json_types import JSONObject
from ..base.redaction import failure_reason
from ..endpoints.guard import RunGuard
from ..storage.lock import run_lock
from ..storage.record_log import RecordLog
from .card_store import CardStore
from .controls import RunControls
from .integrity import HISTORY_KEY, Invocation, settle
from .run_history import FLUSH_S, RunStatus, RunTally, close_unfinished, ended

log = logging.getLogger(__name__)
_K = TypeVar("_K", bound=Hashable)

#: What the refusal of changed settings advises by default.
CHANGE_HINT = "use another --output_dir to run with other settings"


class RunDirectory:
    """A directory while one run holds it (made by :func:`open_run`): its controls, guard and record logs, and
    the run's history entry (:attr:`settled`: whether it has one) with its :attr:`tally`."""

    def __init__(
        self,
        directory: str,
        controls: RunControls,
        guard: RunGuard,
        store: CardStore | None,
        price: Callable[[dict], float | None] | None = None,
        entry_fields: Callable[[], JSONObject] | None = None,
    ):
        self.directory, self.controls, self.guard, self.store = directory, controls, guard, store
        self.entry_fields = entry_fields
        self.tally = RunTally(price)  # this run's records and spend (its history entry)
        self.logs: dict[Hashable, RecordLog] = {}
        self.settled = False

    def path(self, name: str) -> str:
        """``name`` under the directory (an absolute one as it is)."""
        return name if os.path.isabs(name) else os.path.join(self.directory, name)

    def open_logs(
        self, files: Mapping[_K, str], parse: Callable[[dict, str], Any] | None = None
    ) -> dict[Hashable, RecordLog]:
        """Open the record logs ``name -> file`` (relative to the directory unless absolute; a torn last line
        dropped); ``parse(obj, "<file>:<line>")`` makes a stored line a record (None: the dict as is)."""
        for name, file in files.items():
            self.logs[name] = RecordLog.open(self.path(file), parse=parse)
        return self.logs

    def close_logs(self) -> None:
        for lg in self.logs.values():
            lg.close()

    def settle(self, invocation: Invocation | None, card: dict | None, hint: str) -> None:
        """Refuse a run whose result-changing settings differ from the directory's first run's (nothing written:
        :class:`~insight_o3.jobs.integrity.SettingsChanged`); else record this run in the card's history."""
        if invocation is None:
            return
        store = self.store
        if store is None:
            raise ValueError("a run with an invocation needs a card store")
        store.check()
        stored = store.read_card()
        if stored is not None:
            close_unfinished(stored, store.card_path())  # under the lock: no run of this directory is alive
        written = stored is not None and store.wrote_records()
        new = settle(
            stored,
            dict(card or {}),
            invocation,
            where=store.card_path(),
            hint=hint,
            records_written=written,
            held=store.held(),
        )
        new[HISTORY_KEY][-1]["status"] = RunStatus.STARTED.value
        store.write_card(new)
        self.settled = True

    def update_entry(self, fields: dict) -> None:
        """Update this run's entry (the last) of the card's history with ``fields``; a failure is logged, never
        raised (it must not end a run nor hide how one ended)."""
        store = self.store
        if store is None:
            return
        try:
            card = store.read_card()
            history = card.get(HISTORY_KEY) if card else None
            if not card or not isinstance(history, list) or not history or not isinstance(history[-1], dict):
                return
            history[-1].update(fields)
            store.write_card(card)
        except Exception as e:  # noqa: BLE001 - see the docstring
            log.warning("could not record this run in %s: %s", store.card_path(), e)

    def entry_now(self) -> dict[str, Any]:
        """The run's history entry fields as of now: its spend and requests (:class:`RunTally`) and
        ``entry_fields``."""
        fields = self.tally.fields(self.guard)
        if self.entry_fields is not None:
            try:
                fields.update(self.entry_fields())
            except Exception as e:  # noqa: BLE001 - a report must not end a run nor hide how one ended
                log.warning("could not report %r for the run's history entry: %s", self.entry_fields, e)
        return fields

    async def keep_entry(self, writer: Executor) -> None:
        """While the run works: every :data:`~.run_history.FLUSH_S` seconds in which it recorded or spent
        something, its history entry gets its spend so far (written in the record ``writer``'s thread, after the
        records it counts), so a SIGKILL loses at most the last interval's."""
        loop, last = asyncio.get_running_loop(), None
        while True:
            await asyncio.sleep(FLUSH_S)
            fields = self.entry_now()
            now = {k: v for k, v in fields.items() if k not in ("updated", "wall_s")}
            if now != last:
                await loop.run_in_executor(writer, self.update_entry, fields)
                last = now

    def record_run(self, error: BaseException | None) -> None:
        """However the run ends: its status, the reason (a stop's or an error's message, redacted), its spend and
        its requests per endpoint — URL, ok, failed, unanswered, and the replies :mod:`insight_o3.base.untrusted`
        had to escape or whose usage was invalid or missing (:meth:`~insight_o3.endpoints.guard.RunGuard.ledger`)
        — go into its entry of the card's history, and a warning names the endpoints whose replies needed
        either."""
        status = ended(error)
        fields = {"status": status.value, **self.entry_now()}
        if status in (RunStatus.STOPPED, RunStatus.FAILED) and error is not None:
            fields["reason"] = failure_reason(error, 500)
        self.update_entry(fields)
        for role, c in fields["endpoints"].items():
            if c["escaped_replies"] or c["missing_usage"]:
                log.warning(
                    "%s endpoint: %d repl(ies) with text escaped, %d without valid usage (%d invalid); counted in %s",
                    role,
                    c["escaped_replies"],
                    c["missing_usage"],
                    c["invalid_usage"],
                    self.store.card_path() if self.store is not None else self.directory,
                )


@contextmanager
def open_run(
    directory: str | os.PathLike,
    command: str,
    controls: RunControls | None = None,
    *,
    store: CardStore | None = None,
    invocation: Invocation | None = None,
    card: dict | None = None,
    change_hint: str = CHANGE_HINT,
    guard: RunGuard | None = None,
    price: Callable[[dict], float | None] | None = None,
    entry_fields: Callable[[], JSONObject] | None = None,
) -> Iterator[RunDirectory]:
    """``with open_run(out_dir, "evaluate", ...) as run:`` — the whole run under the directory's lock
    (:class:`~insight_o3.storage.lock.RunLockedError` names the ``command`` holding it). With an ``invocation``
    (this run's command and settings) the ``store``'s card fixes the settings (a first run's card also holds
    ``card``) and gets this run's history entry, ended however the block ends; ``price``: the dollars of a usage
    dict (per role) for that entry; ``entry_fields``: more of its fields, asked each time it is written (what a
    store outside the run did, e.g. the prepared-image cache's hits). The logs opened are closed at the end."""
    controls = controls or RunControls()
    guard = guard if guard is not None else RunGuard(controls.max_failure_ratio)
    with run_lock(directory, command):
        run = RunDirectory(os.fspath(directory), controls, guard, store, price, entry_fields)
        run.settle(invocation, card, change_hint)
        error: BaseException | None = None
        try:
            try:
                yield run
            finally:
                run.close_logs()
        except BaseException as e:
            error = e
            raise
        finally:
            if run.settled:
                run.record_run(error)
