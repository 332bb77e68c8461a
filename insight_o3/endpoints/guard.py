"""Why a long run stops early, and how the stop reads.

A :class:`RunGuard` is shared by every API client of one run (see :func:`insight_o3.endpoints.client.make_client`).
It is *tripped* by

* the first 401/403/404 from any endpoint (:class:`FatalAPIError`): a wrong key, model name or base
  URL fails every request alike, so recording them one by one as failed samples only wastes the run;
* an endpoint whose requests mostly fail (:class:`FailureRatioError`): more than ``max_failure_ratio`` of
  at least ``min_requests`` requests of this run *to one endpoint* (model, judge, vSearcher: counted per
  client role) lost after the SDK's retries. Counting per endpoint matters: a dead judge among a healthy
  model's successes would otherwise never reach the ratio, and every sample would fail one by one.

The guard is also the run's ledger per endpoint (:class:`EndpointCounts`): requests that succeeded and
failed, and what :mod:`insight_o3.base.untrusted` found in the replies (text escaped, usage invalid or missing),
which a job writes into its run card (:meth:`RunGuard.ledger`).

Once tripped, clients send nothing more, :func:`gather_or_stop` cancels the work in flight and raises
the error, and the runners record nothing more (what is in flight may carry the failure that stopped
the run; a rerun asks for it again). :func:`insight_o3.scripts._shared.report_stop` turns every way a run can stop
on purpose (these two, a budget, an unwritable output, another run holding the directory) into one line
and an exit code. Messages are redacted here (:func:`insight_o3.base.redaction.redact`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from dataclasses import asdict, dataclass, field

from ..base.exit_codes import ExitCode
from ..base.json_types import JSONObject
from ..base.redaction import redact
from ..base.untrusted import ReplyCheck
from .defaults import DEFAULT_MAX_FAILURE_RATIO as DEFAULT_MAX_FAILURE_RATIO
from .defaults import DEFAULT_MIN_REQUESTS as DEFAULT_MIN_REQUESTS

#: Exit codes of the stops (aliases; the one table is :class:`insight_o3.base.exit_codes.ExitCode`).
EXIT_BAD_INPUT = ExitCode.BAD_INPUT
EXIT_OUTPUT_ERROR = ExitCode.OUTPUT_ERROR
EXIT_API_STOP = ExitCode.STOPPED
EXIT_LOCKED = ExitCode.LOCKED


class RunStopped(Exception):
    """Base of the errors that stop a run on purpose; ``str()`` is one line. ``resume_hint`` ends the
    message of :func:`report_stop` (None where the message itself says how to go on)."""

    resume_hint: str | None = "rerun the same command to resume"


class FatalAPIError(RunStopped):
    def __init__(self, role: str, url: str, status: int, detail: str):
        super().__init__(role, url, status, detail)
        self.role, self.url, self.status, self.detail = role, url, status, detail

    def __str__(self) -> str:
        return (
            f"the {self.role} endpoint answered HTTP {self.status} for POST {self.url} ({self.detail}); "
            f"stopped after the first such response — check the key, the model name and the base URL"
        )


class FailureRatioError(RunStopped):
    """Too many of one endpoint's requests failed; names the endpoint (``role`` and ``url``)."""

    def __init__(self, role: str, url: str | None, failed: int, total: int, max_ratio: float, last: str):
        super().__init__(role, url, failed, total, max_ratio, last)
        self.role, self.url = role, url
        self.failed, self.total, self.max_ratio, self.last = failed, total, max_ratio, last

    def __str__(self) -> str:
        at = f" at {self.url}" if self.url else ""
        return (
            f"the {self.role} endpoint{at} failed {self.failed} of its {self.total} requests of this run after "
            f"retries (more than --max_failure_ratio {self.max_ratio:g}); last failure: {self.last}"
        )


@dataclass
class EndpointCounts:
    """One endpoint's requests in this run (after the SDK's retries) and what its replies needed."""

    url: str | None = None
    ok: int = 0
    failed: int = 0
    escaped_replies: int = 0  # replies whose text had code points UTF-8 cannot hold (escaped)
    invalid_usage: int = 0  # replies whose usage was not non-negative integers (dropped: counted as missing)
    missing_usage: int = 0  # replies without usage (invalid ones included): token counts are lower bounds
    sent: int = field(default=0, repr=False)  # requests sent (the SDK's retries not counted)

    @property
    def total(self) -> int:
        return self.ok + self.failed

    @property
    def unanswered(self) -> int:
        """Requests sent whose outcome never came (cancelled when the run stopped)."""
        return max(0, self.sent - self.total)

    def to_dict(self) -> JSONObject:
        out: JSONObject = {k: v for k, v in asdict(self).items() if k != "sent"}
        if self.unanswered:  # written only when not 0, so finished runs' entries look as they did
            out["unanswered"] = self.unanswered
        return out


