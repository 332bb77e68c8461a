"""Secrets stay in memory: the one place that knows the API keys of this process and removes them from text.

Every key reaches the clients through :func:`insight_o3.endpoints.client.resolve_key` or :func:`insight_o3.endpoints.client.make_client`,
which register it here; :func:`redact` then removes every registered key (and bearer tokens a server echoes
back) from any text bound for a record, a log line or stderr. Nothing else threads a redactor through:
failure reasons are made by :func:`failure_reason`, the run guard and the commands' stop messages call
:func:`redact`, and :func:`insight_o3.scripts._shared.setup_logging` installs :class:`RedactingFilter` on the log
handlers. Keys shorter than 4 characters and the placeholder ``EMPTY`` (local servers) are not secrets.

Base URLs carry secrets too: ``http://user:SECRET@host/v1`` and ``https://host/v1?api-key=SECRET``. :func:`redact`
masks the userinfo of every URL (``http://***@host/v1``) and the value of every query parameter whose name looks
like a key (:data:`_KEY_PARAM`: ``key``, ``token``, ``secret``, ``password``, ``sig`` … anywhere in the name),
whichever process wrote the URL; :func:`register_url` (called for every base URL a client is built with, by
:func:`insight_o3.endpoints.client.make_client`) also registers the URL's password,
``user:password`` and its base64 (the ``Authorization: Basic`` value a server may echo back in an error) and the
key-like query values, so they are removed wherever else they appear. :func:`redact_json` applies :func:`redact`
to every string of a JSON value: :func:`insight_o3.storage.atomic.write_json_atomic` writes through it, so no
``args.json``, ``run_card.json`` or other settings file holds a key or a URL credential.
"""

from __future__ import annotations

import base64
import logging
import re
import threading
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

_SECRETS: list[str] = []  # longest first, so a key containing another is removed whole
_LOCK = threading.Lock()
_BEARER = re.compile(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}")
#: ``Basic <base64 of user:password>`` (masked only when the word after "Basic" decodes to ``x:y``).
_BASIC = re.compile(r"(?i)(basic\s+)([A-Za-z0-9+/]{6,}={0,2})")
MASK = "***"
#: ``scheme://userinfo@`` (userinfo: anything up to the ``@`` before the host, no slash or space).
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s@?#\"'<>]+@")
#: A query parameter whose name looks like a credential; the value runs to ``&``, ``#``, a quote or a space.
_KEY_NAME = r"[A-Za-z0-9_.\-]*(?:key|token|secret|password|passwd|pwd|sig|signature|auth|credential)[A-Za-z0-9_.\-]*"
_KEY_PARAM = re.compile(rf"(?i)((?:[?&]|&amp;){_KEY_NAME}=)[^&#\s\"'<>]+")
_KEY_NAME_RE = re.compile(rf"(?i)^{_KEY_NAME}$")


def register_secret(*secrets: str | None) -> None:
    """Remember keys of this process so that :func:`redact` removes them."""
    new = {s for s in secrets if s and s != "EMPTY" and len(s) >= 4}
    with _LOCK:
        if new - set(_SECRETS):
            _SECRETS[:] = sorted(set(_SECRETS) | new, key=len, reverse=True)


def register_url(url: str | None) -> None:
    """Remember the secrets of a URL (password, ``user:password`` and its base64, key-like query values) so
    that :func:`redact` removes them from any text, not only from URLs."""
    if not url:
        return
    try:
        parts = urlsplit(url)
        user, password = parts.username, parts.password
    except ValueError:  # not a URL (a malformed port ...): nothing to take apart
        return
    found: list[str] = []
    if password:
        for u, p in {(user or "", password), (unquote(user or ""), unquote(password))}:
            found += [p, f"{u}:{p}", base64.b64encode(f"{u}:{p}".encode()).decode()]
    found += [v for k, v in parse_qsl(parts.query, keep_blank_values=False) if _KEY_NAME_RE.match(k)]
    register_secret(*found)


def redact(text: str) -> str:
    """``text`` without any registered key, echoed bearer/basic token, URL userinfo or key-like query value."""
    for s in list(_SECRETS):
        text = text.replace(s, MASK)
    text = _BEARER.sub(r"\1" + MASK, text)
    text = _BASIC.sub(_mask_basic, text)
    if "://" in text:
        text = _USERINFO.sub(r"\1" + MASK + "@", text)
    if "=" in text:
        text = _KEY_PARAM.sub(r"\1" + MASK, text)
    return text


def _mask_basic(m: re.Match) -> str:
    """``Basic ***`` when the word after "Basic" is the base64 of ``user:password``; else the text unchanged
    ("basic understanding" stays)."""
    try:
        decoded = base64.b64decode(m.group(2) + "=" * (-len(m.group(2)) % 4), validate=True).decode("utf-8")
    except (ValueError, UnicodeDecodeError):
        return m.group(0)
    return m.group(1) + MASK if ":" in decoded else m.group(0)


def redact_json(value: Any) -> Any:
    """``value`` (a JSON-ready object) with :func:`redact` applied to every string in it, keys included."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {redact(k) if isinstance(k, str) else k: redact_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_json(v) for v in value]
    return value


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
