"""The driver of a tool-using agent session (:mod:`insight_o3.agents.tool_agents`) over an OpenAI-compatible
endpoint: ``n`` trials are ``n`` independent episodes.

Each request is the session's messages with every image reference rendered by the image store (its region of the
file at its exact size, the protocol's resampling; each view rendered once) and the protocol's request settings
(``AgentDefaults.completion_kwargs``) under the run's ``completion_kwargs``, ``n=1``. A request lost after the SDK's
retries ends the episode as a failed attempt (never judged); a view the image store cannot render ends it as a
failed attempt too (``image error``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from ..base.redaction import failure_reason
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.images import EncodedImage, ImageError, ImageRef, ImageStore, Resize
from ..protocol.attempt import Attempt
from ..protocol.statuses import EpisodeStatus
from ..protocol.trajectory import to_openai
from .tool_agents import AgentDefaults, Finish, SessionFactory, UnusableImage, UsageAware

#: what ends an episode as a lost request: the API's errors, or a reply without a first choice
LOST: tuple[type[Exception], ...] = (*EXPECTED_ERRORS, IndexError, AttributeError, TypeError)


def _usage_of(resp: Any) -> dict[str, int]:
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
            size = self.images.size(sample.image_path)
        except ImageError as e:
            return [Attempt(None, None, error=f"image error: {e}") for _ in range(n)]
        return list(await asyncio.gather(*(self._episode(sample, size) for _ in range(n))))

    async def _render(self, part: dict, views: dict[ImageRef, EncodedImage]) -> None:
        """Render an image part: its region of the file at its size, with the part's resampling (or the part's
        ``pipeline`` of resizes and crops, :attr:`~insight_o3.imaging.images.Resize.pipeline`)."""
        ref = ImageRef.from_dict(part["image"])
        if ref in views:
            return
        w, h = self.images.size(ref.path)
        region = None if ref.region == (0.0, 0.0, float(w), float(h)) else ref.region
        how = part.get("resample", "bicubic")
        chain = tuple((int(w), int(h)) for w, h in part.get("steps", ()))
        pipeline: tuple[tuple[str | int, ...], ...] = tuple(
            (str(op[0]), *(int(v) for v in op[1:])) for op in part.get("pipeline", ())
        )
        resize = Resize(size=ref.size, qwen=how == "bicubic", nearest=how == "nearest", chain=chain, pipeline=pipeline)
        views[ref] = await self.images.aget(ref.path, resize, region)

    async def _episode(self, sample: Any, size: tuple[int, int]) -> Attempt:
        stats: dict[str, Any] = {"requests": 0, "zooms": 0}
        try:
            s = self.session(sample.question, sample.options, sample.image_path, size)
        except UnusableImage as e:  # the sample's outcome: no answer, never a lost request
            return Attempt(None, None, stats={**stats, "status": EpisodeStatus.IMAGE_REFUSED, "protocol_error": str(e)})
        views: dict[ImageRef, EncodedImage] = {}
        usage: dict[str, int] = {}
        finishes: list[str | None] = []  # each reply's finish_reason
        extra = dict(self.defaults.image_url_extra)
        while True:
            try:
                for m in s.messages:
                    for part in m["content"] if isinstance(m["content"], list) else []:
                        if part.get("type") == "image":
                            await self._render(part, views)
            except ImageError as e:
                return Attempt(None, None, error=f"image error: {e}", trajectory=s.messages, stats=stats)
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
            this_usage = _usage_of(resp)
            for k, v in this_usage.items():
                usage[k] = usage.get(k, 0) + v
            reply, finish = (choice.message.content if choice.message else None) or "", choice.finish_reason
            finishes.append(finish)
            stats["requests"] += 1
            if isinstance(s, UsageAware):
                s.note_usage(this_usage)
            step = s.step(reply, finish)
            if isinstance(step, Finish):
                if step.reason:
                    stats["stop_reason"] = step.reason
                # the finish_reason of the reply whose text is the answer (Pixel-Reasoner's may be an earlier one)
                answered = finishes[step.reply] if -len(finishes) <= step.reply < len(finishes) else finish
                return Attempt(step.text, answered, trajectory=s.messages, usage=usage or None, stats=stats)
            stats["zooms"] += int(step.zoomed)

    async def aclose(self) -> None:
        """Nothing to release: the client belongs to whoever built this solver."""
