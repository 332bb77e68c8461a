"""Whole-file writes that a crash cannot leave half-done: write a temporary file beside the
target, fsync it, ``os.replace`` it over the target, fsync the directory. Every output file of the
project that is (re)written as a whole goes through here; append-only result logs are
:class:`insight_o3.evaluation.records.RecordLog`.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager


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
def atomic_writer(path: str | os.PathLike, mode: str = "w") -> Iterator:
    """``with atomic_writer(p, "wb") as f: ...`` — ``p`` holds either its old content or all of the
    new one; on an exception the temporary file is removed and ``p`` is untouched."""
    path = os.fspath(path)
    tmp = os.path.join(os.path.dirname(path) or ".", f".{os.path.basename(path)}.{os.getpid()}.tmp")
    try:
        with open(tmp, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(path) or ".")


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_writer(path) as f:
        f.write(text)


def write_json_atomic(path: str | os.PathLike, obj, indent: int | None = 2) -> None:
    with atomic_writer(path) as f:
        json.dump(obj, f, indent=indent, ensure_ascii=False)
        f.write("\n")


def write_jsonl_atomic(path: str | os.PathLike, rows: Iterable[dict]) -> None:
    with atomic_writer(path) as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
