"""Whole-file writes that a crash cannot leave half-done: write a temporary file beside the
target, fsync it, ``os.replace`` it over the target, fsync the directory. Every output file of the
project that is (re)written as a whole goes through here; append-only result logs are
:class:`insight_o3.storage.record_log.RecordLog`.

A write that the system refuses (disk full, permissions, read-only file system, the directory
removed under the run) raises :class:`OutputError`, whose message is one line naming the file, the
cause and what to do; the target keeps its old content.

Every output directory is made by :func:`make_output_dir`, which first refuses one that can never hold files — on a
kernel pseudo file system (``/proc``, ``/sys``, cgroups …) or below something that is not a directory — as
:class:`UnusableOutputDir` (bad input, exit code 2, nothing created or sent), naming the path and why.
"""

from __future__ import annotations

import errno as _errno
import json
import os
import re
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

from ..base.redaction import redact, redact_json

#: What to do about the usual causes of a refused write.
_ADVICE = {
    _errno.ENOSPC: "free some disk space",
    _errno.EDQUOT: "free some space (disk quota exceeded)",
    _errno.EACCES: "make the output directory writable",
    _errno.EPERM: "make the output directory writable",
    _errno.EROFS: "use an output directory on a writable file system",
    _errno.ENOENT: "the output directory was removed while the run was using it",
    _errno.ESTALE: "the output directory was removed while the run was using it",
}


class OutputError(Exception):
    """Writing an output file failed. ``str()`` is one line: what failed, which file, why, and
    what to do. ``lost_dir`` is True when the file (its directory) was removed under the run, so
    the records written there are gone rather than safe. Picklable (raised in worker processes)."""

    def __init__(self, path: str, reason: str, errno: int | None = None, action: str = "write", lost_dir: bool = False):
        super().__init__(path, reason, errno, action, lost_dir)
        self.path, self.reason, self.errno, self.action, self.lost_dir = path, reason, errno, action, lost_dir

    @classmethod
    def from_os_error(cls, path: str, e: OSError, action: str = "write", lost_dir: bool | None = None) -> OutputError:
        """``lost_dir``: None infers it from the error (a missing file or directory means it was removed under the
        run); False where nothing was there yet (creating a directory)."""
        name = _errno.errorcode.get(e.errno or 0)
        reason = f"{e.strerror or e}" + (f" [{name}]" if name else "")
        if lost_dir is None:
            lost_dir = e.errno in (_errno.ENOENT, _errno.ESTALE)
        return cls(path, reason, e.errno, action, lost_dir=lost_dir)

    @property
    def advice(self) -> str:
        if self.lost_dir:
            return "the output directory was removed while the run was using it"
        return _ADVICE.get(self.errno or 0, "fix the cause")

    def __str__(self) -> str:
        return f"cannot {self.action} {self.path}: {self.reason}"


class UnusableOutputDir(ValueError):
    """An output directory that can never hold files (:func:`output_dir_problem`): bad input, refused before
    anything is created. The message names the path and why."""


class LinkedOutput(UnusableOutputDir):
    """A file or directory of a run that is a symbolic link: a run never writes, appends to or truncates through a
    link (one in a copied run directory would send its writes to the link's target). Bad input (status 2)."""

    def __init__(self, path: str):
        try:
            target = os.readlink(path)
        except OSError:
            target = "?"
        super().__init__(
            f"{path} is a symbolic link (to {target}); a run never writes through a link: replace it by the "
            "file or directory itself, or remove it"
        )


def refuse_link(path: str | os.PathLike) -> None:
    """Raise :class:`LinkedOutput` when ``path`` is a symbolic link (``lstat``; a missing path is fine)."""
    if os.path.islink(path):
        raise LinkedOutput(os.fspath(path))


def open_no_follow(path: str, flags: int, mode: int = 0o644) -> int:
    """``os.open`` that refuses a symbolic link at ``path`` (``O_NOFOLLOW``: :class:`LinkedOutput`, also for a link
    made between a check and the open)."""
    try:
        return os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    except OSError as e:
        if e.errno == _errno.ELOOP or os.path.islink(path):
            raise LinkedOutput(path) from None
        raise


