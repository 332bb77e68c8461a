"""One run per output directory: an advisory ``flock`` held for the whole run.

Every resumable command (``evaluate``, ``evaluate_vsearch``, ``generate_collages`` and its ``filter``,
``build_region_localization``) takes the lock of its output directory before it reads or writes any
result file. A second run started on the same directory (a job scheduler retrying, a second
terminal) then exits at once, naming the directory and the holder, instead of querying every sample
a second time and interleaving its writes (and compactions) with the first run's.

The lock is the kernel's (``fcntl.flock`` on ``<dir>/.insight_o3.lock``), so it dies with the process
holding it: a run killed by SIGKILL, OOM or a power cut never leaves a stale lock behind, and the
file itself may stay. The holder writes its pid, host, command and start time into the file only so
that a refused run can say who holds the directory. Children forked by the holder (process pools)
close their copy of the descriptor, so the lock goes away with the holder even if a child lingers.
On network file systems ``flock`` is only as good as the server's lock support.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager

from .atomic import OutputError, check_output_dir, open_no_follow

LOCK_FILE = ".insight_o3.lock"

#: Descriptors of the locks this process holds; a forked child closes its copies (see above).
_HELD: set[int] = set()


def _close_in_child() -> None:
    for fd in list(_HELD):
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_close_in_child)


class RunLockedError(RuntimeError):
    """Another live process holds the directory's lock. ``str()`` is one line naming both."""

    def __init__(self, directory: str, holder: str):
        super().__init__(directory, holder)
        self.directory, self.holder = directory, holder

    def __str__(self) -> str:
        return (
            f"{self.directory} is in use by another run ({self.holder}); two runs on one output "
            f"directory would query every sample twice and interleave their writes. Wait for it to "
            f"finish (or stop it), or use another output directory"
        )


def _holder(fd: int) -> str:
    try:
        raw = os.pread(fd, 4096, 0)
        info = json.loads(raw.decode("utf-8")) if raw.strip() else {}
    except (OSError, ValueError):
        info = {}
    if not isinstance(info, dict) or "pid" not in info:
        return "pid unknown: it is still starting"
    host = f" on {info['host']}" if info.get("host") and info["host"] != socket.gethostname() else ""
    what = f"{info['command']}, " if info.get("command") else ""
    since = f", since {info['started']}" if info.get("started") else ""
    return f"{what}pid {info['pid']}{host}{since}"


class RunLock:
    """A held lock; :meth:`release` (or the end of the process) frees it."""

    def __init__(self, directory: str, fd: int):
        self.directory = directory
        self.path = os.path.join(directory, LOCK_FILE)
        self._fd: int | None = fd

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        fd, self._fd = self._fd, None
        if fd is None:
            return
        _HELD.discard(fd)
        try:
            os.ftruncate(fd, 0)  # no holder any more; the (empty) file may stay
        except OSError:
            pass
        os.close(fd)  # closing the last descriptor releases the flock


def acquire(directory: str | os.PathLike, command: str) -> RunLock:
    """Lock ``directory`` (created if missing) for this process, or raise :class:`RunLockedError`
    at once if another process holds it. Unusable directories raise
    :class:`~insight_o3.storage.atomic.OutputError`; one that can never hold files
    :class:`~insight_o3.storage.atomic.UnusableOutputDir`."""
    directory = os.fspath(directory)
    path = os.path.join(directory, LOCK_FILE)
    check_output_dir(directory)
    try:
        os.makedirs(directory, exist_ok=True)
        fd = open_no_follow(path, os.O_RDWR | os.O_CREAT)  # the lock file is truncated: never a link's target
    except OSError as e:
        raise OutputError.from_os_error(path, e, "create the lock file") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as e:
        holder = _holder(fd)
        os.close(fd)
        if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            raise RunLockedError(directory, holder) from None
        raise OutputError.from_os_error(path, e, "lock") from None
    _HELD.add(fd)
    info = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "command": command,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
    }
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(info) + "\n").encode("utf-8"), 0)
    except OSError:
        pass  # the lock is held; the holder note is only for the message of a refused run
    return RunLock(directory, fd)


@contextmanager
def run_lock(directory: str | os.PathLike, command: str) -> Iterator[RunLock]:
    """``with run_lock(out_dir, "evaluate"): ...`` — the whole run under the directory's lock."""
    lock = acquire(directory, command)
    try:
        yield lock
    finally:
        lock.release()
