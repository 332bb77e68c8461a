"""insight_o3.jobs: the one run-directory context (:func:`~insight_o3.jobs.run_directory.open_run`: lock, card,
history entry, logs) and the one :func:`~insight_o3.jobs.execute.execute` of every resumable command, exercised with
a small command of its own written the way every command is (straight-line code around them)."""

from __future__ import annotations

import asyncio
import json
import os

import pytest

from insight_o3.base.exit_codes import ExitCode
from insight_o3.endpoints.guard import FailureRatioError
from insight_o3.jobs.budget import BudgetExceeded
from insight_o3.jobs.card_store import CardFile
from insight_o3.jobs.clients import Clients
from insight_o3.jobs.controls import RunControls
from insight_o3.jobs.execute import RECORDS, ItemWork, JobResult, execute, left
from insight_o3.jobs.run_directory import open_run
from insight_o3.storage.lock import RunLockedError, acquire

pytestmark = pytest.mark.smoke


class Squares(ItemWork[int]):
    """Squares numbers; ``fail`` ones raise an expected error (recorded), ``boom`` a programming error."""

    def __init__(self, fail=(), boom=(), tokens=0):
        self.fail, self.boom, self.tokens = set(fail), set(boom), tokens
        self.calls: list[int] = []
        self.in_flight = self.max_in_flight = 0
        self.closed = False
        self.guard = None

    def key(self, n: int) -> str:
        return str(n)

    def is_final(self, record: dict) -> bool:
        return record["status"] == "ok"

    async def work(self, n: int, emit):
        self.calls.append(n)
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        await asyncio.sleep(0.01)
        self.in_flight -= 1
        if n in self.boom:
            raise KeyError(n)
        if n in self.fail:
            raise ValueError(f"cannot square {n}")
        return {"sample_key": str(n), "status": "ok", "value": n * n, "tokens": self.tokens}

    def failed(self, n: int, reason: str) -> dict:
        return {"sample_key": str(n), "status": "failed", "error": reason}

    def spend(self, record: dict) -> tuple[int, float]:
        return record.get("tokens", 0), 0.0

    async def close(self) -> None:
        self.closed = True


async def arun_squares(directory, items, work: Squares, settings=None, store=None, **seam) -> JobResult[dict]:
    """The command: straight-line code around the run directory and :func:`execute`."""
    settings = settings or RunControls(progress=False, concurrency=2)
    d = str(directory)
    store = store or CardFile(os.path.join(d, "records_card.json"), [os.path.join(d, "records.jsonl")])
    with open_run(d, "square", settings, store=store, **seam) as run:
        logs = run.open_logs({RECORDS: "records.jsonl"})
        plan = left(items, work, logs[RECORDS])
        async with Clients(run.guard) as clients:
            work.guard = run.guard
            clients.on_close(work.close)
            await execute(run, plan, work, clients, desc="squares")
        logs[RECORDS].compact([str(n) for n in items])
        ok = sum(r["status"] == "ok" for r in logs[RECORDS].records.values())
    return JobResult({"ok": ok, "n": len(items)}, len(items) - ok)


def run_squares(directory, items, work: Squares | None = None, settings=None, **seam) -> JobResult[dict]:
    return asyncio.run(arun_squares(directory, items, work or Squares(), settings, **seam))


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_runs_items_with_bounded_concurrency_and_compacts(tmp_path):
    job = Squares()
    result = run_squares(tmp_path, [3, 1, 2, 4], job)
    assert result.summary == {"ok": 4, "n": 4} and result.exit_code == ExitCode.OK
    assert [r["sample_key"] for r in _lines(tmp_path / "records.jsonl")] == ["3", "1", "2", "4"]
    assert job.max_in_flight == 2 and job.closed


def test_a_failed_item_is_recorded_and_retried_by_the_next_run(tmp_path):
    first = run_squares(tmp_path, [1, 2, 3], Squares(fail={2}))
    assert first.incomplete == 1 and first.exit_code == ExitCode.INCOMPLETE
    rec = {r["sample_key"]: r for r in _lines(tmp_path / "records.jsonl")}
    assert rec["2"] == {"sample_key": "2", "status": "failed", "error": "ValueError: cannot square 2"}
    again = Squares()
    assert run_squares(tmp_path, [1, 2, 3], again).exit_code == ExitCode.OK
    assert again.calls == [2]  # only what was not final


