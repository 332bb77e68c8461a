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

Row fields read (from the parquet written by ``create_parquet_dataset.py``): the image comes from
``extra_info.image_path`` or else the first image part of ``raw_prompt``; the description / question
from ``extra_info.description`` / ``extra_info.question`` (+ ``extra_info.options``) or else the
text of ``raw_prompt``; the QA ground truth from ``reward_model.ground_truth``.
"""
from __future__ import annotations

import asyncio
import os
import threading
from dataclasses import dataclass, field, fields
from typing import Any
from uuid import uuid4

import yaml
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput

from insight_o3.agents.clients import InSightO3
from insight_o3.api import ENV_KEYS, Redactor, make_client, resolve
from insight_o3.evaluation.judge import AnswerJudge
from insight_o3.evaluation.samples import Sample
from insight_o3.evaluation.solver import Attempt
from insight_o3.geometry import VSEARCHER_TRAIN_MAX_PIXELS
from insight_o3.images import ImageStore

from .episodes import (EPISODE_FIELDS, EPISODE_ID_KEY, EXTRA_SAMPLES_KEY, ROLE_INLOOP, ROLE_KEY, ROLE_OUTLOOP,
                       ROLE_PLACEHOLDER, episode_fields)
from .policy_searcher import PolicySearcher, SearcherRollout

# ----------------------------------------------------------------------------- row fields


def _image_path_of(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("image", value.get("path"))
    if isinstance(value, str) and value:
        return value[len("file://"):] if value.startswith("file://") else value
    return None


def row_image_path(row: dict) -> str:
    info = row.get("extra_info") or {}
    if _image_path_of(info.get("image_path")):
        return _image_path_of(info["image_path"])
    for m in row.get("raw_prompt") or []:
        for p in m.get("content") if isinstance(m.get("content"), list) else []:
            if isinstance(p, dict) and p.get("type") == "image" and _image_path_of(p.get("image")):
                return _image_path_of(p["image"])
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
            _IMAGES = ImageStore()
        return _IMAGES


def _response_length(config) -> int:
    return int(config.actor_rollout_ref.rollout.response_length)


def _metrics(rollouts: list[SearcherRollout]) -> AgentLoopMetrics:
    return AgentLoopMetrics(generate_sequences=sum(r.generate_s for r in rollouts),
                            tool_calls=sum(r.tool_s for r in rollouts))


def rollout_output(r: SearcherRollout, extra: dict, mask_out: bool = False) -> AgentLoopOutput:
    """An ``AgentLoopOutput`` for one policy vSearcher episode. ``mask_out`` zeroes the whole
    response mask (samples of episodes cut by API failures: excluded from the loss)."""
    mask = [0] * len(r.response_mask) if mask_out else list(r.response_mask)
    return AgentLoopOutput(
        prompt_ids=r.prompt_ids, response_ids=r.response_ids, response_mask=mask,
        response_logprobs=r.response_logprobs, multi_modal_data={"images": list(r.images)},
        num_turns=r.num_turns + 1, metrics=_metrics([r]), extra_fields={**r.reward_fields(), **extra})


class VSearcherAgentLoop(AgentLoopBase):
    """Out-of-loop vSearcher rollout of the policy on a (image, region description, boxes) row."""

    def __init__(self, *args, max_pixels: int = VSEARCHER_TRAIN_MAX_PIXELS, max_tool_calls: int = 6, **kwargs):
        super().__init__(*args, **kwargs)
        self.searcher = PolicySearcher(self, shared_images(), int(max_pixels), int(max_tool_calls),
                                       _response_length(self.config))

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        info = kwargs.get("extra_info") or {}
        r = await self.searcher.run(row_image_path(kwargs), row_text(kwargs, "description"), sampling_params)
        extra = {"is_in_loop": False, "feedback_helpful": None, "answer_correct": None,
                 "bboxes": info.get("bboxes"), ROLE_KEY: ROLE_OUTLOOP, "critical_failure": False}
        return rollout_output(r, extra)


# ----------------------------------------------------------------------------- in-loop
@dataclass
class VReasonerSettings:
    """The API side of an in-loop episode. Values come from the agent loop's YAML keys, then
    ``agent_config_path`` (the recipe's ``config/agent_<model>.yaml``), then the environment
    (``API_MODEL_FOR_AGENT``, ``JUDGE_MODEL``, ``OPENAI_BASE_URL``, ``OPENAI_API_KEY``; the judge may
    use ``JUDGE_API_KEY`` / ``JUDGE_BASE_URL``)."""

    reasoner_model: str | None = None
    judge_model: str | None = None
    base_url: str | None = None
    api_key: str | None = None
    judge_base_url: str | None = None
    judge_api_key: str | None = None
    reasoner_max_pixels: int | None = 1280 * 1280
    max_search_calls: int = 6
    max_format_retries: int = 2
    max_concurrency: int = 64
    api_timeout: float = 600.0
    api_max_retries: int = 5
    completion_kwargs: dict = field(default_factory=dict)
    judge_completion_kwargs: dict = field(default_factory=dict)
    image_url_extra: dict | None = None
    searcher_max_pixels: int = VSEARCHER_TRAIN_MAX_PIXELS
    max_tool_calls: int = 6

    @classmethod
    def load(cls, agent_config_path: str | None = None, **overrides) -> "VReasonerSettings":
        values: dict = {}
        if agent_config_path:
            with open(agent_config_path) as fh:
                values.update(yaml.safe_load(fh) or {})
        values.update({k: v for k, v in overrides.items() if v is not None})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"unknown vReasoner settings {unknown}; known: {sorted(known)}")
        s = cls(**{k: (dict(v) if isinstance(v, dict) or hasattr(v, "items") else v) for k, v in values.items()})
        s.reasoner_model = resolve(s.reasoner_model, ("API_MODEL_FOR_AGENT",))
        s.judge_model = resolve(s.judge_model, ("JUDGE_MODEL",))
        key_env, url_env = ENV_KEYS["main"]
        s.api_key, s.base_url = resolve(s.api_key, key_env), resolve(s.base_url, url_env)
        jkey_env, jurl_env = ENV_KEYS["judge"]
        s.judge_api_key, s.judge_base_url = resolve(s.judge_api_key, jkey_env), resolve(s.judge_base_url, jurl_env)
        if not s.reasoner_model or not s.judge_model:
            raise ValueError("the in-loop agent needs a vReasoner and a judge model: set API_MODEL_FOR_AGENT and "
                             "JUDGE_MODEL (or reasoner_model/judge_model in the agent config)")
        return s


class _Completions:
    def __init__(self, inner, sem: asyncio.Semaphore):
        self._inner, self._sem = inner, sem

    async def create(self, **kw):
        async with self._sem:
            return await self._inner.create(**kw)


class BoundedClient:
    """An ``AsyncOpenAI`` whose ``chat.completions.create`` waits on a shared semaphore: every
    vReasoner and judge call of a worker process shares ``max_concurrency`` slots. Retries and
    backoff are the SDK's (``max_retries``)."""

    def __init__(self, client, sem: asyncio.Semaphore):
        self.client = client
        self.chat = type("Chat", (), {})()
        self.chat.completions = _Completions(client.chat.completions, sem)


_API: dict[tuple, tuple[BoundedClient, BoundedClient]] = {}


def api_clients(s: VReasonerSettings) -> tuple[BoundedClient, BoundedClient]:
    """(vReasoner, judge) clients shared by all episodes of this process and event loop."""
    loop = asyncio.get_running_loop()
    key = (id(loop), s.base_url, s.api_key, s.judge_base_url, s.judge_api_key, s.max_concurrency,
           s.api_timeout, s.api_max_retries)
    if key not in _API:
        sem = asyncio.Semaphore(int(s.max_concurrency))
        main = make_client(s.api_key, s.base_url, s.api_timeout, s.api_max_retries)
        judge = (main if (s.judge_base_url, s.judge_api_key) == (s.base_url, s.api_key)
                 else make_client(s.judge_api_key, s.judge_base_url, s.api_timeout, s.api_max_retries))
        _API[key] = (BoundedClient(main, sem), BoundedClient(judge, sem))
    return _API[key]


class _RecordingPolicySearcher:
    """The ``searcher`` of :class:`InSightO3`: answers ``locate`` with a policy rollout and keeps it."""

    def __init__(self, policy: PolicySearcher, sampling_params: dict):
        self.policy, self.sampling_params = policy, sampling_params
        self.rollouts: list[SearcherRollout] = []

    async def locate(self, image_path: str, description: str):
        r = await self.policy.run(image_path, description, self.sampling_params)
        self.rollouts.append(r)
        return r.result


@dataclass
class EpisodeOutcome:
    """What one in-loop episode produced; ``critical_failure`` when an API call was lost."""

    rollouts: list[SearcherRollout]
    feedback: list[str | None]
    has_answer: bool
    correct: bool
    critical_failure: bool
    status: str
    error: str | None = None
    judge_status: str | None = None


class VReasonerAgentLoop(AgentLoopBase):
    """In-loop episode: API vReasoner + policy vSearcher; one sample per vSearcher call."""

    def __init__(self, *args, agent_config_path: str | None = None, **kwargs):
        own = {f.name for f in fields(VReasonerSettings)}
        settings = {k: kwargs.pop(k) for k in list(kwargs) if k in own}
        super().__init__(*args, **kwargs)
        self.settings = VReasonerSettings.load(agent_config_path, **settings)
        self.policy = PolicySearcher(self, shared_images(), int(self.settings.searcher_max_pixels),
                                     int(self.settings.max_tool_calls), _response_length(self.config))
        self.redact = Redactor(self.settings.api_key, self.settings.judge_api_key)

    def _sample(self, row: dict, image_path: str) -> Sample:
        info = row.get("extra_info") or {}
        gt = (row.get("reward_model") or {}).get("ground_truth", info.get("answer"))
        if gt is None:
            raise ValueError("in-loop row has no reward_model.ground_truth")
        return Sample(index=int(info.get("index", 0) or 0), question_id=info.get("question_id"), image=image_path,
                      image_path=image_path, question=row_text(row, "question"), options=info.get("options") or None,
                      answer=str(gt))

    async def episode(self, sample: Sample, sampling_params: dict) -> EpisodeOutcome:
        s = self.settings
        reasoner_client, judge_client = api_clients(s)
        searcher = _RecordingPolicySearcher(self.policy, sampling_params)
        agent = InSightO3(reasoner_client, s.reasoner_model, searcher, shared_images(), s.reasoner_max_pixels,
                          mode="train", max_search_calls=s.max_search_calls,
                          completion_kwargs=s.completion_kwargs, image_url_extra=s.image_url_extra,
                          max_format_retries=s.max_format_retries, redactor=self.redact)
        res = await agent.answer(sample.image_path, sample.prompt())
        if res.status == "failed":
            return EpisodeOutcome(searcher.rollouts, list(res.feedback), False, False, True, res.status, res.error)
        if res.status != "answered":  # format retries exhausted / tool call past the limit: c = 0, not a failure
            return EpisodeOutcome(searcher.rollouts, list(res.feedback), False, False, False, res.status,
                                  res.protocol_error)
        judge = AnswerJudge(judge_client, s.judge_model, redact=self.redact, completion_kwargs=s.judge_completion_kwargs)
        verdict = await judge.check(sample, Attempt(res.text, res.finish_reason))
        return EpisodeOutcome(searcher.rollouts, list(res.feedback), True, verdict.is_correct,
                              verdict.status == "failed", res.status, verdict.fail_reason, verdict.status)

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        image_path = row_image_path(kwargs)
        sample = self._sample(kwargs, image_path)
        ep = await self.episode(sample, sampling_params)
        episode_id = str(kwargs.get(EPISODE_ID_KEY) or kwargs.get("uid") or uuid4().hex)
        common = episode_fields(episode_id, n_calls=len(ep.rollouts), has_answer=ep.has_answer, correct=ep.correct,
                                critical_failure=ep.critical_failure, status=ep.status,
                                n_feedback=sum(f in ("helpful", "unhelpful") for f in ep.feedback))
        outputs = []
        for k, r in enumerate(ep.rollouts):
            fb = ep.feedback[k] if k < len(ep.feedback) else None
            extra = {"is_in_loop": True, "feedback_helpful": None if fb is None else fb == "helpful",
                     "answer_correct": ep.correct, "call_index": k, "feedback": fb, ROLE_KEY: ROLE_INLOOP,
                     "critical_failure": ep.critical_failure, **common}
            outputs.append(rollout_output(r, extra, mask_out=ep.critical_failure))
        if not outputs:
            outputs.append(await self._placeholder(sample, ep, common))
        first = outputs[0]
        first.extra_fields[EXTRA_SAMPLES_KEY] = outputs[1:]
        return first

    async def _placeholder(self, sample: Sample, ep: EpisodeOutcome, common: dict) -> AgentLoopOutput:
        """An episode without vSearcher calls trains nothing, but verl needs one output per row:
        a fully masked text-only row carrying the episode's statistics; the worker drops it."""
        prompt_ids = await self.apply_chat_template([{"role": "user", "content": sample.prompt()}])
        extra = {"n_tool": 0, "format_ok": False, "format_error": "no vSearcher call", "pred_box": None,
                 "is_in_loop": True, "feedback_helpful": None, "answer_correct": ep.correct, "call_index": -1,
                 "feedback": None, ROLE_KEY: ROLE_PLACEHOLDER, "critical_failure": ep.critical_failure,
                 "search_status": "none", "search_truncated": False, **common}
        eos = self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        return AgentLoopOutput(prompt_ids=prompt_ids, response_ids=[eos], response_mask=[0], multi_modal_data={},
                               num_turns=1, metrics=AgentLoopMetrics(), extra_fields=extra)


__all__ = ["VSearcherAgentLoop", "VReasonerAgentLoop", "VReasonerSettings", "EPISODE_FIELDS"]
