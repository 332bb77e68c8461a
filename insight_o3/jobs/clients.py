"""The clients a run's work makes (:class:`Clients`): each reports to the run's guard, is checked before the first
item (:func:`~insight_o3.jobs.execute.execute`) and is closed, with the other resources registered, when the work
is over."""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

from openai import AsyncOpenAI

from ..endpoints.client import make_client
from ..endpoints.endpoint import Endpoint
from ..endpoints.guard import RunGuard
from ..endpoints.preflight import Called

log = logging.getLogger(__name__)


class Clients:
    """``async with Clients(run.guard) as clients:`` — the endpoints a run calls (those given and one per
    :meth:`client`) and what to close at the end (:meth:`on_close`)."""

    def __init__(self, guard: RunGuard, endpoints: Iterable[Called] = ()):
        self.guard = guard
        self.endpoints: list[Called] = list(endpoints)
        self._closers: list[Callable[[], Any]] = []

    def client(self, endpoint: Endpoint, *, role: str = "model", **kwargs: Any) -> AsyncOpenAI:
        """A client of ``endpoint`` reporting to the run's guard (see :func:`insight_o3.endpoints.client.make_client`),
        closed at the end; the endpoint is checked before the first item."""
        self.endpoints.append((role, endpoint))
        c = make_client(endpoint, role=role, guard=self.guard, **kwargs)
        self.on_close(c.close)
        return c

    def on_close(self, close: Callable[[], Any]) -> None:
        """Call ``close`` (a function or a coroutine function) when the work is over (the last registered first)."""
        self._closers.append(close)

    async def __aenter__(self) -> Clients:
        return self

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for close in reversed(self._closers):
            try:
                res = close()
                if inspect.isawaitable(res):
                    await res
            except Exception:  # noqa: BLE001 - closing must not hide how the run ended
                log.warning("closing %r failed", close, exc_info=True)
        self._closers.clear()
