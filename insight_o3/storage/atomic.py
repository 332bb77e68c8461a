"""Whole-file writes that a crash cannot leave half-done: write a temporary file beside the
target, fsync it, ``os.replace`` it over the target, fsync the directory. Every output file of the
project that is (re)written as a whole goes through here; append-only result logs are
:class:`insight_o3.storage.record_log.RecordLog`.

A write that the system refuses (disk full, permissions, read-only file system, the directory
removed under the run) raises :class:`OutputError`, whose message is one line naming the file, the
cause and what to do; the target keeps its old content.
"""

from __future__ import annotations

import errno as _errno
import json
import os
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
    def from_os_error(cls, path: str, e: OSError, action: str = "write") -> OutputError:
        name = _errno.errorcode.get(e.errno or 0)
        reason = f"{e.strerror or e}" + (f" [{name}]" if name else "")
        return cls(path, reason, e.errno, action, lost_dir=e.errno in (_errno.ENOENT, _errno.ESTALE))

    @property
    def advice(self) -> str:
        if self.lost_dir:
            return "the output directory was removed while the run was using it"
        return _ADVICE.get(self.errno or 0, "fix the cause")

    def __str__(self) -> str:
        return f"cannot {self.action} {self.path}: {self.reason}"


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
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.tmp")
    in_body = False
    try:
        with open(tmp, mode, encoding=None if "b" in mode else "utf-8") as f:
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
