"""OpenAI-compatible drivers of the sessions: :class:`VSearcher` (``locate``) and
:class:`InSightO3` (``answer``). All protocol decisions live in the sessions; this module only
sends messages (images encoded once through the :class:`ImageStore` cache) and turns API failures
(after the SDK's own retries), unusable images and malformed replies into ``failed`` results with a
redacted reason (:data:`insight_o3.endpoints.errors.EXPECTED_ERRORS`); a programming error raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..base.json_types import JSONObject
from ..base.redaction import Redactor, failure_reason
from ..endpoints.chat import Completion, chat_once
from ..endpoints.errors import EXPECTED_ERRORS
from ..imaging.geometry import VSEARCHER_EVAL_MAX_PIXELS
from ..imaging.images import ImageStore
from ..protocol.attempt_stats import InSightO3Stats
from ..protocol.limits import LIMITS
from ..protocol.prompts import FORK_HINTS, ReasonerHints
from ..protocol.statuses import EpisodeStatus, ReasonerAction, ReasonerMode
from ..protocol.trajectory import image_refs, to_openai
from .config import ReasonerSettings, SearcherSettings
from .reasoner_session import ReasonerSession
from .records import compact_messages
from .searcher_session import BaseSearcherSession, LocateResult, failed_locate, searcher_session_class
from .views import encode_refs


async def complete(
    client: Any,
    model: str,
    session: BaseSearcherSession | ReasonerSession,
    images: ImageStore,
    kwargs: JSONObject,
    image_url_extra: JSONObject | None = None,
) -> Completion:
    """One chat completion for a session's current messages."""
    encoded = await encode_refs(images, session.resize, image_refs(session.messages))
    return await chat_once(client, model, to_openai(session.messages, encoded.__getitem__, image_url_extra), **kwargs)


def _describe(e: BaseException) -> str:
    return failure_reason(e)


def _add_usage(total: dict, counts: dict[str, int]) -> None:
    for k, v in counts.items():
        total[k] = total.get(k, 0) + v


#: The fork's vSearcher sampling at validation: greedy, at most 1024 new tokens per turn
#: (``VSearcherLoop.MAX_TOKENS_PER_TURN``).
VSEARCHER_COMPLETION_KWARGS = {"temperature": 0.0, "max_tokens": LIMITS.vsearcher_max_tokens_per_turn}


class VSearcher:
    """The visual search agent behind an OpenAI-compatible endpoint (e.g. vLLM serving
    InSight-o3-vS). Sampling defaults to the fork's validation setting
    (:data:`VSEARCHER_COMPLETION_KWARGS`); ``completion_kwargs`` are merged over it. Failure reasons are
    redacted process-wide (:mod:`insight_o3.base.redaction`); a ``redactor`` passed in has registered its keys
    when it was made, so nothing more is done with it."""

    def __init__(
        self,
        client: Any,
        model: str,
        images: ImageStore,
        max_pixels: int = VSEARCHER_EVAL_MAX_PIXELS,
        prompt: str = "trained",
        max_tool_calls: int = 6,
        completion_kwargs: dict | None = None,
        redactor: Redactor | None = None,
    ):
        self.client, self.model, self.images = client, model, images
        self.max_pixels, self.prompt, self.max_tool_calls = max_pixels, prompt, max_tool_calls
        self.completion_kwargs = {**VSEARCHER_COMPLETION_KWARGS, **(completion_kwargs or {})}

    @classmethod
    def from_settings(cls, s: SearcherSettings, client: Any, images: ImageStore) -> VSearcher:
        return cls(
            client,
            s.model,
            images,
            max_pixels=s.max_pixels,
            prompt=s.prompt,
            max_tool_calls=s.max_tool_calls,
            completion_kwargs=dict(s.completion_kwargs),
        )

    def session(self, image_path: str, description: str) -> BaseSearcherSession:
        session = searcher_session_class(self.prompt)
        return session(image_path, description, self.images, self.max_pixels, max_tool_calls=self.max_tool_calls)

    async def locate(self, image_path: str, description: str) -> LocateResult:
        """Run one vSearcher episode; box in original pixels when ``status == "found"``."""
        try:
            s = self.session(image_path, description)
        except EXPECTED_ERRORS as e:
            return failed_locate(description, _describe(e))
        while not s.done:
            try:
                c = await complete(self.client, self.model, s, self.images, self.completion_kwargs)
            except EXPECTED_ERRORS as e:
                s.fail(_describe(e))
                break
            s.step(c.text, c.finish_reason, c.usage)
        return s.result()


#: Per-turn request settings of the fork's vReasoner (agent YAML ``max_completion_tokens: 2048``,
#: ``reasoning_effort: null``; ``temperature`` defaults to 1.0 in ``get_gpt_visual_search_request``).
VREASONER_COMPLETION_KWARGS = {"max_completion_tokens": 2048, "temperature": 1.0, "reasoning_effort": None}