#: File systems of the kernel's own objects: a path on them is never an output directory (creating files there
#: fails, or creates kernel objects — a directory under a cgroup mount is a new cgroup).
PSEUDO_FILE_SYSTEMS = frozenset(
    {
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "devpts",
        "debugfs",
        "tracefs",
        "securityfs",
        "pstore",
        "bpf",
        "configfs",
        "fusectl",
        "mqueue",
        "efivarfs",
        "binfmt_misc",
        "autofs",
        "nsfs",
    }
)


def _mount_of(path: str) -> tuple[str, str] | None:
    """(mount point, file system type) of the mount holding ``path`` (a real path), from
    ``/proc/self/mountinfo``; None where that cannot be read (not Linux)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    best: tuple[str, str] | None = None
    for line in lines:
        head, sep, tail = line.partition(" - ")
        fields = head.split()
        if not sep or len(fields) < 5 or not tail:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[4])  # \040 is a space
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):  # the deepest; a later mount hides an earlier
            best = (point, tail.split()[0])
    return best


def output_dir_problem(path: str | os.PathLike) -> str | None:
    """Why ``path`` can never be an output directory, or None: its nearest existing ancestor is not a directory, or
    it is on a kernel pseudo file system (:data:`PSEUDO_FILE_SYSTEMS`)."""
    existing = os.path.abspath(os.fspath(path))
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        return f"{existing} is not a directory"
    mount = _mount_of(os.path.realpath(existing))
    if mount is not None and mount[1] in PSEUDO_FILE_SYSTEMS:
        return f"{mount[0]} is the kernel's {mount[1]} file system, which cannot hold files"
    return None


def check_output_dir(path: str | os.PathLike) -> None:
    """:class:`UnusableOutputDir` when ``path`` can never be an output directory (:func:`output_dir_problem`)."""
    problem = output_dir_problem(path)
    if problem is not None:
        raise UnusableOutputDir(
            f"cannot use {os.fspath(path)} as an output directory: {problem}; choose a directory on a disk"
        )


def make_output_dir(path: str | os.PathLike) -> None:
    """Create the output directory ``path`` (and its parents) unless it exists: :class:`UnusableOutputDir` for one
    that can never hold files (:func:`check_output_dir`), :class:`OutputError` when the system refuses."""
    path = os.fspath(path)
    check_output_dir(path)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        raise OutputError.from_os_error(path, e, "create", lost_dir=False) from None


def fsync_dir(path: str) -> None:
    """Make a rename in ``path`` durable (best effort: some filesystems refuse directory fsync)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def atomic_writer(path: str | os.PathLike, mode: Literal["w", "wb"] = "w") -> Iterator:
    """``with atomic_writer(p, "wb") as f: ...`` — ``p`` holds either its old content or all of the
    new one; on an exception the temporary file is removed and ``p`` is untouched."""
    path = os.fspath(path)
    # one temporary name per process and thread: two threads writing one target never share a file
    tmp = os.path.join(
        os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.{threading.get_ident()}.tmp"
    )
    in_body = False
    try:
        fd = open_no_follow(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)  # a link planted at the temporary name
        with open(fd, mode, encoding=None if "b" in mode else "utf-8") as f:
            in_body = True
            yield f
            in_body = False
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _remove_quietly(tmp)
        if in_body and not _is_write_error(e):
            raise  # an error of the caller's own code inside the with-block, not of this write
        raise OutputError.from_os_error(path, e) from None
    except BaseException:
        _remove_quietly(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


def _is_write_error(e: OSError) -> bool:
    """An error that writing to an already open file can raise (the others come from the caller)."""
    return e.errno in (_errno.ENOSPC, _errno.EDQUOT, _errno.EIO, _errno.EFBIG, _errno.EROFS)


def _remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """``text`` (a page, a table) written atomically, redacted (:func:`insight_o3.base.redaction.redact`)."""
    with atomic_writer(path) as f:
        f.write(redact(text))


def write_json_atomic(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> None:
    """``obj`` as JSON written atomically; every string redacted (no key or URL credential in a settings file)."""
    with atomic_writer(path) as f:
        json.dump(redact_json(obj), f, indent=indent, ensure_ascii=False)
        f.write("\n")


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    with atomic_writer(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