class RunGuard:
    """Counts request outcomes of one run per endpoint and trips on the first fatal response or on one
    endpoint's too many failures.

    Not thread-safe by design: clients report from the event loop that runs the requests."""

    def __init__(
        self,
        max_failure_ratio: float = DEFAULT_MAX_FAILURE_RATIO,
        min_requests: int = DEFAULT_MIN_REQUESTS,
    ):
        if not 0 < max_failure_ratio <= 1:
            raise ValueError("max_failure_ratio must be in (0, 1]")
        self.max_failure_ratio, self.min_requests = max_failure_ratio, max(1, min_requests)
        self.endpoints: dict[str, EndpointCounts] = {}
        self.error: RunStopped | None = None
        self._event: asyncio.Event | None = None

    def endpoint(self, role: str, url: str | None = None) -> EndpointCounts:
        """The counts of the endpoint ``role`` (created on first use; ``url`` kept, redacted)."""
        ep = self.endpoints.get(role)
        if ep is None:
            ep = self.endpoints[role] = EndpointCounts()
        if url and ep.url is None:
            ep.url = redact(url)
        return ep

    @property
    def ok(self) -> int:
        return sum(e.ok for e in self.endpoints.values())

    @property
    def failed(self) -> int:
        return sum(e.failed for e in self.endpoints.values())

    @property
    def total(self) -> int:
        return self.ok + self.failed

    @property
    def tripped(self) -> bool:
        return self.error is not None

    def check(self) -> None:
        """Raise the stop error if the run is stopping."""
        if self.error is not None:
            raise self.error

    def trip(self, error: RunStopped) -> None:
        if self.error is None:
            self.error = error
            if self._event is not None:
                self._event.set()

    def fatal(self, role: str, url: str, status: int, detail: str) -> None:
        self.endpoint(role).failed += 1
        self.trip(FatalAPIError(role, redact(url), status, redact(detail)))

    def request_sent(self, role: str, url: str | None = None) -> None:
        """A request to endpoint ``role`` is sent (:meth:`request_done` follows unless the run is cancelled first)."""
        self.endpoint(role, url).sent += 1

    def request_done(self, role: str, failure: str | None, url: str | None = None) -> None:
        """One request to endpoint ``role`` (at ``url``) finished (``failure`` None) or was lost after the
        SDK's retries."""
        ep = self.endpoint(role, url)
        if failure is None:
            ep.ok += 1
            return
        ep.failed += 1
        if ep.total >= self.min_requests and ep.failed > self.max_failure_ratio * ep.total:
            last = redact(failure)[:500]
            self.trip(FailureRatioError(role, ep.url, ep.failed, ep.total, self.max_failure_ratio, last))

    def reply_checked(self, role: str, check: ReplyCheck) -> EndpointCounts:
        """Count what :func:`insight_o3.base.untrusted.check_reply` did to one reply of endpoint ``role``."""
        ep = self.endpoint(role)
        ep.escaped_replies += int(check.escaped > 0)
        ep.invalid_usage += int(check.usage == "invalid")
        ep.missing_usage += int(check.usage != "ok")
        return ep

    def ledger(self) -> dict[str, JSONObject]:
        """Per endpoint role: its URL, requests ok/failed and reply problems (for the run card)."""
        return {role: ep.to_dict() for role, ep in self.endpoints.items()}

    async def wait(self) -> RunStopped:
        if self._event is None:
            self._event = asyncio.Event()
            if self.error is not None:
                self._event.set()
        await self._event.wait()
        assert self.error is not None
        return self.error


async def gather_or_stop(aws: Iterable[Awaitable], guard: RunGuard | None = None) -> list:
    """``asyncio.gather`` that stops early: the first exception of any awaitable, or a trip of
    ``guard``, cancels all the others (waiting for them to unwind) and is raised."""
    tasks = [asyncio.ensure_future(a) for a in aws]
    if not tasks:
        return []
    everything = asyncio.gather(*tasks)
    stop = asyncio.ensure_future(guard.wait()) if guard is not None else None
    try:
        await asyncio.wait([everything] + ([stop] if stop is not None else []), return_when=asyncio.FIRST_COMPLETED)
        if everything.done():
            return everything.result()  # raises the first exception of any task
        assert guard is not None and guard.error is not None  # only the guard's stop ends the wait early
        raise guard.error
    finally:
        if stop is not None:
            stop.cancel()
        pending = [t for t in tasks if not t.done()]
        for t in pending:
            t.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)
        if not everything.done():
            everything.cancel()
        if everything.done() and not everything.cancelled():
            everything.exception()  # retrieved: no "exception was never retrieved" noise
