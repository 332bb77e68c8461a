"""The InSight-o3 solver for ``insight_o3.scripts.evaluate`` (``--vsearcher_model``): ``n`` trials
of a sample are ``n`` independent vReasoner + vSearcher episodes, run concurrently."""

from __future__ import annotations

import asyncio
import json

from ..endpoints.client import make_client
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS
from ..imaging.images import ImageStore
from ..protocol.attempt import Attempt
from ..protocol.limits import LIMITS
from ..protocol.questions import insight_o3_question
from .drivers import AnswerResult, InSightO3, VSearcher


def _as_dict(value, name: str) -> dict:
    if value is None or value == "":
        return {}
    if isinstance(value, dict):
        return dict(value)
    try:
        parsed = json.loads(value)
    except (TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"--{name} must be a JSON object: {e}") from None
    if not isinstance(parsed, dict):
        raise ValueError(f"--{name} must be a JSON object, got {type(parsed).__name__}")
    return parsed


def to_attempt(r: AnswerResult) -> Attempt:
    return Attempt(
        r.text, r.finish_reason, error=r.error, trajectory=r.trajectory, usage=r.usage or None, stats=r.stats
    )


class InSightO3Solver:
    """:class:`~insight_o3.protocol.attempt.Solver` over an :class:`InSightO3` system."""

    def __init__(self, system: InSightO3, clients: tuple = ()):
        self.system = system
        self._clients = clients

    async def solve(self, sample, n: int) -> list[Attempt]:
        question = insight_o3_question(sample)
        results = await asyncio.gather(*(self.system.answer(sample.image_path, question) for _ in range(n)))
        return [to_attempt(r) for r in results]

    async def aclose(self) -> None:
        for c in self._clients:
            await c.close()

    @classmethod
    def from_args(
        cls,
        args,
        images: ImageStore,
        redactor=None,
        guard=None,
        limiter=None,
        vsearcher_limiter=None,
    ) -> InSightO3Solver:
        """Build from the ``evaluate`` arguments (keys already resolved). ``--sys_prompt`` does not
        apply: the vReasoner's system prompt is the protocol's (``--reasoner_prompt infer|train``).
        ``redactor``: nothing to do (the clients register their keys; see :mod:`insight_o3.base.redaction`)."""
        timeout, retries = getattr(args, "client_timeout", None), getattr(args, "max_retries", None)
        kw = {"timeout": timeout, "guard": guard} | ({"max_retries": retries} if retries is not None else {})
        r_client = make_client(args.api_key, args.api_base_url, role="vReasoner", limiter=limiter, **kw)
        s_client = make_client(
            args.vsearcher_api_key, args.vsearcher_api_base_url, role="vSearcher", limiter=vsearcher_limiter, **kw
        )
        searcher = VSearcher(
            s_client,
            args.vsearcher_model,
            images,
            max_pixels=getattr(args, "vsearcher_max_pixels", None) or VSEARCHER_EVAL_MAX_PIXELS,
            prompt=getattr(args, "vsearcher_prompt", None) or "trained",
            max_tool_calls=LIMITS.max_tool_calls,
            completion_kwargs=_as_dict(
                getattr(args, "vsearcher_chat_completion_kwargs", None), "vsearcher_chat_completion_kwargs"
            ),
        )
        system = InSightO3(
            r_client,
            args.model,
            searcher,
            images,
            max_pixels=getattr(args, "img_max_pixels", None),
            mode=getattr(args, "reasoner_prompt", None) or "infer",
            max_search_calls=getattr(args, "max_vsearch_calls", None) or LIMITS.max_search_calls,
            completion_kwargs=_as_dict(getattr(args, "chat_completion_kwargs", None), "chat_completion_kwargs"),
            image_url_extra=_as_dict(getattr(args, "image_url_extra_settings", None), "image_url_extra_settings")
            or None,
        )
        return cls(system, (r_client, s_client))
