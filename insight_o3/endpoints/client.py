"""OpenAI-compatible clients: one place that builds them, resolves keys and keeps keys secret.

Retries and backoff are the ``openai`` SDK's own (it honours ``Retry-After`` and retries 408/409/
429/5xx and connection errors); we only configure them. The HTTP client is the SDK's own factory
(``openai.DefaultAsyncHttpxClient``: ``httpx`` under openai 1.x/2.x, ``httpx2`` under 3.x), so
this module imports no HTTP package itself.

A client is made for one :class:`~insight_o3.endpoints.endpoint.Endpoint` (address, key, timeout, retries): keys are
resolved by :func:`~insight_o3.endpoints.endpoint.resolve_key` and registered again by :func:`make_client` with
:mod:`insight_o3.base.redaction`, so every message that leaves the process has them removed.

A client built with a :class:`~insight_o3.endpoints.guard.RunGuard` reports the outcome of every request
(after the SDK's retries) to it: the first 401/403/404 from the endpoint stops the run (a wrong key or
model name fails every request alike), and so does an endpoint whose requests mostly fail.

Every reply is untrusted: before anything else reads it, :func:`insight_o3.base.untrusted.check_reply` escapes
text that cannot be stored as UTF-8 and drops usage that is not non-negative integers; what it found is
counted per endpoint by the guard and logged (once per endpoint and kind).

The timeout (``--client_timeout``) is a **total deadline per HTTP attempt**: connecting, sending and
receiving the whole reply must finish within it (:class:`DeadlineHttpClient`), so a server that trickles a
byte every few seconds cannot hold a request past it — the SDK's own timeout only bounds each read. An
attempt past its deadline is a timeout to the SDK, which retries it (``--max_retries``) with a fresh deadline.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import logging
import os
import ssl
import zlib
from typing import TYPE_CHECKING, Any, NoReturn

import openai
from openai import AsyncOpenAI

from ..base.caps import DEFAULT_MAX_REPLY_CHARS, MAX_REPLY_BYTES, reply_body_cap
from ..base.redaction import redact, register_secret, register_url
from ..base.untrusted import MalformedReply, ReplyCheck, check_reply
from .defaults import DEFAULT_MAX_RETRIES as DEFAULT_MAX_RETRIES
from .defaults import DEFAULT_TIMEOUT as DEFAULT_TIMEOUT
from .defaults import quiet_http_logs as quiet_http_logs
from .endpoint import Endpoint
from .usage import record_response

if TYPE_CHECKING:
    from .guard import RunGuard
    from .rate_limit import AdaptiveLimiter

log = logging.getLogger(__name__)

#: Responses that no retry or later request can fix: the run stops at the first one.
FATAL_STATUSES = {
    401: "unauthorized: wrong or missing API key",
    403: "forbidden: the key may not use this model or endpoint",
    404: "not found: wrong model name or base URL",
}


def _limits(max_connections: int) -> Any:
    """The connection limits object of whichever HTTP package this SDK version uses."""
    return type(openai.DEFAULT_CONNECTION_LIMITS)(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )


class DeadlineHttpClient(openai.DefaultAsyncHttpxClient):
    """The SDK's default async HTTP client with a total ``deadline`` (seconds) per ``send``: connecting,
    the request and the whole reply body (the SDK reads non-streamed bodies inside ``send``). Past it,
    the SDK sees its HTTP package's ``ReadTimeout`` and retries as for any timeout. A non-streamed body is
    read here, decoded, and refused (:class:`~insight_o3.base.untrusted.MalformedReply`) once it passes
    ``max_body_bytes``. Redirects are not followed: one is refused the same way, naming where it pointed."""

    def __init__(self, *, deadline: float, max_body_bytes: int = MAX_REPLY_BYTES, **kwargs: Any) -> None:
        kwargs.setdefault("verify", tls_context())
        super().__init__(**kwargs)
        self.deadline = deadline
        self.max_body_bytes = max_body_bytes

    async def send(self, request: Any, *, stream: bool = False, **kw: Any) -> Any:
        kw["follow_redirects"] = False  # a redirect would re-send the request (its key, its images) elsewhere
        try:
            async with asyncio.timeout(self.deadline):
                response = await super().send(request, stream=True, **kw)
                if response.is_redirect:
                    await response.aclose()
                    where = redact(str(response.headers.get("location", "")))[:200]
                    raise MalformedReply(
                        f"the server redirected the request (HTTP {response.status_code} to {where}); not followed: "
                        f"a redirect would send the request body again, possibly to another host — use the final URL"
                    )
                if not stream:
                    await read_capped(response, self.max_body_bytes)
                return response
        except TimeoutError:
            raise _http_package().ReadTimeout(
                f"no complete reply within the {self.deadline:g} s deadline of this attempt (client_timeout)",
                request=request,
            ) from None


async def read_capped(response: Any, limit: int) -> None:
    """Read ``response``'s decoded body into it (as ``aread`` does), refusing it once it passes ``limit`` bytes —
    while decoding: a ``gzip``/``deflate`` body is inflated here, each step's output bounded by what is left of
    ``limit`` (:class:`_BoundedInflater`), so a compressed bomb never inflates past the cap, not even for one
    network chunk (the HTTP package's own decoder inflates a 64 KiB chunk of a bomb to ~64 MiB at once). Other
    encodings (``br``, ``zstd``, chains) are decoded by the HTTP package, checked after each chunk."""
    chunks: list[bytes] = []
    size = 0

    def take(data: bytes) -> None:
        nonlocal size
        size += len(data)
        if size > limit:
            raise MalformedReply(f"the reply body is larger than {limit} bytes (decoded); refused while reading")
        chunks.append(data)

    inflater = _BoundedInflater.of(response.headers.get("content-encoding", ""))
    try:
        if inflater is None:
            async for chunk in response.aiter_bytes():
                take(chunk)
        else:
            async for raw in response.aiter_raw():
                while raw:
                    out, raw = inflater.inflate(raw, limit - size + 1)  # never more than one byte past the cap
                    take(out)
            take(inflater.flush())
    finally:
        await response.aclose()
    response._content = b"".join(chunks)  # what aread() sets: the body, read once


class _BoundedInflater:
    """``gzip``/``deflate`` decoding whose every step returns at most a given number of bytes (``zlib``'s
    ``max_length``). ``deflate`` is zlib-wrapped or raw, as the HTTP package accepts it."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._d: Any = None

    @classmethod
    def of(cls, content_encoding: str) -> _BoundedInflater | None:
        encoding = content_encoding.strip().lower()
        return cls(encoding) if encoding in ("gzip", "x-gzip", "deflate") else None

    def inflate(self, data: bytes, max_out: int) -> tuple[bytes, bytes]:
        """(up to ``max_out`` decoded bytes, the input not consumed yet)."""
        if self._d is None:
            if self.encoding == "deflate":
                wrapped = len(data) >= 2 and data[0] & 0x0F == 8 and ((data[0] << 8) | data[1]) % 31 == 0
                wbits = zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS
            else:
                wbits = 16 + zlib.MAX_WBITS
            self._d = zlib.decompressobj(wbits)
        try:
            out = self._d.decompress(data, max_out)
        except zlib.error as e:
            raise MalformedReply(f"the reply body is not valid {self.encoding} ({e})") from None
        return out, self._d.unconsumed_tail

    def flush(self) -> bytes:
        if self._d is None:
            return b""
        try:
            return self._d.flush()
        except zlib.error as e:
            raise MalformedReply(f"the reply body is not valid {self.encoding} ({e})") from None


def tls_context() -> ssl.SSLContext:
    """The HTTP package's default TLS context (certifi's CAs, or ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR``), built once
    per process and CA setting and shared by every client: building one reads the whole CA bundle (~45 ms of CPU),
    and a process makes a client per endpoint and per run — a test session, thousands."""
    return _tls_context(os.environ.get("SSL_CERT_FILE"), os.environ.get("SSL_CERT_DIR"))


@functools.lru_cache(maxsize=4)
def _tls_context(cert_file: str | None, cert_dir: str | None) -> ssl.SSLContext:
    """Keyed by the variables the HTTP package reads (its trust_env rule), which it reads itself."""
    return _http_package().create_ssl_context()


def _http_package() -> Any:
    """``httpx`` (openai 1.x/2.x) or ``httpx2`` (3.x): the package of the SDK's timeout type."""
    return importlib.import_module(type(openai.DEFAULT_CONNECTION_LIMITS).__module__.split(".")[0])


def make_client(
    endpoint: Endpoint,
    *,
    max_connections: int = 256,
    role: str = "model",
    guard: RunGuard | None = None,
    limiter: AdaptiveLimiter | None = None,
    max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS,
    choices: int = 1,
) -> AsyncOpenAI:
    """An ``AsyncOpenAI`` for ``endpoint`` with our retry/timeout policy (its key may be empty for local servers).

    The endpoint's ``timeout``: the total deadline of each HTTP attempt in seconds (see the module docstring;
    None: :data:`DEFAULT_TIMEOUT`); its ``max_retries``: the SDK's (None: :data:`DEFAULT_MAX_RETRIES`). ``role``
    names the endpoint in messages ("model", "judge", "vSearcher", ...); with ``guard`` (a
    :class:`~insight_o3.endpoints.guard.RunGuard`) every request's outcome is reported to it; with
    ``limiter`` (a :class:`~insight_o3.endpoints.rate_limit.AdaptiveLimiter`) every HTTP attempt, retries
    included, waits for a slot of it (outside the deadline) and reports 429s to it. A reply body is read up to
    :func:`~insight_o3.base.caps.reply_body_cap` bytes of the run's ``max_reply_chars`` for replies of ``choices``
    choices at most (the largest ``n`` the client's requests ask for), and refused past that.
    """
    register_secret(endpoint.api_key)
    register_url(endpoint.base_url)
    timeout = endpoint.timeout if endpoint.timeout is not None else DEFAULT_TIMEOUT
    max_retries = endpoint.max_retries if endpoint.max_retries is not None else DEFAULT_MAX_RETRIES
    http_kwargs = dict(
        limits=_limits(max_connections),
        timeout=timeout,
        deadline=timeout,
        max_body_bytes=reply_body_cap(max_reply_chars, choices),
    )
    if limiter is None:
        http_client = DeadlineHttpClient(**http_kwargs)
    else:
        from .rate_limit import limited_http_client  # only runs with a limiter need it

        http_client = limited_http_client(limiter, base=DeadlineHttpClient, **http_kwargs)
    kwargs = dict(
        api_key=endpoint.api_key or "EMPTY",
        base_url=endpoint.base_url,
        timeout=timeout,
        max_retries=max_retries,
        http_client=http_client,
    )
    return GuardedAsyncOpenAI(role=role, guard=guard, limiter=limiter, **kwargs)


class GuardedAsyncOpenAI(AsyncOpenAI):
    """``AsyncOpenAI`` whose requests report to a run guard (when given) and whose responses' token
    usage goes to the current usage meter (:mod:`insight_o3.endpoints.usage`) and, with a
    :class:`~insight_o3.endpoints.rate_limit.AdaptiveLimiter`, to its tokens-per-minute budget. Every API call of
    the SDK's resources (``chat.completions.create`` …) goes through :meth:`post`, after the SDK's own
    retries."""

    def __init__(
        self, *, role: str, guard: RunGuard | None = None, limiter: AdaptiveLimiter | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.role, self.guard, self.limiter = role, guard, limiter

    async def post(self, path: str, *args: Any, **kwargs: Any) -> Any:
        if self.guard is not None:
            self.guard.check()  # a stopping run sends nothing more
            self.guard.request_sent(self.role, self._base())
        try:
            result = await super().post(path, *args, **kwargs)
        except asyncio.CancelledError:
            raise
        except openai.APIStatusError as e:
            if self.guard is None:
                raise
            if e.status_code in FATAL_STATUSES:
                self.guard.fatal(
                    self.role,
                    _url(e, self, path),
                    e.status_code,
                    f"{FATAL_STATUSES[e.status_code]}; the server said: {_server_message(e)}",
                )
            else:
                self.guard.request_done(self.role, f"{type(e).__name__}: {_server_message(e)}", self._base())
            raise
        except openai.APIError as e:  # connection errors, timeouts, malformed responses
            refused = e.__cause__ if isinstance(e.__cause__, MalformedReply) else None  # a body over the cap
            if self.guard is not None:
                self.guard.request_done(self.role, f"{type(refused or e).__name__}: {refused or e}", self._base())
            if refused is not None:
                raise refused from None
            raise
        except RecursionError:  # the SDK's JSON parser on a body nested past the interpreter's limit
            self._malformed(MalformedReply("the reply is nested too deeply to parse"))
        try:  # first: the error text below may hold what it escapes
            check = check_reply(result, chat=str(path).rstrip("/").endswith("/chat/completions"))
        except MalformedReply as e:
            self._malformed(e)
        self._checked(check)
        error = error_in_reply(result)
        if error is not None:
            if self.guard is not None:
                self.guard.request_done(self.role, f"{ErrorReply.__name__}: {error}", self._base())
            raise ErrorReply(error)
        if self.guard is not None:
            self.guard.request_done(self.role, None, self._base())
        record_response(self.role, result)
        if self.limiter is not None:
            self.limiter.used_tokens(result)
        return result

    def _base(self) -> str:
        return str(self.base_url)

    def _malformed(self, e: MalformedReply) -> NoReturn:
        """Count a reply nobody can use as a failed request, and raise it."""
        if self.guard is not None:
            self.guard.request_done(self.role, f"{type(e).__name__}: {e}", self._base())
        raise e

    _warned_redacted = False

    def _checked(self, check: ReplyCheck) -> None:
        """Count (with a guard) and log what :func:`~insight_o3.base.untrusted.check_reply` found in a reply:
        each kind once per endpoint when counted, else every time."""
        if check == ReplyCheck():
            return
        if check.redacted and not self._warned_redacted:
            self._warned_redacted = True
            log.warning(
                "the %s endpoint sent a reply holding an API key of this run; it is stored and passed on as ***",
                self.role,
            )
        seen = self.guard.reply_checked(self.role, check) if self.guard is not None else None
        if check.escaped and (seen is None or seen.escaped_replies == 1):
            log.warning(
                "the %s endpoint sent text that cannot be stored as UTF-8 (lone surrogates); %d string(s) of the "
                "reply were escaped (\\udXXX) — the run card counts such replies",
                self.role,
                check.escaped,
            )
        if check.usage != "ok" and (seen is None or seen.missing_usage == 1):
            what = "usage that is not non-negative integers (dropped)" if check.usage == "invalid" else "no usage"
            log.warning(
                "the %s endpoint sent a reply with %s: counted in the records' unreported_requests, and token "
                "totals, costs and --max_tokens_total are lower bounds from here on",
                self.role,
                what,
            )


class ErrorReply(ValueError):
    """A reply with status 200 whose body is an error object instead of a result (some proxies and
    servers answer so when the model fails); the message is the server's (a ``ValueError``, so it is one of
    :data:`insight_o3.endpoints.errors.EXPECTED_ERRORS`: the attempt is recorded as failed with it)."""


def error_in_reply(result: Any, limit: int = 300) -> str | None:
    """``"the server replied 200 with an error: <its message>"`` when ``result`` (a parsed response) has
    no ``choices`` but an ``error`` object; None for any other result."""
    if getattr(result, "choices", None):
        return None
    extra = getattr(result, "model_extra", None)
    error = extra.get("error") if isinstance(extra, dict) else None
    if error is None:
        return None
    msg = error.get("message") if isinstance(error, dict) else None
    text = " ".join(str(msg if msg is not None else json.dumps(error, default=str)).split())
    return "the server replied 200 with an error: " + (text if len(text) <= limit else text[:limit] + "…")


def _url(e: openai.APIError, client: AsyncOpenAI, path: str) -> str:
    try:
        return str(e.request.url)
    except Exception:  # noqa: BLE001 - an error without its request: rebuild the URL
        return f"{str(client.base_url).rstrip('/')}/{str(path).lstrip('/')}"


def _server_message(e: openai.APIError, limit: int = 300) -> str:
    body = getattr(e, "body", None)
    msg = body.get("message") if isinstance(body, dict) else None
    text = " ".join(str(msg or getattr(e, "message", None) or e).split())
    return text if len(text) <= limit else text[:limit] + "…"
