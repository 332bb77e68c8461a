"""The driver of a tool-using agent session (:mod:`insight_o3.agents.tool_agents`) over an OpenAI-compatible
endpoint: ``n`` trials are ``n`` independent episodes. The original image is sent as is (no resize: the
baselines' harnesses send the file), each zoom is rendered once by the image store.

One reply is one request with ``n=1`` and the protocol's request settings (``AgentDefaults.completion_kwargs``,
merged under the run's ``completion_kwargs``). A request lost after the SDK's retries ends the episode as a
failed attempt (never judged); a crop the image store cannot render ends it like a failed tool call of the
protocol (its last reply is the answer, the reason in ``stats["stop_reason"]``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..base.redaction import failure_reason
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.images import EncodedImage, ImageError, ImageStore, Resize
from ..protocol.attempt import Attempt
from ..protocol.trajectory import message, to_openai
from .tool_agents import AgentDefaults, Finish, Resend, SessionFactory, Zoom

#: what ends an episode as a lost request: the API's errors, or a reply without a first choice
LOST: tuple[type[Exception], ...] = (*EXPECTED_ERRORS, IndexError, AttributeError, TypeError)


def _usage_of(resp) -> dict:
    u = getattr(resp, "usage", None)
    if u is None:
        return {}
    try:
        return {k: v for k, v in u.model_dump(exclude_none=True).items() if isinstance(v, int)}
    except AttributeError:
        return {}


class ToolLoopSolver:
    """:class:`~insight_o3.protocol.attempt.Solver` running ``session`` episodes against ``client``."""

    def __init__(
        self,
        client: Any,  # an AsyncOpenAI
        model: str,
        images: ImageStore,
        session: SessionFactory,
        defaults: AgentDefaults,
        completion_kwargs: Mapping[str, Any] | None = None,
    ):
        self.client, self.model, self.images = client, model, images
        self.session, self.defaults = session, defaults
        self.completion_kwargs = {**defaults.completion_kwargs, **(completion_kwargs or {})}
        if "n" in self.completion_kwargs:
            raise ValueError("'n' is set by num_trials, not in the chat completion kwargs")

    async def solve(self, sample: Any, n: int) -> list[Attempt]:
        try:
            original = await self.images.aget(sample.image_path, Resize())
        except ImageError as e:
            return [Attempt(None, None, error=f"image error: {e}") for _ in range(n)]
        return list(await asyncio.gather(*(self._episode(sample, original) for _ in range(n))))

    async def _episode(self, sample: Any, original: EncodedImage) -> Attempt:
        s = self.session(sample.question, sample.options, original.ref)
        views = {original.ref: original}
        usage: dict[str, int] = {}
        stats: dict[str, Any] = {"requests": 0, "zooms": 0}
        reply, finish = "", None
        while True:
            extra = dict(self.defaults.image_url_extra)
            api_msgs = to_openai(s.messages, views.__getitem__, extra, self.defaults.join_text)
            try:
                resp = await self.client.chat.completions.create(
                    model=self.model, messages=api_msgs, n=1, **self.completion_kwargs
                )
                choice = resp.choices[0]
            except asyncio.CancelledError:
                raise
            except LOST as e:
                return Attempt(None, None, error=failure_reason(e), trajectory=s.messages, stats=stats)
            for k, v in _usage_of(resp).items():
                usage[k] = usage.get(k, 0) + v
            reply, finish = (choice.message.content if choice.message else None) or "", choice.finish_reason
            stats["requests"] += 1
            step = s.step(reply)
            if isinstance(step, Finish):
                if step.reason:
                    stats["stop_reason"] = step.reason
                done = s.messages[-1]["role"] == "assistant"  # the session kept the reply (a tool call)
                traj = s.messages if done else [*s.messages, message("assistant", reply)]
                return Attempt(step.text, finish, trajectory=traj, usage=usage or None, stats=stats)
            if isinstance(step, Resend):
                continue
            assert isinstance(step, Zoom)
            try:
                view = await self.images.aget(sample.image_path, Resize(size=step.size, qwen=True), step.region)
            except ImageError as e:
                stats["stop_reason"] = f"crop not rendered: {e}"
                return Attempt(reply, finish, trajectory=[*s.messages], usage=usage or None, stats=stats)
            views[view.ref] = view
            stats["zooms"] += 1
            s.observe(view.ref)

    async def aclose(self) -> None:
        """Nothing to release: the client belongs to whoever built this solver."""
