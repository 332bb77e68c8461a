"""verl agent loops of the vsearch recipe (registered in ``config/agent_loops.yaml``).

* :class:`VSearcherAgentLoop` (``agent_name=vsearcher``, out-of-loop): the policy runs the vSearcher
  protocol on the row's region description with the crop tool; one sample, rewarded with the IoU
  against ``extra_info.bboxes`` by ``reward_fn.compute_score``.
* :class:`VReasonerAgentLoop` (``agent_name=vreasoner``, in-loop): the API vReasoner (training
  prompts, ``<tool_feedback>``) drives an :class:`insight_o3.agents.InSightO3` episode whose
  vSearcher is the *policy* (same :class:`~recipe.vsearch.policy_searcher.PolicySearcher` as
  out-of-loop); the evaluation judge checks the final answer (c), the vReasoner's feedback on call
  k gives s_k, and every vSearcher call becomes one training sample (pseudo IoU 1[s=c=1]).
  An episode yields 0..max_search_calls samples; see :mod:`recipe.vsearch.episodes` for how they
  leave verl's one-output-per-row agent loop API.

Settings: both loops read :func:`recipe.vsearch.settings.run_settings` (the typed, validated view of
``vsearch.*`` + the agent YAML, built once per process). Whether a rollout is a validation rollout
comes from the :data:`VALIDATE_KEY` column the recipe's trainer adds to every generation batch: it
selects the vReasoner's inference prompts (and its validation format-retry budget).

Row fields read (from the parquet written by ``create_parquet_dataset.py``): the image comes from
``extra_info.image_path`` or else the first image part of ``raw_prompt``; the description / question
from ``extra_info.description`` / ``extra_info.question`` (+ ``extra_info.options``) or else the
text of ``raw_prompt``; the QA ground truth from ``reward_model.ground_truth``.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from dataclasses import dataclass, replace
from typing import Any
from uuid import uuid4

from openai import AsyncOpenAI
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from insight_o3.agents.drivers import AnswerResult, InSightO3
from insight_o3.agents.searcher_session import LocateResult
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import ENV_KEYS, Endpoint, resolve, resolve_key
from insight_o3.endpoints.rate_limit import AdaptiveLimiter
from insight_o3.evaluation.judge import AnswerJudge
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.questions import insight_o3_question
from insight_o3.protocol.sample import Sample
from insight_o3.protocol.statuses import EpisodeStatus, VerdictStatus

from .episodes import JUDGE_LOST_STATUS, failed_episode_output
from .image_inputs import VIEWS_KEY
from .policy_searcher import PolicySearcher, SearcherRollout
from .rollout_fields import (
    EPISODE_ID_KEY,
    ROLE_INLOOP,
    ROLE_OUTLOOP,
    ROLE_PLACEHOLDER,
    VALIDATE_KEY,
    EpisodeStats,
    SampleFields,
    attach_extra_samples,
)
from .settings import RunSettings, run_settings

# ----------------------------------------------------------------------------- row fields


def _image_path_of(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("image", value.get("path"))
    if isinstance(value, str) and value:
        return value[len("file://") :] if value.startswith("file://") else value
    return None


def row_image_path(row: dict) -> str:
    info = row.get("extra_info") or {}
    path = _image_path_of(info.get("image_path"))
    if path:
        return path
    for m in row.get("raw_prompt") or []:
        for p in m.get("content") if isinstance(m.get("content"), list) else []:
            path = _image_path_of(p.get("image")) if isinstance(p, dict) and p.get("type") == "image" else None
            if path:
                return path
    raise ValueError("row has no image: set extra_info.image_path or an image in the prompt")


def _prompt_text(row: dict) -> str:
    texts = []
    for m in row.get("raw_prompt") or []:
        if m.get("role") != "user":
            continue
        c = m.get("content")
        if isinstance(c, str):
            texts.append(c)
        elif isinstance(c, list):
            texts.extend(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")
    return "".join(texts).replace("<image>", "").strip()


def row_text(row: dict, key: str) -> str:
    info = row.get("extra_info") or {}
    text = info.get(key) or _prompt_text(row)
    if not text:
        raise ValueError(f"row has no {key}: set extra_info.{key} or a user prompt")
    return str(text)


# ----------------------------------------------------------------------------- shared resources
_IMAGES: ImageStore | None = None
_IMAGES_LOCK = threading.Lock()


def shared_images() -> ImageStore:
    """One image cache per process (an AgentLoopWorker runs every row of its chunk)."""
    global _IMAGES
    with _IMAGES_LOCK:
        if _IMAGES is None:
            _IMAGES = ImageStore(alpha="white")  # RGBA on white, as the fork's to_rgb
        return _IMAGES


def is_validation(row: dict) -> bool:
    """Whether this rollout belongs to a validation pass (column set by the recipe's trainer)."""
    return bool(row.get(VALIDATE_KEY, False))


def policy_searcher(loop: AgentLoopBase, s: RunSettings) -> PolicySearcher:
    """The policy vSearcher with the run's budgets (the same for out-of-loop rows and in-loop calls)."""
    return PolicySearcher(
        loop,
        shared_images(),
        s.vsearcher_max_pixels,
        s.vsearcher_max_tool_calls,
        s.vsearcher_response_length,
        s.vsearcher_prompt_length,
        limit_reminder=s.protocol.searcher_limit_reminder,
        budget_end_fails_searcher=s.protocol.budget_end_fails_searcher,
        end_on_bad_token=s.protocol.end_on_bad_token,
        fatal_k=s.fatal.k if s.fatal.fatal_mode.cuts_episodes else None,
    )


def _metrics(rollouts: list[SearcherRollout]) -> AgentLoopMetrics:
    return AgentLoopMetrics(
        generate_sequences=sum(r.generate_s for r in rollouts), tool_calls=sum(r.tool_s for r in rollouts)
    )


def rollout_output(r: SearcherRollout, fields: SampleFields, mask_out: bool = False) -> AgentLoopOutput:
    """An ``AgentLoopOutput`` for one policy vSearcher episode reporting ``fields``. ``mask_out`` zeroes the whole
    response mask (samples of episodes cut by API failures: excluded from the loss)."""
    mask = [0] * len(r.response_mask) if mask_out else list(r.response_mask)
    return AgentLoopOutput(
        prompt_ids=r.prompt_ids,
        response_ids=r.response_ids,
        response_mask=mask,
        response_logprobs=r.response_logprobs,
        multi_modal_data={"images": list(r.images), VIEWS_KEY: r.image_views},
        num_turns=r.num_turns + 1,
        metrics=_metrics([r]),
        extra_fields=fields.to_extra_fields(),
    )


class FailSafeAgentLoop(AgentLoopBase):
    """The one place where an episode that raises becomes a *failed episode* instead of killing the step.

    verl's agent-loop worker gathers every row's loop with ``asyncio.gather``: one exception (a first prompt
    longer than ``rollout.prompt_length``, an image that cannot be read, a model output the processor rejects,
    a rollout server error) would fail the whole training step. :meth:`run` turns it into a fully masked,
    text-only placeholder carrying the episode fields with ``critical_failure=True`` and status ``error``:
    like an in-loop episode lost to an API failure, it trains nothing (the placeholder is dropped by
    ``episodes.finalize_batch``), counts in ``vsearch/critical_failure_ratio`` (so
    ``vsearch.max_api_failure_ratio`` also stops a run whose episodes keep raising) and, in
    ``vsearch/episode_error_ratio``, as an exception. The error is printed once per episode (keys redacted)."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        try:
            return await self.run_episode(sampling_params, **kwargs)
        except Exception as e:  # one bad episode must not cost the step; counted, not hidden
            return self.failed_episode(kwargs, e)

    async def run_episode(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        raise NotImplementedError

    def failed_episode(self, row: dict, error: BaseException) -> AgentLoopOutput:
        return failed_episode_output(
            self.tokenizer, row, error, isinstance(self, VReasonerAgentLoop), type(self).__name__
        )


class VSearcherAgentLoop(FailSafeAgentLoop):
    """Out-of-loop vSearcher rollout of the policy on a (image, region description, boxes) row."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = run_settings(self.config)
        self.searcher = policy_searcher(self, self.settings)

    async def run_episode(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        r = await self.searcher.run(
            row_image_path(kwargs), row_text(kwargs, "description"), sampling_params, validate=is_validation(kwargs)
        )
        return rollout_output(r, r.sample_fields(bboxes=info.get("bboxes"), role=ROLE_OUTLOOP))


# ----------------------------------------------------------------------------- in-loop
def endpoints_from_env() -> tuple[Endpoint, Endpoint]:
    """Where the vReasoner and the judge are served, from the environment only (never from the config, never
    printed): ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL``; the judge may use ``JUDGE_API_KEY`` / ``JUDGE_API_BASE_URL``
    (:data:`~insight_o3.endpoints.endpoint.ENV_KEYS`). Timeouts and retries come from the agent YAML
    (:func:`api_clients`)."""

    def of(role: str) -> Endpoint:
        keys, urls = ENV_KEYS[role]
        return Endpoint(base_url=resolve(None, urls), api_key=resolve_key(None, keys))

    return of("main"), of("judge")


_API: dict[tuple, tuple[AsyncOpenAI, AsyncOpenAI]] = {}


def api_clients(s: RunSettings, endpoints: tuple[Endpoint, Endpoint]) -> tuple[AsyncOpenAI, AsyncOpenAI]:
    """(vReasoner, judge) clients shared by all episodes of this process and event loop, SDK retries and
    timeouts. Each endpoint's requests go through one :class:`~insight_o3.endpoints.rate_limit.AdaptiveLimiter`
    (the library's, as in evaluation): at most the agent YAML's ``vreasoner.max_concurrency`` /
    ``judge.max_concurrency`` in flight, fewer while the endpoint answers 429."""
    vr, jd = s.agent.vreasoner, s.agent.judge
    reasoner = replace(endpoints[0], timeout=vr.timeout_s, max_retries=vr.max_retries)
    judge = replace(endpoints[1], timeout=jd.timeout_s, max_retries=jd.max_retries)
    key = (id(asyncio.get_running_loop()), reasoner, judge, vr.max_concurrency, jd.max_concurrency)
    if key not in _API:
        _API[key] = (
            make_client(reasoner, limiter=AdaptiveLimiter(int(vr.max_concurrency))),
            make_client(judge, role="judge", limiter=AdaptiveLimiter(int(jd.max_concurrency))),
        )
    return _API[key]


def judged_text(text: str | None, max_chars: int | None) -> str | None:
    """The vReasoner's answer turn as the in-loop judge sees it: left-truncated to ``max_chars`` characters, as the
    fork's ``maybe_truncate`` (``insight_o3_agent_loop.py:340-346``: ``"..." + text[-n:][3:]``); None: whole."""
    if text is None or max_chars is None or len(text) <= max_chars:
        return text
    return "..." + text[-max_chars:][len("...") :]


class _RecordingPolicySearcher:
    """The ``searcher`` of :class:`InSightO3`: answers ``locate`` with a policy rollout and keeps it."""

    def __init__(self, policy: PolicySearcher, sampling_params: dict, validate: bool = False):
        self.policy, self.sampling_params, self.validate = policy, sampling_params, validate
        self.rollouts: list[SearcherRollout] = []

    async def locate(self, image_path: str, description: str) -> LocateResult:
        r = await self.policy.run(image_path, description, self.sampling_params, validate=self.validate)
        self.rollouts.append(r)
        return r.result


@dataclass(frozen=True, kw_only=True)
class AnswerCheck:
    """c of r̂_IoU = 1[s = c = 1] for one episode. ``failed``: the check itself was lost (API error):
    the episode counts as a critical failure, not as a wrong answer."""

    correct: bool
    failed: bool
    status: str
    reason: str | None = None


@dataclass(kw_only=True)
class EpisodeOutcome:
    """What one in-loop episode produced; ``critical_failure`` when an API call was lost."""

    rollouts: list[SearcherRollout]
    feedback: list[str | None]
    has_answer: bool
    correct: bool
    critical_failure: bool
    status: EpisodeStatus | str  # or episodes.JUDGE_LOST_STATUS
    error: str | None = None
    judge_status: str | None = None


class VReasonerAgentLoop(FailSafeAgentLoop):
    """In-loop episode: API vReasoner + policy vSearcher; one sample per vSearcher call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = run_settings(self.config)
        self.endpoints = endpoints_from_env()
        self.policy = policy_searcher(self, self.settings)

    def _sample(self, row: dict, image_path: str) -> Sample:
        info = row.get("extra_info") or {}
        gt = (row.get("reward_model") or {}).get("ground_truth", info.get("answer"))
        if gt is None:
            raise ValueError("in-loop row has no reward_model.ground_truth")
        return Sample(
            index=int(info.get("index", 0) or 0),
            question_id=info.get("question_id"),
            image=image_path,
            image_path=image_path,
            question=row_text(row, "question"),
            options=info.get("options") or None,
            answer=str(gt),
        )

    def reasoner(self, searcher: Any, validate: bool) -> InSightO3:
        """The API vReasoner of one episode, configured from the run's settings."""
        reasoner_client, _ = api_clients(self.settings, self.endpoints)
        return InSightO3.from_settings(
            self.settings.reasoner_settings(validate), reasoner_client, searcher, shared_images()
        )

    async def check_answer(self, sample: Sample, res: AnswerResult) -> AnswerCheck:
        """c: whether the episode's final answer is correct. The ONE place the in-loop answer is judged.

        The fork's in-loop check (``AnswerJudge`` flow ``"verify"`` ->
        :func:`~insight_o3.evaluation.judge.in_loop_check`): the first ``\\boxed{}`` / ``<answer>`` span
        (none -> c = 0), equal to the ground truth -> correct, otherwise ``QA_VERIFY_PROMPT`` to
        ``vsearch.judge_model`` (``max_tokens=2048``). The same check scores InSight-o3 at evaluation.
        A lost check is asked again, up to the variant's ``judge_rounds`` with ``judge_retry_interval_s`` between
        (``original``: the fork's reward worker retries its failed rows 10 times, 30 s apart)."""
        _, judge_client = api_clients(self.settings, self.endpoints)
        proto = self.settings.protocol
        # retries=0: a failed check is asked again by the training rounds (check_answer), as in the fork
        judge = AnswerJudge(
            judge_client, self.settings.judge_model, flow="verify", verdicts=proto.judge_verdicts, retries=0
        )
        for round_ in range(proto.judge_rounds):
            if round_:
                await asyncio.sleep(proto.judge_retry_interval_s)
            verdict = await judge.check(
                sample, Attempt(judged_text(res.text, proto.judge_turn_chars), res.finish_reason)
            )
            if verdict.status != VerdictStatus.FAILED:
                break
        failed = verdict.status == VerdictStatus.FAILED
        return AnswerCheck(correct=verdict.is_correct, failed=failed, status=verdict.status, reason=verdict.fail_reason)

    async def episode(self, sample: Sample, sampling_params: dict, validate: bool = False) -> EpisodeOutcome:
        """Run one episode. What a failure means follows ``vsearch.variant`` (:class:`~recipe.vsearch.settings.Protocol`):
        a lost vReasoner call is a critical failure; so is an exhausted format-retry budget under ``original``
        (the fork's ``request.success`` is False then), while under ``paper`` that episode simply has no answer
        (c = 0). A lost answer check is a critical failure under ``paper`` and, under ``original``, an episode
        with status :data:`~recipe.vsearch.episodes.JUDGE_LOST_STATUS` whose rows the trainer replaces."""
        searcher = _RecordingPolicySearcher(self.policy, sampling_params, validate)
        proto = self.settings.protocol
        res = await self.reasoner(searcher, validate).answer(sample.image_path, insight_o3_question(sample))
        outcome = functools.partial(EpisodeOutcome, rollouts=searcher.rollouts, feedback=list(res.feedback))
        lost = res.status == EpisodeStatus.FAILED
        if lost or (res.status == EpisodeStatus.FORMAT_FAILED and proto.format_exhaustion_is_failure):
            return outcome(
                has_answer=False,
                correct=False,
                critical_failure=True,
                status=res.status,
                error=res.error or res.protocol_error,
            )
        if res.status != EpisodeStatus.ANSWERED:  # format retries exhausted (paper) / tool call past the limit: c = 0
            return outcome(
                has_answer=False, correct=False, critical_failure=False, status=res.status, error=res.protocol_error
            )
        c = await self.check_answer(sample, res)
        if c.failed and proto.max_judge_failure_ratio is not None:
            return outcome(
                has_answer=True,
                correct=False,
                critical_failure=False,
                status=JUDGE_LOST_STATUS,
                error=c.reason,
                judge_status=c.status,
            )
        return outcome(
            has_answer=True,
            correct=c.correct,
            critical_failure=c.failed,
            status=res.status,
            error=c.reason,
            judge_status=c.status,
        )

    async def run_episode(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        image_path = row_image_path(kwargs)
        sample = self._sample(kwargs, image_path)
        ep = await self.episode(sample, sampling_params, validate=is_validation(kwargs))
        episode_id = str(kwargs.get(EPISODE_ID_KEY) or kwargs.get("uid") or uuid4().hex)
        stats = EpisodeStats.of(
            episode_id,
            n_calls=len(ep.rollouts),
            has_answer=ep.has_answer,
            correct=ep.correct,
            critical_failure=ep.critical_failure,
            status=ep.status,
            n_feedback=sum(f in ("helpful", "unhelpful") for f in ep.feedback),
        )
        outputs = []
        for k, r in enumerate(ep.rollouts):
            fb = ep.feedback[k] if k < len(ep.feedback) else None
            fields = r.sample_fields(
                is_in_loop=True,
                feedback_helpful=None if fb is None else fb == "helpful",
                answer_correct=ep.correct,
                call_index=k,
                feedback=fb,
                role=ROLE_INLOOP,
                critical_failure=ep.critical_failure,
                episode=stats,
            )
            mask_out = ep.critical_failure and self.settings.protocol.mask_failed_episodes
            outputs.append(rollout_output(r, fields, mask_out=mask_out))
        if not outputs:
            outputs.append(await self._placeholder(sample, ep, stats))
        return attach_extra_samples(outputs[0], outputs[1:])

    async def _placeholder(self, sample: Sample, ep: EpisodeOutcome, stats: EpisodeStats) -> AgentLoopOutput:
        """An episode without vSearcher calls trains nothing, but verl needs one output per row:
        a fully masked text-only row carrying the episode's statistics; the worker drops it."""
        prompt_ids = await self.apply_chat_template([{"role": "user", "content": insight_o3_question(sample)}])
        fields = SampleFields(
            format_error="no vSearcher call",
            search_status="none",
            is_in_loop=True,
            answer_correct=ep.correct,
            call_index=-1,
            role=ROLE_PLACEHOLDER,
            critical_failure=ep.critical_failure,
            episode=stats,
        )
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return AgentLoopOutput(
            prompt_ids=prompt_ids,
            response_ids=[eos],
            response_mask=[0],
            multi_modal_data={},
            num_turns=1,
            metrics=AgentLoopMetrics(),
            extra_fields=fields.to_extra_fields(),
        )


__all__ = [
    "FailSafeAgentLoop",
    "VSearcherAgentLoop",
    "VReasonerAgentLoop",
    "endpoints_from_env",
    "AnswerCheck",
]
