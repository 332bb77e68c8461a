"""Reading JSON-lines input files, with errors that name the file and the line.

Every input reader of the project (benchmark annotations, localization data, collage source pools,
the training-data packer) goes through :func:`iter_jsonl`, so bad input is reported the same way
everywhere: ``<file>:<line>: <what is wrong>``. Lines are untrusted JSON (:func:`insight_o3.base.untrusted.loads`:
nesting, integers and non-finite numbers bounded, the field named) of at most :data:`MAX_LINE_BYTES` bytes, read
no further than that; a UTF-8 byte order mark at the start of the file is skipped.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ..base.json_types import JSONObject
from ..base.untrusted import UntrustedJSONError, loads

#: Bytes one line of an input file may have (annotation rows are a few kB; a line past this is refused unread).
MAX_LINE_BYTES = 16 * 2**20
_BOM = b"\xef\xbb\xbf"


def iter_jsonl(
    path: str | os.PathLike, error: type[Exception] = ValueError, what: str = "annotation file"
) -> Iterator[tuple[str, int, JSONObject]]:
    """Yield ``(where, line_no, obj)`` for each non-blank line (``where`` is ``"<path>:<line_no>"``).

    Raises ``error`` for a missing file, a line that is not UTF-8, malformed JSON, or a line that is
    not a JSON object.
    """
    path = str(path)
    if not os.path.isfile(path):
        raise error(f"{path}: {what} not found")
    with open(path, "rb") as f:
        line_no = 0
        while raw := f.readline(MAX_LINE_BYTES + 1):
            line_no += 1
            where = f"{path}:{line_no}"
            if line_no == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if len(raw) > MAX_LINE_BYTES:
                raise error(f"{where}: the line is longer than {MAX_LINE_BYTES} bytes") from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise error(f"{where}: not valid UTF-8 ({e.reason} at byte {e.start})") from None
            if not text.strip():
                continue
            try:
                obj = loads(text)
            except UntrustedJSONError as e:
                raise error(f"{where}: {e.msg}") from None
            except ValueError as e:  # json.JSONDecodeError
                raise error(
                    f"{where}: malformed JSON ({getattr(e, 'msg', e)} at column {getattr(e, 'colno', 0)})"
                ) from None
            if not isinstance(obj, dict):
                raise error(f"{where}: expected a JSON object, got {type(obj).__name__}")
            yield where, line_no, obj
