"""Adaptive concurrency and request/token rate limits for one API endpoint.

An :class:`AdaptiveLimiter` sits under the ``openai`` SDK, in the HTTP client's ``send`` (see
:func:`limited_http_client`), so every HTTP attempt — the SDK's retries included — waits for a slot:

* **concurrency**: at most ``limit`` requests in flight; ``limit`` starts at ``--concurrency``. A
  lone 429 takes it down by one (the probe that found the edge); a storm — more 429s for requests
  sent before that first one — halves it, once per round (the next round starts with a 429 for a
  request sent after the last cut). It grows back by one after ``limit`` successes in a row, at most once per ``recover_interval``
  seconds (additive increase, multiplicative decrease);
* **Retry-After**: a 429's ``Retry-After``/``retry-after-ms`` pauses every new send of the endpoint
  until then (the SDK itself waits the same time before retrying that request);
* **rpm**: sends are spaced ``60/rpm`` seconds apart;
* **tpm**: a token bucket of ``tpm`` tokens refilled at ``tpm/60`` per second, debited by each
  response's ``usage`` (prompt + completion tokens); no send while it is below zero.

The SDK keeps doing the retrying (with its own backoff); this only decides when attempts go out.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from typing import Any, TypedDict

import openai


class LimiterStats(TypedDict):
    """What :meth:`AdaptiveLimiter.stats` reports (the run log's line on a throttled endpoint)."""

    limit: int
    lowest_limit: int
    max_concurrency: int
    throttled: int
    cuts: int
    rpm: float | None
    tpm: float | None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """Seconds from ``retry-after-ms`` or a numeric ``retry-after`` header (None otherwise)."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        v = headers.get(name)
        if v is None:
            continue
        try:
            sec = float(v) * scale
        except ValueError:
            continue  # an HTTP date: the SDK handles it for its retry; we do not pause the others
        if 0 <= sec <= 60:
            return sec
    return None


class AdaptiveLimiter:
    """Shared by the clients of one endpoint (``api.make_client(limiter=...)``); one event loop."""

    def __init__(
        self,
        concurrency: int,
        rpm: float | None = None,
        tpm: float | None = None,
        min_concurrency: int = 1,
        recover_interval: float = 1.0,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency must be at least 1")
        self.max_concurrency = concurrency
        self.min_concurrency = max(1, min(min_concurrency, concurrency))
        self.limit = concurrency
        self.rpm, self.tpm = rpm, tpm
        self.in_flight = 0
        self.throttled = 0  # 429 responses seen
        self.cuts = 0  # storms: times the limit was halved
        self.lowest_limit = concurrency
        self._interval = 60.0 / rpm if rpm else 0.0
        self._next_send = 0.0
        self._paused_until = 0.0
        self._last_cut = -1.0
        self._last_change = -1.0
        self._round_base, self._round_hits, self._round_halved = concurrency, 0, False
        self.recover_interval = recover_interval
        self._successes = 0
        self._tokens = float(tpm) if tpm else 0.0
        self._tokens_at = time.monotonic()
        self._cond: asyncio.Condition | None = None

    # -- token bucket -------------------------------------------------------------------------------
    def _refill(self, now: float) -> None:
        if self.tpm:
            self._tokens = min(float(self.tpm), self._tokens + (now - self._tokens_at) * self.tpm / 60.0)
        self._tokens_at = now

    def used_tokens(self, response: Any) -> None:
        """Debit a parsed response's usage from the tokens-per-minute bucket."""
        if not self.tpm:
            return
        u = getattr(response, "usage", None)
        if u is None:
            return
        self._refill(time.monotonic())
        self._tokens -= int(getattr(u, "prompt_tokens", 0) or 0) + int(getattr(u, "completion_tokens", 0) or 0)

    # -- slots --------------------------------------------------------------------------------------
    def _wait_time(self, now: float) -> float:
        wait = max(self._paused_until - now, self._next_send - now, 0.0)
        if self.tpm:
            self._refill(now)
            if self._tokens < 0:
                wait = max(wait, -self._tokens / (self.tpm / 60.0))
        return wait

    async def acquire(self) -> float:
        """Wait for a slot; returns the send time (pass it to :meth:`release`)."""
        if self._cond is None:
            self._cond = asyncio.Condition()
        async with self._cond:
            while True:
                now = time.monotonic()
                wait = self._wait_time(now)
                if wait <= 0 and self.in_flight < self.limit:
                    self.in_flight += 1
                    if self._interval:
                        self._next_send = max(self._next_send, now) + self._interval
                    return now
                try:
                    await asyncio.wait_for(self._cond.wait(), timeout=wait if wait > 0 else None)
                except asyncio.TimeoutError:
                    pass

    def release(self, sent_at: float, status: int | None, retry_after: float | None = None) -> None:
        """One attempt sent at ``sent_at`` ended with HTTP ``status`` (None: no response)."""
        self.in_flight -= 1
        now = time.monotonic()
        if status == 429:
            self.throttled += 1
            self._successes = 0
            if sent_at >= self._last_cut:  # the first 429 of a new round: back off the probe by one
                self._round_base, self._round_hits, self._round_halved = self.limit, 1, False
                self.limit = max(self.min_concurrency, self.limit - 1)
                self._last_cut = self._last_change = now
            else:  # more 429s of requests sent before that: a storm, halve once per round
                self._round_hits += 1
                if not self._round_halved:
                    self.limit = max(self.min_concurrency, self._round_base // 2)
                    self._round_halved = True
                    self.cuts += 1
            self.lowest_limit = min(self.lowest_limit, self.limit)
            if retry_after:
                self._paused_until = max(self._paused_until, now + retry_after)
        elif status is not None and status < 400:
            self._successes += 1
            if (
                self._successes >= self.limit
                and self.limit < self.max_concurrency
                and now - self._last_change >= self.recover_interval
            ):
                self.limit += 1
                self._successes = 0
                self._last_change = now
        if self._cond is not None:
            asyncio.ensure_future(self._notify())

    async def _notify(self) -> None:
        cond = self._cond
        if cond is None:
            return
        async with cond:
            cond.notify_all()

    def stats(self) -> LimiterStats:
        return {
            "limit": self.limit,
            "lowest_limit": self.lowest_limit,
            "max_concurrency": self.max_concurrency,
            "throttled": self.throttled,
            "cuts": self.cuts,
            "rpm": self.rpm,
            "tpm": self.tpm,
        }


def limited_http_client(limiter: AdaptiveLimiter, base: type | None = None, **kwargs: Any) -> Any:
    """An async HTTP client (``base``: a subclass of the SDK's default one, default that one itself) whose
    every ``send`` first waits for a slot of ``limiter``."""

    class LimitedHttpClient(base or openai.DefaultAsyncHttpxClient):  # type: ignore[misc]
        async def send(self, request: Any, **kw: Any) -> Any:
            sent_at = await limiter.acquire()
            status, retry_after = None, None
            try:
                response = await super().send(request, **kw)
                status = response.status_code
                if status == 429:
                    retry_after = retry_after_seconds(response.headers)
                return response
            finally:
                limiter.release(sent_at, status, retry_after)

    return LimitedHttpClient(**kwargs)
