"""The client's defaults and log settings that a command needs before it talks to any server (its ``--help``, its
logging set-up). They live apart from :mod:`insight_o3.endpoints.client` and :mod:`insight_o3.endpoints.guard` so
that building a command's parser imports neither the openai SDK nor asyncio (a ``--help`` starts in a blink)."""

from __future__ import annotations

import logging

__all__ = [
    "DEFAULT_MAX_FAILURE_RATIO",
    "DEFAULT_MAX_RETRIES",
    "DEFAULT_MIN_REQUESTS",
    "DEFAULT_TIMEOUT",
    "quiet_http_logs",
]

#: The openai SDK's retries per request (``--max_retries``).
DEFAULT_MAX_RETRIES = 5
#: The total deadline of each HTTP attempt, seconds (``--client_timeout``).
DEFAULT_TIMEOUT = 600.0
#: A run stops once more than this share of its requests failed after retries (``--max_failure_ratio``).
DEFAULT_MAX_FAILURE_RATIO = 0.5
#: The failure ratio is only judged once this many requests of the run have finished.
DEFAULT_MIN_REQUESTS = 20


def quiet_http_logs() -> None:
    """No INFO line per HTTP request from the SDK's HTTP package (``httpx`` or ``httpx2``)."""
    for name in ("httpx", "httpx2"):
        logging.getLogger(name).setLevel(logging.WARNING)
