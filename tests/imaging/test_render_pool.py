"""The image workers' routing (:mod:`insight_o3.imaging.render_pool`): a view goes to the worker holding its
source, a new source to any free worker, a view whose source a busy worker holds waits for it; a worker that dies
fails only its own view and is replaced."""

from __future__ import annotations

import os
import threading
from concurrent.futures import CancelledError, Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

import pytest

from insight_o3.imaging.render_pool import AffinityPool


class Gate:
    """Calls that record the worker thread they ran on and wait until released."""

    def __init__(self) -> None:
        self.ran: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.open = threading.Event()

    def call(self, name: str) -> str:
        with self.lock:
            self.ran.append((name, threading.current_thread().name))
        assert self.open.wait(10)
        return name


def thread_workers(n: int, keep: int) -> AffinityPool:
    names = iter(f"w{i}" for i in range(n))
    return AffinityPool(n, lambda: ThreadPoolExecutor(1, thread_name_prefix=next(names)), keep)


def test_views_follow_their_source_and_a_new_source_takes_a_free_worker():
    pool, gate = thread_workers(2, keep=2), Gate()
    try:
        first = [pool.submit("a", gate.call, "a0"), pool.submit("b", gate.call, "b0")]
        gate.open.set()
        assert [f.result(10) for f in first] == ["a0", "b0"]
        worker = dict(gate.ran)
        gate.open.clear()
        # both workers free: every view of a and b goes to the worker that had a or b, c to either
        later = [pool.submit(s, gate.call, f"{s}{k}") for k in (1, 2) for s in "ab"] + [
            pool.submit("c", gate.call, "c")
        ]
        gate.open.set()
        assert [f.result(10) for f in later] == ["a1", "b1", "a2", "b2", "c"]
        ran = dict(gate.ran)
        assert {ran[f"a{k}"] for k in (1, 2)} == {worker["a0"]} and {ran[f"b{k}"] for k in (1, 2)} == {worker["b0"]}
    finally:
        pool.shutdown()


def test_a_free_worker_waits_for_the_holder_rather_than_decode_again_but_takes_new_sources():
    pool, gate = thread_workers(2, keep=1), Gate()
    try:
        a0 = pool.submit("a", gate.call, "a0")  # w0 busy with a
        crops = [pool.submit("a", gate.call, f"a{k}") for k in (1, 2)]
        b0 = pool.submit("b", gate.call, "b0")  # w1 is free: it takes b, not a crop of a
        gate.open.set()
        assert [f.result(10) for f in (a0, *crops, b0)] == ["a0", "a1", "a2", "b0"]
        ran = dict(gate.ran)
        assert ran["a1"] == ran["a2"] == ran["a0"] != ran["b0"]
    finally:
        pool.shutdown()


def test_without_kept_originals_it_is_a_shared_queue():
    """Two views of one source, two free workers, no originals kept: both run at once (each waits for the other)."""
    pool, both = thread_workers(2, keep=0), threading.Barrier(2)

    def together() -> str:
        both.wait(10)
        return threading.current_thread().name

    try:
        futures = [pool.submit("a", together) for _ in range(2)]
        assert len({f.result(20) for f in futures}) == 2
    finally:
        pool.shutdown()


def test_shutdown_cancels_what_no_worker_took():
    pool, gate = thread_workers(1, keep=2), Gate()
    running = pool.submit("a", gate.call, "a0")
    waiting = pool.submit("b", gate.call, "b0")
    threading.Timer(0.2, gate.open.set).start()
    pool.shutdown()
    assert running.result(10) == "a0" and waiting.cancelled()
    with pytest.raises(RuntimeError, match="closed"):
        pool.submit("a", gate.call, "a1")


def _die_once(flag: str) -> int:
    if not os.path.exists(flag):
        open(flag, "w").close()
        os._exit(1)  # a decoder crash, or the OOM killer
    return os.getpid()


def test_a_worker_that_dies_fails_its_view_and_is_replaced(tmp_path):
    pool = AffinityPool(1, lambda: ProcessPoolExecutor(1), originals_cached=2)
    try:
        first = pool.submit("a", _die_once, str(tmp_path / "died"))
        with pytest.raises(BrokenProcessPool):
            first.result(60)
        assert pool.submit("a", _die_once, str(tmp_path / "died")).result(60) > 0  # a new worker
    finally:
        pool.shutdown()


class CancellingExecutor(Executor):
    """An executor shut down between taking a call and starting it: the future it returns is cancelled."""

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[no-untyped-def]
        inner: Future = Future()
        threading.Timer(0.05, inner.cancel).start()
        return inner


def test_a_call_its_worker_cancelled_fails_instead_of_hanging():
    """A worker's executor that cancels the call it was handed (shut down before its process took it) ends the
    view with CancelledError: its asker is not left waiting for ever, and the worker is free again."""
    pool = AffinityPool(1, CancellingExecutor, originals_cached=2)
    try:
        with pytest.raises(CancelledError):
            pool.submit("a", os.getpid).result(10)
        with pytest.raises(CancelledError):
            pool.submit("a", os.getpid).result(10)
    finally:
        pool.shutdown()
