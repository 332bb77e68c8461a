"""Secrets stay in memory: the one place that knows the API keys of this process and removes them from text.

Every key reaches the clients through :func:`insight_o3.api.resolve_key` or :func:`insight_o3.api.make_client`,
which register it here; :func:`redact` then removes every registered key (and bearer tokens a server echoes
back) from any text bound for a record, a log line or stderr. Nothing else threads a redactor through:
failure reasons are made by :func:`failure_reason`, the run guard and the commands' stop messages call
:func:`redact`, and :func:`insight_o3.cli.setup_logging` installs :class:`RedactingFilter` on the log
handlers. Keys shorter than 4 characters and the placeholder ``EMPTY`` (local servers) are not secrets.
"""

from __future__ import annotations

import logging
import re
import threading

_SECRETS: list[str] = []  # longest first, so a key containing another is removed whole
_LOCK = threading.Lock()
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")
MASK = "***"


def register_secret(*secrets: str | None) -> None:
    """Remember keys of this process so that :func:`redact` removes them."""
    new = {s for s in secrets if s and s != "EMPTY" and len(s) >= 4}
    with _LOCK:
        if new - set(_SECRETS):
            _SECRETS[:] = sorted(set(_SECRETS) | new, key=len, reverse=True)


def redact(text: str) -> str:
    """``text`` without any registered key or echoed bearer token."""
    for s in list(_SECRETS):
        text = text.replace(s, MASK)
    return _BEARER.sub(r"\1" + MASK, text)


def failure_reason(e: BaseException, limit: int | None = None) -> str:
    """The redacted ``"<ExceptionType>: <message>"`` a failed record carries (cut to ``limit`` chars)."""
    text = redact(f"{type(e).__name__}: {e}")
    return text if limit is None else text[:limit]


class Redactor:
    """``Redactor(key, ...)`` registers the keys it is given; calling it is :func:`redact` (every key
    known to the process is removed, not only its own)."""

    def __init__(self, *secrets: str | None):
        register_secret(*secrets)

    def __call__(self, text: str) -> str:
        return redact(text)


class RedactingFilter(logging.Filter):
    """Redacts each log record's final message (arguments included) before a handler writes it."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        clean = redact(msg)
        if clean != msg:
            record.msg, record.args = clean, None
        return True
