"""The image worker processes of an :class:`~insight_o3.imaging.images.ImageStore` in process mode, each view routed
to the worker that decoded its source last.

A worker keeps its last ``originals_cached`` decoded originals (the store's own LRU). A shared queue
(``ProcessPoolExecutor``) handed the next view to whichever worker was free, so an agent's crop of an image reached a
worker that never decoded it, or one that had decoded others since, and the original (e.g. a 4600x3967 PNG, about a
fifth of an image's render CPU) was decoded again: ``bench_eval.py --agent insight_o3`` measured 5.9 decodes per image
(2 workers keeping 2 originals each), 2.0 with this routing (README, "Speed and footprint"). Here each worker is a
one-process executor of its own, and the pool keeps a mirror of what each one holds (the sources of the views it was
handed, most recent last, ``originals_cached`` of them: its LRU once it has rendered them). A free worker takes, in
order of arrival:

1. the first waiting view whose source it holds;
2. else the first whose source no worker holds (a new image: any worker is as good);
3. else nothing: each waiting view's source is held by a busy worker, which takes it as soon as it is free, instead
   of a second worker decoding that original again.

Without kept originals (``originals_cached=0``, the single-model runs) this is the shared queue: the first waiting
view. A worker is handed one view at a time, its next chosen when it is free, so the choice sees the views that
arrived meanwhile (the measured wall time of both kinds of run did not get worse).

A worker that dies fails the views it was handed with ``BrokenProcessPool`` (the store retries each once) and is
replaced by a new one, which holds nothing.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from concurrent.futures import CancelledError, Executor, Future
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Task:
    source: str | None  # None: a view that decodes nothing (a file's own bytes); holds no original
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    future: Future = field(default_factory=Future)


@dataclass
class _Worker:
    executor: Executor
    holds: OrderedDict[str, None] = field(default_factory=OrderedDict)  # sources, least recently used first
    busy: bool = False


class AffinityPool:
    """``workers`` executors of one worker each, made by ``make_executor`` (the store's: a one-process
    ``ProcessPoolExecutor``); :meth:`submit` routes a call by its source (module docstring). Thread-safe; futures
    complete in the executors' threads."""

    def __init__(self, workers: int, make_executor: Callable[[], Executor], originals_cached: int):
        self._make = make_executor
        self._keep = max(0, originals_cached)
        self._lock = threading.Lock()
        self._workers = [_Worker(make_executor()) for _ in range(max(1, workers))]
        self._waiting: deque[_Task] = deque()
        self._closed = False

    def submit(self, source: str | None, fn: Callable[..., Any], *args: Any) -> Future:
        """Run ``fn(*args)`` in a worker, preferring the one that holds ``source`` decoded."""
        task = _Task(source, fn, args)
        with self._lock:
            if self._closed:
                raise RuntimeError("cannot submit to a closed image worker pool")
            self._waiting.append(task)
            starts = self._assign()
        self._start(starts)
        return task.future

    def _holder(self, source: str | None) -> _Worker | None:
        if source is None:
            return None
        return next((w for w in self._workers if source in w.holds), None)

    def _pick(self, worker: _Worker) -> _Task | None:
        """The view a free ``worker`` takes (rules 1-3 of the module docstring); called under the lock."""
        new = None
        for task in self._waiting:
            if task.future.cancelled():
                continue
            if task.source is not None and task.source in worker.holds:
                return task
            if new is None and self._holder(task.source) is None:
                new = task
        return new

    def _assign(self) -> list[tuple[_Worker, _Task]]:
        """Hand a view to every free worker that has one to take (views whose askers went away are dropped);
        called under the lock."""
        self._waiting = deque(t for t in self._waiting if not t.future.cancelled())
        starts = []
        for worker in self._workers:
            if worker.busy:
                continue
            task = self._pick(worker)
            if task is None:
                continue
            self._waiting.remove(task)
            if not task.future.set_running_or_notify_cancel():
                continue  # its asker went away meanwhile
            worker.busy = True
            if task.source is not None and self._keep:
                worker.holds[task.source] = None
                worker.holds.move_to_end(task.source)
                while len(worker.holds) > self._keep:
                    worker.holds.popitem(last=False)
            starts.append((worker, task))
        return starts

    def _start(self, starts: list[tuple[_Worker, _Task]]) -> None:
        for worker, task in starts:
            try:
                inner = worker.executor.submit(task.fn, *task.args)
            except (BrokenProcessPool, RuntimeError) as e:  # broken, or shut down by shutdown() meanwhile
                inner = Future()
                inner.set_exception(e)
            inner.add_done_callback(functools.partial(self._done, worker, task))

    def _done(self, worker: _Worker, task: _Task, inner: Future) -> None:
        broken = None
        error = None if inner.cancelled() else inner.exception()  # exception() raises on a cancelled future
        with self._lock:
            worker.busy = False
            if isinstance(error, BrokenProcessPool) and not self._closed:
                broken = worker.executor  # the process died: a new one, holding nothing
                worker.executor, worker.holds = self._make(), OrderedDict()
            starts = [] if self._closed else self._assign()
        if broken is not None:
            broken.shutdown(wait=False, cancel_futures=True)
        if inner.cancelled():  # shut down before its worker took it; the task is running, so it cannot be cancelled
            task.future.set_exception(CancelledError())
        elif error is not None:
            task.future.set_exception(error)
        else:
            task.future.set_result(inner.result())
        self._start(starts)

    def shutdown(self, wait: bool = True) -> None:
        """Stop every worker; the views no worker took are cancelled (``wait``: until the workers have exited)."""
        with self._lock:
            self._closed = True
            waiting, self._waiting = list(self._waiting), deque()
            executors = [w.executor for w in self._workers]
        for task in waiting:
            task.future.cancel()
        for executor in executors:
            executor.shutdown(wait=wait, cancel_futures=True)
