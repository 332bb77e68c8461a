"""Endpoints checked up front: before the first item, every endpoint a run will call is asked once.

Each :class:`~insight_o3.endpoints.endpoint.Endpoint` a run calls (with the role it plays: base URL, key, and the
variable the key was to come from, if one was named) is checked by :func:`check_endpoints` with one ``GET <base_url>/models`` — the OpenAI models list, which vLLM,
SGLang and the OpenAI API all serve and which costs no tokens (asked through the openai SDK, without retries). It stops the run with :class:`EndpointError`
(exit status 4, one line naming the role and the redacted URL) when

* a key variable the command was told to read (``check_reliability --checker "m,URL,ENV"``,
  ``--judge_api_key_env``) is not set;
* no base URL is configured and there is no key either (the SDK would call api.openai.com anonymously);
* the endpoint cannot be reached (connection refused, DNS, TLS, no complete answer within the timeout — a
  total deadline: a server trickling a byte at a time is cut off at it, and a signal ends the check at once);
* it answers 401 or 403 (the key is refused).

Any other answer (200, or a 404/405 from a server without a models list, or a 5xx) counts as reachable:
the run's own guard (:mod:`insight_o3.endpoints.guard`) judges the real requests. Identical endpoints are asked
once. ``--skip_endpoint_check`` skips the check. :func:`~insight_o3.jobs.execute.execute` runs it after its
clients are made and before the first item starts.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable

import openai

from ..base.redaction import redact, register_url
from .client import DeadlineHttpClient
from .endpoint import ENV_KEYS, SDK_DEFAULT_URL, Endpoint
from .guard import RunStopped

log = logging.getLogger(__name__)

#: Seconds each endpoint has to answer the check (all of it: connecting to the last byte).
CHECK_TIMEOUT = 10.0


class EndpointError(RunStopped):
    """An endpoint that cannot serve the run (exit status 4); ``str()`` is one line naming role and URL."""

    resume_hint = None


def url_of(ep: Endpoint) -> str:
    """Where the SDK sends ``ep``'s requests."""
    return ep.base_url or SDK_DEFAULT_URL


def shown(role: str, ep: Endpoint) -> str:
    """``"<role> endpoint <redacted URL>"`` for a message."""
    where = redact(url_of(ep)) + (" (the SDK default: no base URL configured)" if not ep.base_url else "")
    return f"{role} endpoint {where}"


def key_variables(role: str, ep: Endpoint) -> tuple[str, ...]:
    """The environment variables a key for ``ep`` is read from (the one the command named, else its role's)."""
    if ep.key_env:
        return (ep.key_env,)
    return ENV_KEYS[{"judge": "judge", "vsearcher": "vsearcher"}.get(role.lower(), "main")][0]


def _reason(e: openai.APIConnectionError) -> str:
    if isinstance(e, openai.APITimeoutError):
        return "no answer in time"
    chain: list[BaseException] = []
    cause: BaseException | None = e
    while cause is not None and cause not in chain and len(chain) < 8:  # the async HTTP stack nests its causes
        chain.append(cause)
        cause = cause.__cause__ or cause.__context__
    if any(isinstance(c, ConnectionRefusedError) for c in chain):
        return "connection refused"
    texts = [str(c) or type(c).__name__ for c in chain[1:] or chain]
    for known in ("Connection refused", "Name or service not known", "nodename nor servname", "certificate"):
        if any(known.lower() in t.lower() for t in texts):
            return known.lower()
    return redact(texts[0])[:200]


def check_endpoint(role: str, ep: Endpoint, timeout: float = CHECK_TIMEOUT) -> int:
    """Check one endpoint the run calls as ``role`` (see the module docstring); the HTTP status of its models list."""
    return asyncio.run(acheck_endpoint(role, ep, timeout))


async def acheck_endpoint(role: str, ep: Endpoint, timeout: float = CHECK_TIMEOUT) -> int:
    """:func:`check_endpoint` in the running event loop: cancelled at once when the run is stopped."""
    register_url(ep.base_url)
    if ep.key_env and not os.environ.get(ep.key_env):
        raise EndpointError(f"{shown(role, ep)}: its key variable ${ep.key_env} is not set")
    if not ep.base_url and not ep.api_key:
        keys = " or ".join(f"${v}" for v in key_variables(role, ep))
        raise EndpointError(
            f"{shown(role, ep)}: no key either; set {keys} (or pass the role's --*api_key flag), or give the base URL "
            "of your server (or its environment variable)"
        )
    client = openai.AsyncOpenAI(
        api_key=ep.api_key or "EMPTY",
        base_url=url_of(ep),
        max_retries=0,
        timeout=timeout,
        http_client=DeadlineHttpClient(deadline=timeout, timeout=timeout),
    )
    try:
        await client.models.list()
        return 200
    except (openai.AuthenticationError, openai.PermissionDeniedError) as e:
        raise EndpointError(
            f"{shown(role, ep)} refused the key (HTTP {e.status_code}); check the key for this role"
        ) from None
    except openai.APIStatusError as e:  # answered: reachable (a server without a models list, a 5xx)
        return e.status_code
    except openai.APIConnectionError as e:
        raise EndpointError(
            f"{shown(role, ep)} is unreachable ({_reason(e)}); check the URL or that the server is up"
        ) from None
    except ValueError:  # answered 200 with a body that is no models list (or too large): reachable
        return 200
    finally:
        await client.close()


#: An endpoint as a run calls it: (its role in messages — "model", "judge", "vSearcher", ... —, the endpoint).
Called = tuple[str, Endpoint]


def check_endpoints(endpoints: Iterable[Called], timeout: float = CHECK_TIMEOUT) -> None:
    """Check every ``(role, endpoint)`` once (the same URL and key are asked once); raises :class:`EndpointError`."""
    asyncio.run(acheck_endpoints(endpoints, timeout))


async def acheck_endpoints(endpoints: Iterable[Called], timeout: float = CHECK_TIMEOUT) -> None:
    """:func:`check_endpoints` in the running event loop (a stopped run cancels it at once)."""
    seen: set[tuple[str, str | None]] = set()
    for role, ep in endpoints:
        if ep.key_env and not os.environ.get(ep.key_env):
            await acheck_endpoint(role, ep, timeout)  # raises: named variable unset
        if (url_of(ep), ep.api_key) in seen:
            continue
        seen.add((url_of(ep), ep.api_key))
        status = await acheck_endpoint(role, ep, timeout)
        log.info("%s reachable (models list: HTTP %d)", redact(shown(role, ep)), status)
