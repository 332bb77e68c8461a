"""Crash-safe result files.

``RecordLog`` is an append-only JSONL file: every record is one complete line handed to a single
``os.write`` on an ``O_APPEND`` descriptor and fsync'ed before the call returns, so a run killed at
any moment (SIGKILL included) leaves at most one torn last line, which :meth:`RecordLog.open`
truncates away. Records are keyed by ``sample_key``; the last record of a key wins (re-tried
failures are appended), and :meth:`RecordLog.compact` rewrites the file atomically with one line
per key. Whole-file outputs go through :mod:`insight_o3.atomic_io`.

A write the system refuses (disk full, permissions, read-only file system) raises
:class:`~insight_o3.atomic_io.OutputError` and leaves the file exactly as it was before the call: a
line written in part is truncated away, so the next record can never be glued to half of this one
into a complete but corrupt line. A file deleted under a running log (its directory removed) is
detected on the next append instead of writing on into a file nobody can see.
"""
from __future__ import annotations

import json
import logging
import os
import threading

from ..atomic_io import OutputError, atomic_writer, write_json_atomic

log = logging.getLogger(__name__)


class RecordFileError(ValueError):
    """A results file that is corrupt beyond a torn last line (names file and line)."""


def touch_atomic(path: str) -> None:
    write_json_atomic(path, {"done": True})


class RecordLog:
    """The records of one trial; ``records`` maps ``sample_key`` to the latest record."""

    def __init__(self, path: str):
        self.path = path
        self.records: dict[str, dict] = {}
        self.n_lines = 0
        self._fd: int | None = None
        self._lock = threading.Lock()

    @classmethod
    def open(cls, path: str) -> "RecordLog":
        """Load existing records (dropping a torn last line) and open the file for appending."""
        self = cls(path)
        if os.path.exists(path):
            self._load()
        self._fd = self._open_append(os.O_CREAT)
        return self

    def _open_append(self, extra_flags: int = 0) -> int:
        try:
            return os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC | extra_flags, 0o644)
        except OSError as e:
            raise OutputError.from_os_error(self.path, e, "open for writing") from None

    def _load(self) -> None:
        try:
            with open(self.path, "rb") as f:
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
                parsed.append(rec)
            except ValueError as e:
                if i == len(complete) and not tail:
                    # an unparsable last line: torn by a crash, drop it like a line without "\n"
                    keep_bytes -= len(raw) + 1
                    tail = raw
                    break
                raise RecordFileError(f"{self.path}:{i}: corrupt result record ({e}); "
                                      f"move the file away to start this trial again") from None
        if tail:
            log.warning("%s: dropping a torn last line (%d bytes) left by an interrupted run", self.path, len(tail))
            try:
                with open(self.path, "r+b") as f:
                    f.truncate(keep_bytes)
                    f.flush()
                    os.fsync(f.fileno())
            except OSError as e:
                raise OutputError.from_os_error(self.path, e, "truncate the torn last line of") from None
        for rec in parsed:
            self.records[str(rec["sample_key"])] = rec
        self.n_lines = len(parsed)

    def append(self, record: dict) -> None:
        """Durably append one record (thread-safe; call from a worker thread to keep loops free).

        Raises :class:`OutputError` if the line cannot be written and fsync'ed; the file is then
        truncated back to where it was, and ``records`` is unchanged."""
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
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
            self.records[str(record["sample_key"])] = record
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
                        f.write((json.dumps(self.records[key], ensure_ascii=False) + "\n").encode("utf-8"))
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