def test_a_programming_error_propagates(tmp_path):
    with pytest.raises(KeyError):
        run_squares(tmp_path, [1, 2, 3], Squares(boom={2}))


def test_resume_drops_a_torn_last_line(tmp_path):
    (tmp_path / "records.jsonl").write_text('{"sample_key": "1", "status": "ok", "value": 1}\n{"sample_key": "2", "st')
    job = Squares()
    assert run_squares(tmp_path, [1, 2], job).summary == {"ok": 2, "n": 2}
    assert job.calls == [2]


def test_one_run_per_directory(tmp_path):
    lock = acquire(tmp_path, "another")
    try:
        with pytest.raises(RunLockedError, match="another"):
            run_squares(tmp_path, [1])
    finally:
        lock.release()


def test_a_budget_stops_new_items_and_keeps_finished_ones(tmp_path):
    settings = RunControls(progress=False, concurrency=1, max_tokens_total=25)
    with pytest.raises(BudgetExceeded, match="--max_tokens_total 25"):
        run_squares(tmp_path, [1, 2, 3, 4, 5], Squares(tokens=10), settings)
    assert len(_lines(tmp_path / "records.jsonl")) == 3  # the third reached it; nothing started after
    again = Squares(tokens=10)  # earlier runs count: stops before starting anything
    with pytest.raises(BudgetExceeded):
        run_squares(tmp_path, [1, 2, 3, 4, 5], again, settings)
    assert again.calls == []


def test_a_tripped_guard_stops_the_run_and_records_nothing_more(tmp_path):
    class Tripping(Squares):
        async def work(self, n, emit):
            if n == 2:
                self.guard.trip(FailureRatioError("model", None, 9, 10, 0.5, "boom"))
                await asyncio.sleep(10)
            return await super().work(n, emit)

    job = Tripping()
    with pytest.raises(FailureRatioError):
        run_squares(tmp_path, [1, 2, 3, 4], job, RunControls(progress=False, concurrency=4))
    assert job.closed


def test_the_requests_of_a_unit_count_against_the_budget(tmp_path):
    """Records of the data tools carry no usage: their budget counts what the clients report while a unit runs."""
    from insight_o3.endpoints.usage import record_response

    class Metered(Squares):
        async def work(self, n, emit):
            record_response("model", {"usage": {"prompt_tokens": 7, "completion_tokens": 3}})
            return await super().work(n, emit)

    job = Metered()
    with pytest.raises(BudgetExceeded, match="30 tokens used"):
        run_squares(tmp_path, [1, 2, 3, 4, 5], job, RunControls(progress=False, concurrency=1, max_tokens_total=25))
    assert job.calls == [1, 2, 3]


# ------------------------------------------------------------------------------------ every run in the history
def _history(tmp_path) -> list[dict]:
    return json.loads((tmp_path / "records_card.json").read_text())["history"]