@dataclass(kw_only=True)
class AnswerResult:
    """A finished InSight-o3 episode. ``error`` is set (``text`` None) only when the episode was lost
    (the vReasoner or vSearcher could not be reached after retries, or the image could not be read).
    Only ``status == "answered"`` has an answer: an episode that ended on a protocol problem (format
    retries exhausted, a tool call past the limit, a vSearcher answer without a valid box) keeps its
    last text for the record and says why in ``protocol_error``; it is scored as no answer, not
    judged. ``trajectory`` is compact (see :mod:`insight_o3.agents.records`)."""

    text: str | None
    finish_reason: str | None
    status: EpisodeStatus
    answer: str | None
    trajectory: list[dict]
    n_search_calls: int
    n_search_not_found: int
    n_format_retries: int
    feedback: list[str | None]
    error: str | None = None
    usage: dict = field(default_factory=dict)
    protocol_error: str | None = None

    @property
    def has_answer(self) -> bool:
        return self.status == EpisodeStatus.ANSWERED

    @property
    def stats(self) -> InSightO3Stats:
        return InSightO3Stats(
            n_search_calls=self.n_search_calls,
            n_search_not_found=self.n_search_not_found,
            n_format_retries=self.n_format_retries,
            feedback=self.feedback,
            status=self.status,
            protocol_error=self.protocol_error,
        )


class InSightO3:
    """vReasoner (any OpenAI-compatible chat model) + :class:`VSearcher`.

    ``completion_kwargs``: the vReasoner's request settings per turn; None or empty gives the fork's
    (:data:`VREASONER_COMPLETION_KWARGS`), anything else replaces them. ``max_format_retries``: per
    round (None: the fork's, 4 for ``infer``, 2 for ``train``). ``redactor``: as for :class:`VSearcher`.
    ``hints``: the vReasoner's user hints (:class:`ReasonerSession`; default the fork's). ``lost_reply_is_attempt``:
    a request lost after the SDK's retries uses one of the round's attempts and is asked again
    (:meth:`ReasonerSession.lost_reply`, the fork's training loop) instead of ending the episode ``failed``."""

    def __init__(
        self,
        client: Any,
        model: str,
        searcher: VSearcher,
        images: ImageStore,
        max_pixels: int | None = None,
        mode: str = ReasonerMode.INFER,
        max_search_calls: int = 6,
        system_prompt: str | None = None,
        completion_kwargs: dict | None = None,
        image_url_extra: dict | None = None,
        max_format_retries: int | None = None,
        redactor: Redactor | None = None,
        hints: ReasonerHints = FORK_HINTS,
        lost_reply_is_attempt: bool = False,
    ):
        self.client, self.model, self.searcher, self.images = client, model, searcher, images
        self.hints, self.lost_reply_is_attempt = hints, lost_reply_is_attempt
        self.max_pixels, self.mode, self.max_search_calls = max_pixels, mode, max_search_calls
        self.system_prompt, self.max_format_retries = system_prompt, max_format_retries
        self.completion_kwargs = dict(completion_kwargs or VREASONER_COMPLETION_KWARGS)
        if "n" in self.completion_kwargs:
            raise ValueError("'n' cannot be set for InSight-o3 episodes: each trial is its own episode")
        self.image_url_extra = image_url_extra

    @classmethod
    def from_settings(cls, s: ReasonerSettings, client: Any, searcher: VSearcher, images: ImageStore) -> InSightO3:
        """The system of :class:`~insight_o3.agents.config.ReasonerSettings` (evaluation and the recipe's in-loop
        episodes build it this one way)."""
        return cls(
            client,
            s.model,
            searcher,
            images,
            s.max_pixels,
            mode=s.mode,
            max_search_calls=s.max_search_calls,
            system_prompt=s.system_prompt,
            completion_kwargs=dict(s.completion_kwargs),
            image_url_extra=None if s.image_url_extra is None else dict(s.image_url_extra),
            max_format_retries=s.max_format_retries,
            hints=s.hints,
            lost_reply_is_attempt=s.lost_reply_is_attempt,
        )

    def session(self, image_path: str, question: str) -> ReasonerSession:
        return ReasonerSession(
            image_path,
            question,
            self.images,
            self.max_pixels,
            self.mode,
            self.max_search_calls,
            self.system_prompt,
            self.max_format_retries,
            self.hints,
        )

    async def answer(self, image_path: str, question: str) -> AnswerResult:
        """Run one episode: vReasoner turns, vSearcher calls, crops, until an answer or a stop."""
        usage: dict = {}
        finish = None
        try:
            s = self.session(image_path, question)
        except EXPECTED_ERRORS as e:
            msg = _describe(e)
            return AnswerResult(
                text=None,
                finish_reason=None,
                status=EpisodeStatus.FAILED,
                answer=None,
                trajectory=[],
                n_search_calls=0,
                n_search_not_found=0,
                n_format_retries=0,
                feedback=[],
                error=msg,
                usage=usage,
            )
        while not s.done:
            try:
                c = await complete(
                    self.client, self.model, s, self.images, self.completion_kwargs, self.image_url_extra
                )
            except EXPECTED_ERRORS as e:
                if self.lost_reply_is_attempt and s.lost_reply(_describe(e)):
                    continue
                s.fail(_describe(e))
                break
            finish = c.finish_reason
            _add_usage(usage, c.token_counts())
            st = s.step(c.text)
            if st.action == ReasonerAction.SEARCH:
                assert st.description is not None  # a search step always names its region
                s.provide_search_result(await self.searcher.locate(s.image_path, st.description))
        assert s.status is not None  # the loop ends when the session is done
        failed = s.status == EpisodeStatus.FAILED
        return AnswerResult(
            text=None if failed else s.final_text,
            finish_reason=None if failed else finish,
            status=s.status,
            answer=s.answer,
            trajectory=compact_messages(s.messages),
            n_search_calls=s.n_search_calls,
            n_search_not_found=s.n_search_not_found,
            n_format_retries=s.n_format_retries,
            feedback=s.feedback,
            error=s.error if failed else None,
            usage=usage,
            protocol_error=None if failed else s.error,
        )
