"""The baseline solver: one chat model answers from the question and the (resized) image.

The request is the released ``evaluate.py``'s: an optional system message, then one user message
``[image_url, text]`` (image first; text = question, then ``\n`` and the options), with ``n`` always
set. One request with ``n`` choices per sample (or ``n`` requests with ``n=1`` under
``separate_trial_requests``, for APIs that reject ``n > 1``). Retries of API errors are the SDK's;
a server that returns fewer choices than asked is asked again for the missing ones.

``extra_views`` (the Table 6 oracle, :mod:`.oracle`) adds crops of the image, each its own image
part after the full image and before the text: ``[image_url, crop_1, …, crop_k, text]``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from ..base.redaction import failure_reason
from ..endpoints.chat import Completion, chat_choices
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.geometry import Box
from ..imaging.images import EncodedImage, ImageError, ImageStore, Resize
from ..protocol.agent_catalog import SINGLE_MODEL
from ..protocol.attempt import Attempt
from ..protocol.sample import Sample
from ..protocol.trajectory import image_part, message, to_openai
from .tool_agents import AgentSpec

log = logging.getLogger(__name__)
#: Extra requests for choices a server left out before the attempts are recorded as failed.
MISSING_CHOICE_ROUNDS = 2
#: The single-model evaluation's request settings (the released ``evaluate.py``: 16K completion tokens); the
#: O3-Bench difficulty filter asks with the same.
DEFAULT_COMPLETION_KWARGS = {"max_completion_tokens": 16384}


class SingleModelSolver:
    def __init__(
        self,
        client: Any,
        model: str,
        images: ImageStore,
        resize: Resize,
        system_prompt: str | None = None,
        completion_kwargs: dict | None = None,
        image_url_extra: dict | None = None,
        separate_trial_requests: bool = False,
        extra_views: Callable[[Any], list[Box]] | None = None,
        extra_resize: Resize | None = None,
    ):
        self.client = client
        self.model = model
        self.images = images
        self.resize = resize
        self.system_prompt = system_prompt
        self.completion_kwargs = dict(completion_kwargs or {})
        if "n" in self.completion_kwargs:
            raise ValueError("'n' is set by num_trials, not in the chat completion kwargs")
        self.image_url_extra = image_url_extra
        self.separate = separate_trial_requests
        self.extra_views = extra_views  # sample -> crop boxes (original pixels) shown after the image
        self.extra_resize = extra_resize or resize

    async def _views(self, sample: Sample) -> list[EncodedImage]:
        """The full image, then the extra views (crops) of ``sample``; raises ImageError."""
        views = [await self.images.aget(sample.image_path, self.resize)]
        if self.extra_views is not None:
            w, h = self.images.size(sample.image_path)
            for box in self.extra_views(sample):
                x1, y1, x2, y2 = max(0.0, box[0]), max(0.0, box[1]), min(float(w), box[2]), min(float(h), box[3])
                if x2 <= x1 or y2 <= y1:
                    raise ImageError(f"crop {list(box)} has no area inside the {w}x{h} image {sample.image_path}")
                views.append(await self.images.aget(sample.image_path, self.extra_resize, (x1, y1, x2, y2)))
        return views

    async def solve(self, sample: Any, n: int) -> list[Attempt]:
        try:
            views = await self._views(sample)
        except ImageError as e:
            return [Attempt(None, None, error=f"image error: {e}") for _ in range(n)]
        msgs = []
        if self.system_prompt:
            msgs.append(message("system", self.system_prompt))
        images = [image_part(v.ref) for v in views]
        msgs.append(message("user", *images, sample.prompt()))  # images first, as the original
        encoded = {v.ref: v for v in views}
        api_msgs = to_openai(msgs, encoded.__getitem__, self.image_url_extra)
        if self.separate:
            batches = await asyncio.gather(*(self._choices(api_msgs, 1) for _ in range(n)))
            got = [a for b in batches for a in b]
        else:
            got = await self._choices(api_msgs, n)
        attempts = []
        for c in got:
            if isinstance(c, Exception):
                attempts.append(Attempt(None, None, error=failure_reason(c), trajectory=msgs))
                continue
            traj = msgs + [message("assistant", c.text)]
            attempts.append(Attempt(c.text, c.finish_reason, trajectory=traj, usage=c.usage))
        return attempts

    async def _choices(self, api_msgs: list[dict], n: int) -> list[Completion | Exception]:
        """``n`` choices; the reason in place of each lost one."""
        got: list[Completion] = []
        last_error: Exception | None = None
        for _ in range(1 + MISSING_CHOICE_ROUNDS):
            want = n - len(got)
            if want <= 0:
                break
            kwargs = {"n": want, **self.completion_kwargs}  # the original always sends n
            try:
                choices = (await chat_choices(self.client, self.model, api_msgs, **kwargs))[:want]
            except EXPECTED_ERRORS as e:  # the SDK already retried what is retryable
                last_error = e
                break
            got += choices
            if len(choices) < want:
                last_error = RuntimeError(f"server returned {len(choices)} of {want} requested choices")
                log.debug("%s", last_error)
        lost = last_error or RuntimeError("no choices")
        return [*got, *(lost for _ in range(n - len(got)))]

    async def aclose(self) -> None:
        """Nothing to release: the client belongs to whoever built this solver."""


SPEC = AgentSpec(
    name=SINGLE_MODEL.name,
    protocol_version="insight_o3:evaluate.py",
    description=SINGLE_MODEL.description,
)
