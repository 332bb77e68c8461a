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
import json
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ..base.redaction import failure_reason
from ..endpoints.chat import chat_once
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.images import EncodedImage, ImageError, ImageRef, ImageStore
from ..imaging.view_ops import Resample, Resize, ResizeTo
from ..protocol.attempt import Attempt
from ..protocol.attempt_stats import ToolLoopStats
from ..protocol.statuses import EpisodeStatus
from ..protocol.trajectory import part_view, to_openai
from ..tools.toolkit import Toolkit
from .tool_agents import (
    AgentDefaults,
    Finish,
    SessionFactory,
    ShownImage,
    ToolUser,
    UnusableImage,
    UsageAware,
    UseTool,
    ViewErrorAware,
)


def _view_key(part: dict) -> str:
    """What decides an image part's pixels (its reference and its rendering), as one key."""
    return json.dumps({k: part[k] for k in ("image", "view") if k in part}, sort_keys=True)


def _no_ref(ref: ImageRef) -> EncodedImage:
    raise AssertionError(f"views are looked up by their part: {ref}")


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
        toolkit: Toolkit | None = None,
    ):
        self.client, self.model, self.images = client, model, images
        self.toolkit = toolkit
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

    async def _render(self, part: dict, views: dict[str, EncodedImage]) -> None:
        """Render an image part: the part's own pipeline of operations on the original file
        (:func:`~insight_o3.protocol.trajectory.image_part`'s ``view``), else its region of the file at its size,
        BICUBIC."""
        key = _view_key(part)
        if key in views:
            return
        ref = ImageRef.from_dict(part["image"])
        view = part_view(part)
        region = None
        if view is None:
            w, h = self.images.size(ref.path)
            region = None if ref.region == (0.0, 0.0, float(w), float(h)) else ref.region
            view = Resize((ResizeTo(ref.size, Resample.BICUBIC),))
        views[key] = await self.images.aget(ref.path, view, region)

    def _labelled(self, views: dict[str, EncodedImage], part: dict) -> EncodedImage:
        """The rendered view of ``part``, under the protocol's media type label when it has one."""
        enc = views[_view_key(part)]
        mime = self.defaults.image_mime
        if mime is None:
            return enc
        return replace(enc, data_url=f"data:{mime}" + enc.data_url[enc.data_url.index(";base64,") :])

    async def _episode(self, sample: Any, size: tuple[int, int]) -> Attempt:
        requests = zooms = 0
        try:
            s = self.session(sample.question, sample.options, sample.image_path, size)
        except UnusableImage as e:  # the sample's outcome: no answer, never a lost request
            refused = ToolLoopStats(requests=0, zooms=0, status=EpisodeStatus.IMAGE_REFUSED, protocol_error=str(e))
            return Attempt(None, None, stats=refused)
        views: dict[str, EncodedImage] = {}
        usage: dict[str, int] = {}
        finish: str | None = None
        finishes: list[str | None] = []  # each reply's finish_reason
        calls: list[dict] = []

        def stats(stop_reason: str | None = None) -> ToolLoopStats:
            """The episode's so far (``tool_calls`` with a toolkit; ``stop_reason`` when the protocol gave one)."""
            given: dict[str, Any] = {"requests": requests, "zooms": zooms}
            if self.toolkit is not None:
                given["tool_calls"] = calls
            if stop_reason:
                given["stop_reason"] = stop_reason
            return ToolLoopStats(**given)

        ctx = self.toolkit.episode(sample.image_path, getattr(sample, "index", 0)) if self.toolkit is not None else None
        extra = dict(self.defaults.image_url_extra)
        while True:
            try:
                for m in s.messages:
                    for part in m["content"] if isinstance(m["content"], list) else []:
                        if part.get("type") == "image":
                            await self._render(part, views)
            except ImageError as e:
                end = s.view_failed(str(e)) if isinstance(s, ViewErrorAware) else None
                if end is not None:  # the protocol's own error path: the episode ends with its answer
                    return Attempt(
                        end.text, finish, trajectory=s.messages, usage=usage or None, stats=stats(end.reason)
                    )
                return Attempt(None, None, error=f"image error: {e}", trajectory=s.messages, stats=stats())
            api_msgs = to_openai(
                s.messages, _no_ref, extra, self.defaults.join_text, encode_part=lambda p: self._labelled(views, p)
            )
            try:
                reply = await chat_once(self.client, self.model, api_msgs, n=1, **self.completion_kwargs)
            except EXPECTED_ERRORS as e:  # lost after the SDK's retries, or no usable first choice
                return Attempt(None, None, error=failure_reason(e), trajectory=s.messages, stats=stats())
            this_usage = reply.token_counts()
            for k, v in this_usage.items():
                usage[k] = usage.get(k, 0) + v
            finish = reply.finish_reason
            finishes.append(finish)
            requests += 1
            if isinstance(s, UsageAware):
                s.note_usage(this_usage)
            step = s.step(reply.text, finish)
            while isinstance(step, UseTool):  # a tool call: run it, hand the session its result
                if ctx is None or self.toolkit is None or not isinstance(s, ToolUser):
                    raise TypeError(f"{type(s).__name__} asked for a tool but the solver has no toolkit")
                ctx.turn = requests - 1
                call = await self.toolkit.call(step.tool, step.name, step.arguments, ctx)
                record = call.to_dict()
                calls.append(record)
                step = s.observe(call.text, [ShownImage(i.path, i.size) for i in call.images], record)
            if isinstance(step, Finish):
                # the finish_reason of the reply whose text is the answer (Pixel-Reasoner's may be an earlier one)
                answered = finishes[step.reply] if -len(finishes) <= step.reply < len(finishes) else finish
                return Attempt(
                    step.text, answered, trajectory=s.messages, usage=usage or None, stats=stats(step.reason)
                )
            zooms += int(step.zoomed)

    async def aclose(self) -> None:
        """The toolkit's backends are closed; the client belongs to whoever built this solver."""
        if self.toolkit is not None:
            self.toolkit.close()
