"""Crash-safe result files.

``RecordLog`` is an append-only JSONL file: every record is one complete line handed to a single
``os.write`` on an ``O_APPEND`` descriptor and fsync'ed before the call returns, so a run killed at
any moment (SIGKILL included) leaves at most one torn last line, which :meth:`RecordLog.open`
truncates away. Records are keyed by ``sample_key``; the last record of a key wins (re-tried
failures are appended), and :meth:`RecordLog.compact` rewrites the file atomically with one line
per key. A log may be typed: ``RecordLog.open(path, parse=EvalRecord.from_dict)`` validates each
line with ``parse(obj, "<file>:<line>")`` and keeps the parsed objects; records with a ``to_dict``
method are written as its result. Whole-file outputs go through :mod:`insight_o3.storage.atomic`.

A record is never unwritable for its text: one holding code points UTF-8 cannot encode (lone surrogates
from a server; :mod:`insight_o3.base.untrusted` escapes them where replies enter, this is the backstop) is
written with them escaped (``\ud800``) and ``"escaped_text": true`` added to its line, with a warning,
so one bad record costs neither the run nor the next one.

A log never reads, appends to or truncates through a symbolic link (``O_NOFOLLOW``): one at its path is refused
with :class:`~insight_o3.storage.atomic.LinkedOutput` (bad input), so a copied run directory cannot send a
resumed run's writes outside it.

A write the system refuses (disk full, permissions, read-only file system) raises
:class:`~insight_o3.storage.atomic.OutputError` and leaves the file exactly as it was before the call: a
line written in part is truncated away, so the next record can never be glued to half of this one
into a complete but corrupt line. A file deleted under a running log (its directory removed) is
detected on the next append instead of writing on into a file nobody can see.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from collections.abc import Callable
from typing import Any

from ..base.untrusted import escape_strings
from .atomic import OutputError, atomic_writer, open_no_follow, refuse_link, write_json_atomic

log = logging.getLogger(__name__)


class RecordFileError(ValueError):
    """A results file that is corrupt beyond a torn last line (names file and line)."""


def touch_atomic(path: str) -> None:
    write_json_atomic(path, {"done": True})


def _key(record: Any) -> str:
    return str(record["sample_key"] if isinstance(record, dict) else record.sample_key)


#: Added to a record line whose text had to be escaped when it was written.
ESCAPED_MARK = "escaped_text"


def _line(record: Any) -> bytes:
    obj = record.to_dict() if hasattr(record, "to_dict") else record
    text = json.dumps(obj, ensure_ascii=False)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:
        clean, n = escape_strings(json.loads(text))  # a copy: the caller's record is left as it is
        if isinstance(clean, dict):
            clean[ESCAPED_MARK] = True
        log.warning("record %s: %d string(s) with code points UTF-8 cannot hold were escaped", _key(record), n)
        return (json.dumps(clean, ensure_ascii=False) + "\n").encode("utf-8")


class RecordLog:
    """The records of one trial; ``records`` maps ``sample_key`` to the latest record."""

    def __init__(self, path: str, parse: Callable[[dict, str], Any] | None = None):
        self.path = path
        self.parse = parse
        self.records: dict[str, Any] = {}
        self.n_lines = 0
        self._fd: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str, parse: Callable[[dict, str], Any] | None = None) -> RecordLog:
        """Load existing records (dropping a torn last line) and open the file for appending.

        ``parse(obj, where)``, if given, turns each loaded line into the record kept in ``records``
        (and raises, naming ``where`` = ``"<file>:<line>"``, for one that does not fit)."""
        self = cls(path, parse)
        refuse_link(path)  # a link would send the appends and the truncation of a torn line to its target
        if os.path.lexists(path):
            self._load()
        self._fd = self._open_append(os.O_CREAT)
        return self

    def _open_append(self, extra_flags: int = 0) -> int:
        try:
            return open_no_follow(self.path, os.O_WRONLY | os.O_APPEND | extra_flags)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, "open for writing") from None

    def _load(self) -> None:
        try:
            with open(open_no_follow(self.path, os.O_RDONLY), "rb") as f:
                data = f.read()
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, "read") from None
        lines = data.split(b"\n")
        # data ends with "\n" -> last element is b""; otherwise the last element is a torn line
        tail, complete = lines[-1], lines[:-1]
        keep_bytes = len(data) - len(tail)
        parsed = []
        for i, raw in enumerate(complete, start=1):
            try:
                rec = json.loads(raw)
                if not isinstance(rec, dict) or "sample_key" not in rec:
                    raise ValueError("not a record object")
                parsed.append((i, rec))
            except ValueError as e:
                if i == len(complete) and not tail:
                    # an unparsable last line: torn by a crash, drop it like a line without "\n"
                    keep_bytes -= len(raw) + 1
                    tail = raw
                    break
                raise RecordFileError(
                    f"{self.path}:{i}: corrupt result record ({e}); move the file away to start this trial again"
                ) from None
        if tail:
            log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", self.path, len(tail))
            try:
                with open(open_no_follow(self.path, os.O_RDWR), "r+b") as f:
                    f.truncate(keep_bytes)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise OutputError.from_os_error(self.path, e, "truncate the torn last line of") from None
        for i, rec in parsed:
            if self.parse is not None:  # a complete line that does not fit the schema is an error, never "torn"
                rec = self.parse(rec, f"{self.path}:{i}")
            self.records[_key(rec)] = rec
        self.n_lines = len(parsed)

    def append(self, record: Any) -> None:
        """Durably append one record — a dict, or an object with ``sample_key`` and ``to_dict()`` (an
        :class:`~insight_o3.evaluation.schema.EvalRecord`) — thread-safe; call it from a worker thread.

        Raises :class:`OutputError` if the line cannot be written and fsync'ed; the file is then
        truncated back to where it was, and ``records`` is unchanged."""
        line = _line(record)
        with self._lock:
            if self._fd is None:
                raise RuntimeError(f"{self.path} is closed")
            fd = self._fd
            try:
                st = os.fstat(fd)
                if st.st_nlink == 0:  # deleted (or its directory removed) under the run
                    raise FileNotFoundError(2, "the file was deleted while the run was writing it")
                start = st.st_size
            except OSError as e:
                raise OutputError.from_os_error(self.path, e, "append to") from None
            try:
                view = memoryview(line)
                while view:  # regular files write everything at once; loop only for short writes
                    n = os.write(fd, view)
                    view = view[n:]
                os.fsync(fd)
            except OSError as e:
                self._truncate_back(fd, start)
                raise OutputError.from_os_error(self.path, e, "append to") from None
            self.records[_key(record)] = record
            self.n_lines += 1

    def _truncate_back(self, fd: int, size: int) -> None:
        """Drop a partly written line (shrinking a file needs no free space)."""
        try:
            os.ftruncate(fd, size)
            os.fsync(fd)
        except OSError as e:  # the torn tail stays; RecordLog.open drops it on the next run
            log.warning("%s: could not truncate a partly written line (%s); the next run drops it", self.path, e)

    def compact(self, order: list[str]) -> None:
        """Rewrite the file atomically with exactly one line per key, in ``order``."""
        with self._lock:
            with atomic_writer(self.path, "wb") as f:
                for key in order:
                    if key in self.records:
                        f.write(_line(self.records[key]))
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None
            self._fd = self._open_append()
            self.n_lines = sum(1 for k in order if k in self.records)

    def close(self) -> None:
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None


def has_lines(path: str) -> bool:
    """Whether the log at ``path`` exists and holds anything but whitespace (a record, or a torn one)."""
    try:
        with open(path, "rb") as f:
            return any(chunk.strip() for chunk in iter(lambda: f.read(1 << 16), b""))
    except OSError:
        return False
