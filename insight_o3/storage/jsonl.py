"""Reading JSON-lines input files, with errors that name the file and the line.

Every input reader of the project (benchmark annotations, localization data, collage source pools,
the training-data packer) goes through :func:`iter_jsonl`, so bad input is reported the same way
everywhere: ``<file>:<line>: <what is wrong>``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator


def iter_jsonl(
    path: str | os.PathLike, error: type[Exception] = ValueError, what: str = "annotation file"
) -> Iterator[tuple[str, int, dict]]:
    """Yield ``(where, line_no, obj)`` for each non-blank line (``where`` is ``"<path>:<line_no>"``).

    Raises ``error`` for a missing file, a line that is not UTF-8, malformed JSON, or a line that is
    not a JSON object.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise error(f"{path}: {what} not found")
    with open(path, "rb") as f:
        for line_no, raw in enumerate(f, start=1):
            where = f"{path}:{line_no}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{where}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise error(f"{where}: malformed JSON ({e.msg} at column {e.colno})") from None
            if not isinstance(obj, dict):
                raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
            yield where, line_no, obj
