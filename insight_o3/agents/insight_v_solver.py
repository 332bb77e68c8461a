"""The Insight-V solver: the reasoning agent and the summary agent (:mod:`.insight_v`) behind two OpenAI-compatible
endpoints (the same server by default: the release derives both agents from one model), ``n`` trials being ``n``
independent episodes run concurrently.

Each episode is two requests: the reasoner's (its messages with the sample's image, the original file as is, as the
release hands the file to its image processor), then the summariser's with the chain. A request lost after the SDK's
retries ends the episode as a failed attempt (never judged), its ``stats`` saying which agent lost it; an image the
store cannot read fails every trial (``image error``). The summary is the attempt's text (what the judge reads);
``stats`` hold the chain (also handed to the judge: ``judge_also``), the reasoner's finish reason and the form of
its ``<thoughts>`` span, and each agent's token usage is counted under its client's role (``model`` for the
reasoner, ``summary`` for the summariser).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..base.json_types import JSONObject
from ..base.redaction import failure_reason
from ..endpoints.chat import chat_once
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.images import EncodedImage, ImageError, ImageStore, Resize
from ..protocol.attempt import Attempt
from ..protocol.statuses import InsightVAgent
from ..protocol.trajectory import image_part, to_openai
from .insight_v import REASONER_KWARGS, SUMMARY_KWARGS, InsightVEpisode


class InsightVSolver:
    """:class:`~insight_o3.protocol.attempt.Solver` of Insight-V's two agents (see the module docstring).
    ``*_kwargs``: each agent's request settings over the release's (:data:`.insight_v.REASONER_KWARGS`,
    :data:`.insight_v.SUMMARY_KWARGS`); ``owned``: clients this solver closes (the summariser's, when it made one)."""

    def __init__(
        self,
        reasoner: Any,  # AsyncOpenAI
        reasoner_model: str,
        summary: Any,
        summary_model: str,
        images: ImageStore,
        *,
        reasoner_kwargs: Mapping[str, Any] | None = None,
        summary_kwargs: Mapping[str, Any] | None = None,
        owned: tuple[Any, ...] = (),
    ):
        self.reasoner, self.reasoner_model = reasoner, reasoner_model
        self.summary, self.summary_model = summary, summary_model
        self.images = images
        self.reasoner_kwargs = {**REASONER_KWARGS, **(reasoner_kwargs or {})}
        self.summary_kwargs = {**SUMMARY_KWARGS, **(summary_kwargs or {})}
        for kw in (self.reasoner_kwargs, self.summary_kwargs):
            if "n" in kw:
                raise ValueError("'n' is set by num_trials, not in the chat completion kwargs")
        self._owned = owned

    async def solve(self, sample: Any, n: int) -> list[Attempt]:
        try:
            enc = await self.images.aget(sample.image_path, Resize())
        except ImageError as e:
            return [Attempt(None, None, error=f"image error: {e}") for _ in range(n)]
        return list(await asyncio.gather(*(self._episode(sample, enc) for _ in range(n))))

    async def _ask(
        self, client: Any, model: str, messages: list[JSONObject], kwargs: Mapping[str, Any], enc: EncodedImage
    ) -> tuple[str, str | None, JSONObject]:
        api = to_openai(messages, {enc.ref: enc}.__getitem__, join_text=False)
        reply = await chat_once(client, model, api, n=1, **kwargs)
        return reply.text, reply.finish_reason, reply.token_counts()

    async def _episode(self, sample: Any, enc: EncodedImage) -> Attempt:
        ep = InsightVEpisode(sample.question, sample.options, image_part(enc.ref))
        usage: dict[InsightVAgent, JSONObject] = {}
        for agent in InsightVAgent:
            if agent == InsightVAgent.REASONER:
                client, model, kwargs, msgs = (
                    self.reasoner,
                    self.reasoner_model,
                    self.reasoner_kwargs,
                    ep.reasoner_messages(),
                )
            else:
                client, model, kwargs, msgs = (
                    self.summary,
                    self.summary_model,
                    self.summary_kwargs,
                    ep.summary_messages(),
                )
            try:
                text, finish, usage[agent] = await self._ask(client, model, msgs, kwargs, enc)
            except EXPECTED_ERRORS as e:  # lost after the SDK's retries, or no usable first choice
                return Attempt(None, None, error=failure_reason(e), trajectory=ep.trajectory(), stats=ep.stats(agent))
            if agent == InsightVAgent.REASONER:
                ep.note_chain(text, finish)
            else:
                ep.note_summary(text, finish)
        return Attempt(
            ep.summary_reply,
            ep.summary_finish,
            trajectory=ep.trajectory(),
            usage={k.value: v for k, v in usage.items() if v} or None,
            stats=ep.stats(),
        )

    async def aclose(self) -> None:
        for c in self._owned:
            await c.close()
