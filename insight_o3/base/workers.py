"""Worker processes the library starts — image renders (:mod:`insight_o3.imaging.images`), the repair of a model's
damaged JSON (:mod:`insight_o3.base.untrusted`) — and what ties them to the process that started them.

* :func:`worker_context`: ``forkserver`` where there is one (workers start small, without the parent's threads),
  its server and multiprocessing's resource tracker started with stdin, stdout and stderr on ``/dev/null``
  (:func:`start_helpers_detached`), so no worker holds the caller's pipes (``evaluate … | tee log`` ends when
  ``evaluate`` does).
* :func:`exit_with`: a worker watches the process that started it (a pidfd, else its parent) and exits the moment
  it is gone, SIGKILL included.
* :func:`call_with_deadline`: one function call in a fresh worker, awaited without blocking the event loop, the
  worker killed when the call outlives its deadline or the awaiting task is cancelled (a SIGTERM'd run stops at
  once instead of waiting for CPU-bound work it no longer wants).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import select
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from multiprocessing.context import BaseContext
from typing import Any

_HELPERS_LOCK = threading.Lock()
#: modules the forkserver imports once before it forks any worker (each user of workers adds its own)
_PRELOAD: dict[str, None] = {}


def worker_context(preload: Iterable[str] = ()) -> BaseContext:
    """``forkserver`` where there is one, else ``spawn``. The server imports ``__main__``, the command's main module
    and ``preload`` (the modules the workers run) once, before its first fork (:func:`worker_preload`): every worker
    re-runs the main module as multiprocessing does (a command started with ``python -m`` is imported by name in
    each child), and forked from a server that holds its imports already, that costs it a module body, not the
    ~0.6 s CPU of importing the SDK and the command's whole import graph again. Modules named after the server has
    started are imported by each worker itself."""
    for name in preload:
        _PRELOAD.setdefault(name)
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if ctx.get_start_method() == "forkserver":
        ctx.set_forkserver_preload(worker_preload())
        start_helpers_detached()
    return ctx


def worker_preload() -> list[str]:
    """What the forkserver imports before it forks a worker: ``__main__`` (multiprocessing's default, used for a
    script run by path), the main module by name where multiprocessing imports it in each child (``python -m
    insight_o3.scripts.evaluate``; not a package's ``__main__``, which it skips) and the workers' modules."""
    main_name = getattr(getattr(sys.modules.get("__main__"), "__spec__", None), "name", None)
    # a package's ``__main__`` (``python -m pytest``) runs when imported, and multiprocessing never re-imports it
    if not isinstance(main_name, str) or main_name == "__main__" or main_name.endswith(".__main__"):
        return ["__main__", *_PRELOAD]
    return ["__main__", main_name, *_PRELOAD]


def start_helpers_detached() -> None:
    """Start multiprocessing's forkserver and resource tracker (if not running) with fds 0-2 on /dev/null:
    they and every worker forked from the server then hold none of the caller's pipes."""
    from multiprocessing import forkserver, resource_tracker

    with _HELPERS_LOCK, stdio_on_devnull():
        resource_tracker.ensure_running()
        forkserver.ensure_running()


@contextlib.contextmanager
def stdio_on_devnull() -> Iterator[None]:
    """Point fds 0, 1 and 2 at /dev/null while inside (for the processes started there), then restore them.
    Only the instant of two ``fork_exec`` calls: output another thread writes then is lost."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    null = os.open(os.devnull, os.O_RDWR)
    saved: list[tuple[int, int]] = []
    try:
        for fd in (0, 1, 2):
            try:
                saved.append((fd, os.dup(fd)))
            except OSError:  # closed in this process: nothing to keep from the children
                continue
            os.dup2(null, fd)
        yield
    finally:
        for fd, copy in saved:
            os.dup2(copy, fd)
            os.close(copy)
        os.close(null)


def exit_with(owner_pid: int) -> None:
    """End this process as soon as process ``owner_pid`` is gone (a daemon thread waits on its pidfd;
    without pidfds it checks every second whether the owner or this process's parent changed)."""
    try:
        pidfd = os.pidfd_open(owner_pid)
    except ProcessLookupError:
        os._exit(0)  # the owner is gone already
    except (AttributeError, OSError):  # not Linux >= 5.3
        pidfd = None
    threading.Thread(target=_wait_for_exit, args=(owner_pid, pidfd), name="owner-watch", daemon=True).start()


def _wait_for_exit(owner_pid: int, pidfd: int | None) -> None:
    if pidfd is not None:
        select.select([pidfd], [], [])  # readable once the owner has exited
    else:
        parent = os.getppid()
        while os.getppid() == parent and _alive(owner_pid):
            time.sleep(1.0)
    os._exit(0)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, owned by another user (pid reused): treat as alive
        pass
    return True


class WorkerDeadline(TimeoutError):
    """A call of :func:`call_with_deadline` that did not finish in time (its worker was killed)."""


class WorkerDied(RuntimeError):
    """The worker of :func:`call_with_deadline` ended without an answer (killed for memory, a crash)."""


def _run_and_send(conn: Any, owner_pid: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the owner stops this worker
    exit_with(owner_pid)
    try:
        conn.send(fn(*args))
    finally:
        conn.close()


async def call_with_deadline(fn: Callable[..., Any], *args: Any, deadline_s: float, preload: Iterable[str] = ()) -> Any:
    """``fn(*args)`` in a fresh worker process (``fn`` and its result picklable; ``fn`` catches what it expects to
    raise and returns it as a value). Raises :class:`WorkerDeadline` after ``deadline_s`` seconds, and
    :class:`WorkerDied` when the worker ends without an answer; the worker never outlives the call (killed on the
    deadline and on cancellation)."""
    ctx: Any = worker_context(preload)  # a ForkServerContext or SpawnContext (BaseContext declares no Process)
    receiver, sender = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_run_and_send, args=(sender, os.getpid(), fn, args), daemon=True)
    try:
        proc.start()
        sender.close()
        ready = await asyncio.to_thread(receiver.poll, deadline_s)  # True on an answer and on the worker's end
        if not ready:
            raise WorkerDeadline(f"took more than {deadline_s:g} s")
        try:
            return receiver.recv()
        except EOFError:
            raise WorkerDied(f"the worker process ended without an answer (exit code {proc.exitcode})") from None
    finally:
        if proc.is_alive():
            proc.kill()
        await asyncio.to_thread(proc.join, 5.0)
        receiver.close()
        with contextlib.suppress(ValueError):  # already closed after a start
            sender.close()