def test_every_run_is_in_the_history_with_how_it_ended_and_what_it_spent(tmp_path, caplog, monkeypatch):
    """Finished, failed (with the reason), stopped by a budget, interrupted (cancelled, as SIGINT/SIGTERM do), and
    one left "started" (a SIGKILL) found "unfinished" by the next run; each with its records and tokens, the
    replies of units it never recorded included (a run meter sees every reply). The interruption comes in the
    narrowest window: record 7 written by the writer thread, its coroutine not yet resumed — the interrupted run
    still counts record 7 and its reply as recorded."""
    import threading

    from insight_o3.base.setting_kinds import Kind
    from insight_o3.endpoints.usage import record_response
    from insight_o3.jobs.integrity import Invocation
    from insight_o3.storage.record_log import RecordLog

    written_7, cancelled = threading.Event(), threading.Event()
    append = RecordLog.append

    def append_then_hold_7(self, record):
        append(self, record)
        if record.get("sample_key") == "7":
            written_7.set()
            cancelled.wait(10)  # the writer thread holds until the run is cancelled

    monkeypatch.setattr(RecordLog, "append", append_then_hold_7)

    class Metered(Squares):
        async def work(self, n, emit):
            record_response("model", {"usage": {"prompt_tokens": 7, "completion_tokens": 3}})
            if n == 9:
                self.waiting = True
                await asyncio.sleep(60)  # in flight when the run is cancelled: its reply is paid, never recorded
            return await super().work(n, emit)

    inv = Invocation("square", {"concurrency": 2}, kinds={"concurrency": Kind.OPERATIONAL})
    price = lambda usage: 0.5 * sum(c["requests"] for c in usage.values())  # noqa: E731
    assert run_squares(tmp_path, [1, 2], Metered(), invocation=inv, price=price).exit_code == ExitCode.OK
    with pytest.raises(KeyError):
        run_squares(tmp_path, [1, 2, 3], Metered(boom={3}), invocation=inv, price=price)
    settings = RunControls(progress=False, concurrency=1, max_tokens_total=25)
    with pytest.raises(BudgetExceeded):
        run_squares(tmp_path, [1, 2, 3, 4, 5, 6], Metered(), settings, invocation=inv, price=price)

    async def cancel_while_9_is_in_flight():
        job = Metered()
        task = asyncio.create_task(arun_squares(tmp_path, [7, 9], job, invocation=inv, price=price))
        while not (getattr(job, "waiting", False) and written_7.is_set()):
            await asyncio.sleep(0.01)
        task.cancel()
        cancelled.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel_while_9_is_in_flight())
    card = tmp_path / "records_card.json"
    stored = json.loads(card.read_text())
    stored["history"].append({**stored["history"][-1], "status": "started"})  # as a SIGKILL leaves it
    card.write_text(json.dumps(stored))
    caplog.set_level("WARNING")
    run_squares(tmp_path, [8], Metered(), invocation=inv, price=price)
    assert any("did not finish (killed by SIGKILL" in r.getMessage() for r in caplog.records)

    h = _history(tmp_path)
    assert [e["status"] for e in h] == ["finished", "failed", "stopped", "interrupted", "unfinished", "finished"]
    assert h[0]["new_records"] == {"ok": 2} and h[0]["tokens"] == 20 and h[0]["cost_usd"] == 1.0
    assert h[1]["reason"].startswith("KeyError") and h[1]["tokens"] == 10  # 3's reply, its run ended by the error
    assert "budget reached" in h[2]["reason"] and h[2]["new_records"] == {"ok": 3} and h[2]["tokens"] == 30
    assert h[3]["new_records"] == {"ok": 1} and h[3]["tokens"] == 20 and h[3]["tokens_unrecorded"] == 10
    assert "reason" not in h[3] and h[5]["new_records"] == {"ok": 1}


# ------------------------------------------------------------------------------------------------ the seam
class _Store:
    """A card store of its own: the card in memory, the directory said to hold 4 trials and a record."""

    def __init__(self):
        self.card = None

    def card_path(self) -> str:
        return "<memory>"

    def read_card(self):
        return self.card

    def write_card(self, card) -> None:
        self.card = card

    def check(self) -> None:
        return None

    def held(self):
        return {"num_trials": 4}

    def wrote_records(self) -> bool:
        return True


def test_the_store_given_to_the_job_holds_its_card_and_says_what_the_directory_holds(tmp_path):
    from insight_o3.base.setting_kinds import Kind
    from insight_o3.jobs.integrity import FewerThanHeld, Invocation, SettingsChanged

    store = _Store()

    def run(**settings):
        kinds = {"num_trials": Kind.EXTENT, "seed": Kind.RESULT}
        inv = Invocation("square", {"num_trials": 4, "seed": 1, **settings}, kinds=kinds)
        return run_squares(tmp_path, [1, 2], store=store, invocation=inv, card={"note": "first"})

    run()
    assert store.card["fixed_settings"] == {"command": "square", "seed": 1} and store.card["note"] == "first"
    assert not (tmp_path / "records_card.json").exists()  # not the default CardFile
    with pytest.raises(SettingsChanged):  # a record was written (the store says so): settings are fixed
        run(seed=2)
    with pytest.raises(FewerThanHeld, match="num_trials: the directory holds 4, this run 3"):
        run(num_trials=3)


def test_a_command_says_five_things_per_item():
    """The per-item protocol is small: a command's run is straight-line code around the run directory and
    :func:`execute`, which asks of each item only its key, whether its record is final, the work, the record of a
    failure and what a record cost."""
    from insight_o3.evaluation.runner import EvalWork

    protocol = {n for n, v in vars(ItemWork).items() if callable(v) and not n.startswith("_")}
    assert protocol == {"key", "is_final", "work", "failed", "spend"}
    assert {n for n in vars(EvalWork) if n in protocol} == {"key", "work", "spend"}
