"""A rate-limiting wrapper for the scripted OpenAI server's scripts (the server itself is unchanged).

``RateLimitedScript(script, rate=..., max_in_flight=..., latency=...)`` is itself a script for
:class:`~tests.support.openai_server.ScriptedOpenAIServer`: like a real provider it answers 429 with
``Retry-After`` when a request would exceed

* ``rate`` requests per ``window`` seconds (a sliding window), or
* ``max_in_flight`` requests being served at once (each takes ``latency`` seconds),

and otherwise the wrapped script's reply. It keeps when each accepted request started and ended, so a
test can measure the wall time of the work against the ideal for the limit.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from tests.support.openai_server import Call, Reply, error


class RateLimitedScript:
    def __init__(
        self,
        script,
        rate: float | None = None,
        window: float = 1.0,
        max_in_flight: int | None = None,
        latency: float = 0.0,
        retry_after: float | None = None,
    ):
        self.script = script
        self.rate, self.window, self.max_in_flight, self.latency = rate, window, max_in_flight, latency
        self.retry_after = retry_after
        self.accepted: list[tuple[float, float]] = []  # (start, end) of every served request
        self.throttled = 0
        self.peak_in_flight = 0
        self._recent: deque[float] = deque()
        self._in_flight = 0
        self._lock = threading.Lock()

    def _admit(self, now: float) -> float | None:
        """None when the request may be served, else the seconds to wait (under the lock)."""
        while self._recent and self._recent[0] <= now - self.window:
            self._recent.popleft()
        if self.rate is not None and len(self._recent) >= self.rate * self.window:
            return max(0.01, self._recent[0] + self.window - now)
        if self.max_in_flight is not None and self._in_flight >= self.max_in_flight:
            return self.retry_after if self.retry_after is not None else max(0.01, self.latency / 2)
        self._recent.append(now)
        self._in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self._in_flight)
        return None

    def __call__(self, request: dict, call: Call) -> Reply:
        start = time.monotonic()
        with self._lock:
            wait = self._admit(start)
            if wait is not None:
                self.throttled += 1
        if wait is not None:
            return error(
                429,
                "Rate limit reached, please try again later",
                retry_after=round(self.retry_after if self.retry_after is not None else wait, 3),
            )
        try:
            if self.latency:
                time.sleep(self.latency)
            return self.script(request, call)
        finally:
            with self._lock:
                self._in_flight -= 1
                self.accepted.append((start, time.monotonic()))

    @property
    def wall(self) -> float:
        """From the first served request's start to the last one's end."""
        return max(e for _, e in self.accepted) - min(s for s, _ in self.accepted)
