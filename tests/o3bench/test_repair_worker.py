"""The builder's JSON repair runs in a worker process with a deadline: a reply the repair library is quadratic on
(80,000 characters of unclosed strings: minutes of CPU) fails the reply at the deadline while the event loop keeps
ticking, and a cancelled task (a SIGTERM'd run) kills the worker at once."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from insight_o3.base.untrusted import UntrustedJSONError, loads_repaired_in_worker
from insight_o3.base.workers import WorkerDeadline, call_with_deadline
from insight_o3.o3bench import synthesis

#: json-repair 0.x takes 4 s on 25,000 characters of this and grows faster than quadratically
SLOW_TO_REPAIR = '[{"a": "x\n' * 8000 + "]"


async def _with_heartbeat(coro, period: float = 0.02) -> tuple[object, float]:
    """Await ``coro`` while a task ticks every ``period`` seconds; the result (or exception) and the longest gap
    between ticks (the event loop's longest stall)."""
    gaps: list[float] = []

    async def beat() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(period)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.create_task(beat())
    try:
        try:
            result: object = await coro
        except Exception as e:  # noqa: BLE001 - returned to the test
            result = e
    finally:
        ticker.cancel()
    return result, max(gaps, default=0.0)


def test_slow_repair_stops_at_the_deadline_and_the_loop_keeps_running():
    t0 = time.monotonic()
    result, stall = asyncio.run(_with_heartbeat(synthesis.parse_reply(SLOW_TO_REPAIR, repair_deadline_s=1.0)))
    took = time.monotonic() - t0
    assert isinstance(result, synthesis.SynthesisFormatError), result
    assert took < 15, took  # the deadline and a worker's start, not the minutes of the repair
    assert stall < 1.0, f"the event loop stalled {stall:.2f} s"


def test_repair_past_the_deadline_says_so():
    with pytest.raises(UntrustedJSONError, match=r"not repaired: the repair took more than 0.5 s"):
        asyncio.run(loads_repaired_in_worker(SLOW_TO_REPAIR, deadline_s=0.5))


def test_repair_in_a_worker_gives_the_in_process_result():
    value, repair = asyncio.run(loads_repaired_in_worker('[{"q": 1,}]'))
    assert value == [{"q": 1}] and repair is not None and repair.library.startswith("json-repair")
    assert asyncio.run(loads_repaired_in_worker('[{"q": 1}]')) == ([{"q": 1}], None)  # strict: no worker
    with pytest.raises(UntrustedJSONError, match="out of bounds: an integer of 401 digits"):
        asyncio.run(loads_repaired_in_worker('[{"b": 1,}, {"a": 1' + "0" * 400 + "}]"))


def _write_pid_and_sleep(path: str, seconds: float) -> str:
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)
    return "slept"


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _wait_gone(pid: int, within: float = 5.0) -> bool:
    end = time.monotonic() + within
    while time.monotonic() < end:
        if _gone(pid):
            return True
        time.sleep(0.02)
    return False


def _wait_for_file(path: Path, within: float = 30.0) -> None:
    end = time.monotonic() + within
    while not path.exists() and time.monotonic() < end:
        time.sleep(0.02)


def test_worker_is_killed_at_the_deadline(tmp_path):
    pidfile = tmp_path / "pid"
    # the deadline covers the worker's start (importing this module: seconds on a loaded machine)
    with pytest.raises(WorkerDeadline):
        asyncio.run(call_with_deadline(_write_pid_and_sleep, str(pidfile), 600.0, deadline_s=30.0))
    assert _wait_gone(int(pidfile.read_text()))


def test_cancelled_call_kills_its_worker(tmp_path):
    pidfile = tmp_path / "pid"

    async def run() -> None:
        task = asyncio.create_task(call_with_deadline(_write_pid_and_sleep, str(pidfile), 60.0, deadline_s=60.0))
        await asyncio.to_thread(_wait_for_file, pidfile)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    t0 = time.monotonic()
    asyncio.run(run())
    assert time.monotonic() - t0 < 30
    assert _wait_gone(int(pidfile.read_text()))


def test_worker_result_comes_back():
    assert asyncio.run(call_with_deadline(_write_pid_and_sleep, os.devnull, 0.0, deadline_s=30.0)) == "slept"
