"""OpenAI-compatible clients: one place that builds them, resolves keys and keeps keys secret.

Retries and backoff are the ``openai`` SDK's own (it honours ``Retry-After`` and retries 408/409/
429/5xx and connection errors); we only configure them.
"""
from __future__ import annotations

import os
import re

import httpx
from openai import AsyncOpenAI

DEFAULT_MAX_RETRIES = 5
#: Env vars consulted when a flag is not given, per role, in order.
ENV_KEYS = {
    "main": (("OPENAI_API_KEY",), ("OPENAI_BASE_URL",)),
    "judge": (("JUDGE_API_KEY", "OPENAI_API_KEY"), ("JUDGE_API_BASE_URL", "JUDGE_BASE_URL", "OPENAI_BASE_URL")),
    "vsearcher": (("VSEARCHER_API_KEY",), ("VSEARCHER_API_BASE_URL", "VSEARCHER_BASE_URL")),
}


def resolve(flag_value: str | None, env_names: tuple[str, ...], default: str | None = None) -> str | None:
    if flag_value:
        return flag_value
    for name in env_names:
        if os.environ.get(name):
            return os.environ[name]
    return default


def make_client(api_key: str | None, base_url: str | None, timeout: float | None = None,
                max_retries: int = DEFAULT_MAX_RETRIES, max_connections: int = 256) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` with our retry/timeout policy. ``api_key`` may be empty for local servers."""
    limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
    return AsyncOpenAI(
        api_key=api_key or "EMPTY",
        base_url=base_url,
        timeout=timeout if timeout is not None else 600.0,
        max_retries=max_retries,
        http_client=httpx.AsyncClient(limits=limits, timeout=timeout if timeout is not None else 600.0),
    )


class Redactor:
    """Removes secrets from text before it reaches a log, a record or an error message."""

    def __init__(self, *secrets: str | None):
        self._secrets = sorted({s for s in secrets if s and s != "EMPTY" and len(s) >= 4}, key=len, reverse=True)

    def __call__(self, text: str) -> str:
        for s in self._secrets:
            text = text.replace(s, "***")
        # bearer tokens echoed back by servers
        return re.sub(r"(?i)(bearer\s+)[A-Za-z0-9._\-]{8,}", r"\1***", text)
