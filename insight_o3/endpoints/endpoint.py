"""Where an OpenAI-compatible model is served and how a client reaches it: :class:`Endpoint`, the one endpoint type.

A command builds each endpoint once from its flags and the environment (:func:`resolve`, :func:`resolve_key`,
:data:`ENV_KEYS`); below the commands an endpoint is only passed on — to
:func:`~insight_o3.endpoints.client.make_client`, to a job's ``client`` and to the check before the first item
(:mod:`insight_o3.endpoints.preflight`). The key lives in memory only: it is left out of ``repr`` (so of every log
line, error and test failure that prints the object) and of :meth:`Endpoint.public`, and it is registered for
redaction when it is resolved.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from ..base.redaction import register_secret

__all__ = ["ENV_KEYS", "Endpoint", "resolve", "resolve_key"]

log = logging.getLogger(__name__)

#: Env vars consulted when a flag is not given, per role, in order: (key variables, base-URL variables).
ENV_KEYS = {
    "main": (("OPENAI_API_KEY",), ("OPENAI_BASE_URL",)),
    "judge": (("JUDGE_API_KEY", "OPENAI_API_KEY"), ("JUDGE_API_BASE_URL", "JUDGE_BASE_URL", "OPENAI_BASE_URL")),
    "vsearcher": (("VSEARCHER_API_KEY",), ("VSEARCHER_API_BASE_URL", "VSEARCHER_BASE_URL")),
    "summary": (("SUMMARY_API_KEY",), ("SUMMARY_API_BASE_URL",)),
}


@dataclass(frozen=True, kw_only=True)
class Endpoint:
    """An OpenAI-compatible endpoint: its base URL (None: the SDK's default address), its key (never in a
    ``repr``), ``key_env`` — the variable the command was told to read the key from, which must then be set —
    and the SDK's ``timeout`` (the total deadline of each HTTP attempt, seconds) and ``max_retries`` per request
    (None: the client's defaults)."""

    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    key_env: str | None = None
    timeout: float | None = None
    max_retries: int | None = None

    def public(self) -> JSONObject:
        """What a card may say about it: the address, never the key."""
        return {"api_base_url": self.base_url}


def resolve(flag_value: str | None, env_names: tuple[str, ...], default: str | None = None) -> str | None:
    """A flag's value, else the first of ``env_names`` set, else ``default``."""
    if flag_value:
        return flag_value
    for name in env_names:
        if os.environ.get(name):
            return os.environ[name]
    return default


def resolve_key(
    flag_value: str | None, env_names: tuple[str, ...], default: str | None = None, flag: str = "--api_key"
) -> str | None:
    """An API key from its flag or the first env var set (see :data:`ENV_KEYS`), registered as a secret. A key
    given as a flag gets a warning: the command line is visible to every user of the machine (``ps``,
    ``/proc/<pid>/cmdline``) and stays in the shell's history; an env var is not."""
    if flag_value and flag_value != "EMPTY":
        log.warning(
            "%s on the command line is visible to other users of this machine (ps) and in your shell history; "
            "set %s instead",
            flag,
            f"${env_names[0]}" if env_names else "it in the environment",
        )
    key = resolve(flag_value, env_names, default)
    register_secret(key)
    return key
