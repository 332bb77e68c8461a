"""The InSight-o3 solver for ``insight_o3.scripts.evaluate`` (``--vsearcher_model``): ``n`` trials
of a sample are ``n`` independent vReasoner + vSearcher episodes, run concurrently."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from ..base.caps import DEFAULT_MAX_REPLY_CHARS
from ..endpoints.client import make_client
from ..endpoints.guard import RunGuard
from ..endpoints.rate_limit import AdaptiveLimiter
from ..imaging.images import ImageStore
from ..protocol.agent_catalog import INSIGHT_O3
from ..protocol.attempt import Attempt
from ..protocol.questions import insight_o3_question
from .config import InSightO3Config
from .drivers import AnswerResult, InSightO3, VSearcher
from .tool_agents import AgentSpec

if TYPE_CHECKING:
    from openai import AsyncOpenAI


def to_attempt(r: AnswerResult) -> Attempt:
    return Attempt(
        r.text, r.finish_reason, error=r.error, trajectory=r.trajectory, usage=r.usage or None, stats=r.stats
    )


class InSightO3Solver:
    """:class:`~insight_o3.protocol.attempt.Solver` over an :class:`InSightO3` system."""

    def __init__(self, system: InSightO3, clients: tuple[AsyncOpenAI, ...] = ()):
        self.system = system
        self._clients = clients

    async def solve(self, sample: Any, n: int) -> list[Attempt]:
        question = insight_o3_question(sample)
        results = await asyncio.gather(*(self.system.answer(sample.image_path, question) for _ in range(n)))
        return [to_attempt(r) for r in results]

    async def aclose(self) -> None:
        for c in self._clients:
            await c.close()

    @classmethod
    def build(
        cls,
        config: InSightO3Config,
        images: ImageStore,
        *,
        guard: RunGuard | None = None,
        limiter: AdaptiveLimiter | None = None,
        vsearcher_limiter: AdaptiveLimiter | None = None,
        max_reply_chars: int | None = DEFAULT_MAX_REPLY_CHARS,
    ) -> InSightO3Solver:
        """The solver of ``config``: one client per endpoint (closed by :meth:`aclose`), each through its
        limiter; ``guard`` counts their failures; a reply body is read up to the cap of ``max_reply_chars``
        (:func:`insight_o3.base.caps.reply_body_cap`). The clients register their keys for redaction
        (:mod:`insight_o3.base.redaction`)."""
        r_client = make_client(
            config.reasoner_api, role="vReasoner", guard=guard, limiter=limiter, max_reply_chars=max_reply_chars
        )
        s_client = make_client(
            config.searcher_api,
            role="vSearcher",
            guard=guard,
            limiter=vsearcher_limiter,
            max_reply_chars=max_reply_chars,
        )
        searcher = VSearcher.from_settings(config.searcher, s_client, images)
        return cls(InSightO3.from_settings(config.reasoner, r_client, searcher, images), (r_client, s_client))


SPEC = AgentSpec(
    name=INSIGHT_O3.name,
    protocol_version="insight_o3:vreasoner+vsearcher@926d137",
    description=INSIGHT_O3.description,
    alpha="white",
    keeps_originals=True,
)
