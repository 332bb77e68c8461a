"""Where an OpenAI-compatible model is served and how a client reaches it: :class:`Endpoint`, the one endpoint type.

A command builds each endpoint once from its flags and the environment (:func:`resolve`, :func:`resolve_key`,
:data:`ENV_KEYS`); below the commands an endpoint is only passed on — to
:func:`~insight_o3.endpoints.client.make_client`, to a job's ``client`` and to the check before the first item
(:mod:`insight_o3.endpoints.preflight`). The key lives in memory only: it is left out of ``repr`` (so of every log
line, error and test failure that prints the object) and of :meth:`Endpoint.public`, and it is registered for
redaction when it is resolved.

Where each URL and key came from is said once at a command's start (:class:`Sourced`, :func:`describe`); a key
borrowed from another role goes only to the host it belongs to (:func:`borrowed_key`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from urllib.parse import urlsplit

from ..base.json_types import JSONObject
from ..base.redaction import redact, register_secret
from ..base.setting_kinds import Kind, kind_field

__all__ = [
    "DEMO_KEY",
    "ENV_KEYS",
    "PUBLIC_KEYS",
    "SDK_DEFAULT_URL",
    "Endpoint",
    "KeyHostError",
    "Sourced",
    "borrowed_key",
    "describe",
    "host_of",
    "resolve",
    "resolve_key",
    "sourced",
]

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

    base_url: str | None = kind_field(Kind.OPERATIONAL, setting="api_base_url", default=None)
    api_key: str | None = kind_field(Kind.SECRET, default=None, repr=False)
    key_env: str | None = None
    timeout: float | None = kind_field(Kind.OPERATIONAL, setting="client_timeout", default=None)
    max_retries: int | None = kind_field(Kind.OPERATIONAL, default=None)

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
    if flag_value and flag_value not in PUBLIC_KEYS:
        log.warning(
            "%s on the command line is visible to other users of this machine (ps) and in your shell history; "
            "set %s instead",
            flag,
            f"${env_names[0]}" if env_names else "it in the environment",
        )
    key = resolve(flag_value, env_names, default)
    register_secret(key)
    return key


#: The key the keyless demo sends its scripted endpoints (they refuse a request without one, as a real server).
DEMO_KEY = "scripted-demo-key"
#: Key values that are no secret (vLLM's placeholder, the demo's): given as a flag, they are not warned about.
PUBLIC_KEYS = frozenset({"EMPTY", DEMO_KEY})
#: Where the openai SDK sends requests when no base URL is given.
SDK_DEFAULT_URL = "https://api.openai.com/v1"


@dataclass(frozen=True)
class Sourced:
    """A URL or a key and where it came from (``--api_key``, ``$OPENAI_API_KEY``, "the model's endpoint", ...):
    what a command states at its start, never the key itself. ``home``: for a key borrowed from another role, the
    address it belongs to (it may go to that host only)."""

    value: str | None
    source: str
    home: str | None = None

    def __repr__(self) -> str:  # a key's value never in a repr
        return f"Sourced(source={self.source!r}, set={self.value is not None})"


def sourced(flag_value: str | None, flag: str, env_names: tuple[str, ...]) -> Sourced:
    """A value from its flag or the first env var set, with where it came from (``none`` when neither is set)."""
    if flag_value:
        return Sourced(flag_value, flag)
    for name in env_names:
        if os.environ.get(name):
            return Sourced(os.environ[name], f"${name}")
    return Sourced(None, "none")


def host_of(url: str | None) -> str:
    """The host name of a base URL (lower case; the SDK's default address when None): a key belongs to a host, so
    two servers on one host (two ports of 127.0.0.1) share it."""
    return (urlsplit(url or SDK_DEFAULT_URL).hostname or "").lower()


class KeyHostError(ValueError):
    """A key borrowed from another role would go to a host it does not belong to (bad input, exit 2)."""


def borrowed_key(
    role: str,
    url: Sourced,
    own: Sourced,
    lender: str,
    lender_url: Sourced,
    lender_key: Sourced,
    allow_other_host: bool = False,
) -> Sourced:
    """The key ``role`` sends: its own (``own``: its flag or variable), else ``lender``'s key (e.g. the model's, for
    the judge) — only to the host the lender sends it to (``lender_url``; unset: the SDK's default), so a key is
    never sent to a server it was not meant for; ``allow_other_host`` (the commands' ``--allow_key_to_other_host``)
    lifts that. Raises :class:`KeyHostError`."""
    if own.value is not None or lender_key.value is None:
        return own
    home = lender_url.value or SDK_DEFAULT_URL  # where the lender itself sends that key
    if not allow_other_host and host_of(url.value) != host_of(home):
        raise KeyHostError(
            f"the {role} has no key of its own and the {lender}'s ({lender_key.source}) belongs to {redact(host_of(home))}, "
            f"not to the {role}'s {redact(host_of(url.value))} ({url.source}): it is not sent there. Give the {role} "
            f"its own key (its variable or flag), or allow the {lender}'s key there (setting allow_key_to_other_host)"
        )
    return Sourced(lender_key.value, f"{lender_key.source} (the {lender}'s key)", home)


def describe(role: str, url: Sourced, key: Sourced) -> str:
    """One line stating where ``role``'s requests go and where its key comes from (the key itself never)."""
    where = redact(url.value) if url.value else f"{SDK_DEFAULT_URL} (the SDK's default)"
    return f"{role}: {where} (from {url.source}); key from {key.source if key.value else 'nowhere (none sent)'}"
