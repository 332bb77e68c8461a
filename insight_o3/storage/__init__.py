"""Durable files: whole-file atomic writes (:mod:`.atomic`), append-only crash-safe record logs
(:mod:`.record_log`) and JSON-lines input reading with file:line errors (:mod:`.jsonl`).

Neutral ground for every part of the project that writes results or reads JSONL (evaluation, data
pipelines, scripts, the verl recipe), so none of them depends on another's package for its I/O.
"""

from .atomic import OutputError, atomic_writer, fsync_dir, write_json_atomic, write_jsonl_atomic, write_text_atomic
from .jsonl import iter_jsonl
from .record_log import RecordFileError, RecordLog, touch_atomic

__all__ = [
    "OutputError",
    "atomic_writer",
    "fsync_dir",
    "write_json_atomic",
    "write_jsonl_atomic",
    "write_text_atomic",
    "iter_jsonl",
    "RecordFileError",
    "RecordLog",
    "touch_atomic",
]
