"""From in-loop episodes to training samples: the answer to verl's one-output-per-row rule.

verl 0.7 gives an agent loop one dataset row and takes back exactly one ``AgentLoopOutput``; the
trainer then ``union``s the rollout batch with the (repeated) input batch row by row. An in-loop
episode, however, yields one policy sample per vSearcher call: 0..6 of them. The recipe solves it
in three places, each small:

1. **Agent loop** (:class:`recipe.vsearch.agent_loops.VReasonerAgentLoop`) returns the episode's
   first sample as its output and the others in ``extra_fields[EXTRA_SAMPLES_KEY]``; an episode
   without calls returns a fully masked *placeholder* that only carries the episode statistics.
2. **Worker** (:class:`VSearchAgentLoopWorker`, installed by :class:`VSearchAgentLoopManager`,
   selected with ``+actor_rollout_ref.rollout.agent.agent_loop_manager_class=
   recipe.vsearch.episodes.VSearchAgentLoopManager``) pops the extra samples and runs verl's own
   per-sample post-processing (padding, multimodal inputs, mrope position ids, reward loop) on
   *each* of them, so every sample is a normal verl row. It also copies the row identity
   (``uid``, ``data_source``, ``reward_model``, ``extra_info``) onto every sample and gives in-loop
   samples the uid ``inloop-<episode uid>-<k>`` that ``vsearch_hybrid_grpo`` recognises.
3. **Trainer** (:mod:`recipe.vsearch.trainer`) no longer unions with the input batch (the rollout
   rows are self-contained) and calls :func:`finalize_batch`: episode metrics are read, placeholders
   dropped, and the batch is padded to a multiple of the data-parallel size by **duplicating rows
   with an all-zero response mask** (uid ``pad-<i>``). Duplicates are chosen over dropping because
   every real sample is kept; a fully masked row contributes nothing: zero advantage, excluded from
   the in-loop statistics by the estimator and from verl's ``seq-mean-*`` loss denominators.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import Any
from uuid import uuid4

import numpy as np
import ray
import torch
from verl.experimental.agent_loop.agent_loop import (
    AgentLoopManager,
    AgentLoopMetrics,
    AgentLoopOutput,
    AgentLoopWorkerBase,
)

from insight_o3.base.json_types import JSONObject
from insight_o3.base.redaction import failure_reason
from insight_o3.endpoints.endpoint import ENV_KEYS, resolve_key
from insight_o3.protocol.rewards import RewardRules, batch_withholds_pseudo_iou, combine_terms
from verl import DataProto

from .image_inputs import VIEWS_KEY, with_references
from .protocols import PROTOCOLS, Protocol
from .rollout_fields import (
    EPISODE_ID_KEY,
    EXTRA_SAMPLES_KEY,
    METRIC_KEYS,
    ROLE_INLOOP,
    ROLE_KEY,
    ROLE_OUTLOOP,
    ROLE_PADDING,
    ROLE_PLACEHOLDER,
    VALIDATE_KEY,
    EpisodeStats,
    SampleFields,
    episode_fields,
    fill_optional,
    pop_extra_samples,
    role_of,
    with_row_identity,
)

#: the contract's names, where the recipe's callers and tests have always imported them (``rollout_fields`` owns them)
__all__ = [
    "EPISODE_ID_KEY",
    "EXTRA_SAMPLES_KEY",
    "ROLE_INLOOP",
    "ROLE_KEY",
    "ROLE_OUTLOOP",
    "ROLE_PADDING",
    "ROLE_PLACEHOLDER",
    "VALIDATE_KEY",
    "VSearchAgentLoopManager",
    "VSearchAgentLoopWorker",
    "episode_fields",
    "episode_metrics",
    "episode_failures",
    "EpisodeFailures",
    "failed_episode_output",
    "finalize_batch",
    "withhold_pseudo_iou",
    "image_grid_thw",
    "JUDGE_LOST_STATUS",
]


#: ``format_error`` of a failed-episode placeholder: this prefix, then ``"<ExceptionType>: <message>"`` (redacted)
EPISODE_FAILED_PREFIX = "episode failed: "
#: ``episode_status`` of an episode that raised (:func:`failed_episode_output`)
ERROR_STATUS = "error"


def failed_episode_output(
    tokenizer: Any, row: JSONObject, error: BaseException, in_loop: bool, where: str
) -> AgentLoopOutput:
    """The failed-episode placeholder of ``agent_loops.FailSafeAgentLoop`` (also used by the worker when an episode's
    rows cannot be post-processed, :class:`VSearchAgentLoopWorker`)."""
    episode_id = str(row.get(EPISODE_ID_KEY) or row.get("uid") or uuid4().hex)
    for role in ("main", "judge"):  # registers this process's keys, so that the message below never shows them
        resolve_key(None, ENV_KEYS[role][0])
    message = failure_reason(error, 500)
    print(f"[vsearch] episode {episode_id} ({where}) failed: {message}", file=sys.stderr, flush=True)
    stats = EpisodeStats.of(
        episode_id, n_calls=0, has_answer=False, correct=False, critical_failure=True, status=ERROR_STATUS, n_feedback=0
    )
    fields = SampleFields(
        format_error=f"{EPISODE_FAILED_PREFIX}{message}",
        search_status="error",
        is_in_loop=in_loop,
        answer_correct=False,
        call_index=-1,
        role=ROLE_PLACEHOLDER,
        critical_failure=True,
        episode=stats,
    )
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return AgentLoopOutput(
        prompt_ids=[eos],
        response_ids=[eos],
        response_mask=[0],
        multi_modal_data={},
        num_turns=1,
        metrics=AgentLoopMetrics(),
        extra_fields=fields.to_extra_fields(),
    )


def image_grid_thw(processor: Any, images: list[Any]) -> torch.Tensor:
    """``image_grid_thw`` as Qwen2.5-VL's image processor returns it for ``images``, without computing pixel
    values: ``(1, h / patch, w / patch)`` of each image's ``smart_resize`` under the processor's pixel limits."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    ip = processor.image_processor
    patch, merge = int(ip.patch_size), int(ip.merge_size)
    size = getattr(ip, "size", None) or {}
    min_pixels = size.get("shortest_edge", getattr(ip, "min_pixels", None))
    max_pixels = size.get("longest_edge", getattr(ip, "max_pixels", None))
    rows = []
    for img in images:
        h, w = smart_resize(img.height, img.width, factor=patch * merge, min_pixels=min_pixels, max_pixels=max_pixels)
        rows.append([1, h // patch, w // patch])
    return torch.tensor(rows, dtype=torch.long)


class VSearchAgentLoopWorker(AgentLoopWorkerBase):
    """``AgentLoopWorker`` that turns one agent-loop output into 1..k verl rows (see module doc)."""

    async def _agent_loop_postprocess(self, output: Any, **kwargs: Any) -> list:
        extras = pop_extra_samples(output)
        try:
            return [await self._postprocess_sample(sample, **kwargs) for sample in [output, *extras]]
        except Exception as e:
            # e.g. a model that emitted image pads of its own: the processor cannot pair pads and images. One
            # episode's rows fail, not the step: the episode becomes the failed placeholder of
            # agent_loops.FailSafeAgentLoop (masked, counted with the API failures)
            in_loop = role_of(output.extra_fields) in (ROLE_INLOOP, ROLE_PLACEHOLDER)
            failed = failed_episode_output(self.tokenizer, kwargs, e, in_loop, "post-processing")
            return [await self._postprocess_sample(failed, **kwargs)]

    async def _postprocess_sample(self, sample: Any, **kwargs: Any) -> Any:
        with_row_identity(sample.extra_fields, kwargs)
        images = (sample.multi_modal_data or {}).get("images")
        views = (sample.multi_modal_data or {}).get(VIEWS_KEY)
        if self.processor is not None and images and kwargs.get(VALIDATE_KEY):
            # a validation row is never trained on: no pixel values (fp32, ~18 KB per image token, ~308 MB for
            # one image at val.sh's 12.8M-pixel budget), only the grids verl's mrope position ids need
            self._mm_inputs_ready()[id(sample)] = {"image_grid_thw": image_grid_thw(self.processor, images)}
        elif self.processor is not None and images and views is not None:
            # a training row: the grids and the images' references (a few hundred bytes); the actor and reference
            # workers rebuild the pixel values where the model runs (recipe.vsearch.image_inputs)
            self._mm_inputs_ready()[id(sample)] = {"image_grid_thw": image_grid_thw(self.processor, images)}
            row = await super()._agent_loop_postprocess(sample, **kwargs)
            # set after verl's pydantic record validated its tensors (it types multi_modal_inputs as tensors only)
            row.multi_modal_inputs = with_references(row.multi_modal_inputs["image_grid_thw"], views)
            return row
        elif self.processor is not None and images:
            # the image processor (pixel values of every image of the row) in a thread, not on the event loop
            # that every agent loop of this worker shares; verl's post-processing then takes the result
            ids = torch.tensor([list(sample.prompt_ids) + list(sample.response_ids)])
            self._mm_inputs_ready()[id(sample)] = await asyncio.to_thread(
                AgentLoopWorkerBase._compute_multi_modal_inputs, self, sample, ids
            )
        return await super()._agent_loop_postprocess(sample, **kwargs)

    def _mm_inputs_ready(self) -> dict[int, JSONObject]:
        """Each sample's multimodal inputs computed ahead, by ``id(sample)``."""
        if not hasattr(self, "_mm_ready"):
            self._mm_ready: dict[int, JSONObject] = {}
        return self._mm_ready

    def _compute_multi_modal_inputs(self, output: Any, input_ids: torch.Tensor) -> JSONObject:
        """verl's multimodal inputs of ``output``, computed off the event loop by :meth:`_agent_loop_postprocess`
        (verl decodes the padded ids without special tokens: the same text as prompt + response ids)."""
        ready = self._mm_inputs_ready().pop(id(output), None)
        return ready if ready is not None else super()._compute_multi_modal_inputs(output, input_ids)

    def _postprocess(self, inputs: list) -> DataProto:
        flat = [row for item in inputs for row in (item if isinstance(item, list) else [item])]
        for row in flat:
            fill_optional(row.extra_fields)
        return super()._postprocess(flat)


class VSearchAgentLoopManager(AgentLoopManager):
    """``AgentLoopManager`` whose workers expand episodes (``agent_loop_workers_class`` is verl's
    documented hook for recipes)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.agent_loop_workers_class = ray.remote(VSearchAgentLoopWorker)
        super().__init__(*args, **kwargs)


def _col(batch: DataProto, key: str, default: Any = None) -> np.ndarray:
    if key in batch.non_tensor_batch:
        return batch.non_tensor_batch[key]
    return np.array([default] * len(batch), dtype=object)


def episode_metrics(batch: DataProto) -> dict[str, float]:
    """Per-step in-loop statistics, one value per episode (first row of each ``episode_id``).

    ``vsearch/accuracy_reward``: judged-correct episodes over episodes not cut by API failures;
    ``vsearch/critical_failure_ratio``: episodes cut by API failures, or ended by an exception (any loop,
    ``agent_loops.FailSafeAgentLoop``), over all episodes; ``vsearch/episode_error_ratio``: the exceptions alone;
    ``vsearch/has_answer``: episodes ending with a boxed answer; ``vsearch/calls_per_qa``: vSearcher
    calls per episode; ``vsearch/feedback_rate``: calls the vReasoner rated (helpful/unhelpful) over
    calls; ``vsearch/pseudo_iou_rate``: in-loop samples with r̂_IoU = 1[s = c = 1].
    """
    rows = SampleFields.from_batch(batch.non_tensor_batch, len(batch), METRIC_KEYS)
    episodes: dict[str, EpisodeStats] = {}
    for f in rows:
        if f.role in (ROLE_INLOOP, ROLE_PLACEHOLDER) and f.episode is not None:
            episodes.setdefault(f.episode.id, f.episode)
    m: dict[str, float] = {}
    if episodes:
        eps = list(episodes.values())
        crit = np.array([e.critical_failure for e in eps])
        ok = ~crit
        correct = np.array([e.correct for e in eps])
        m["vsearch/critical_failure_ratio"] = float(crit.mean())
        # the share of those that ended in an exception (agent_loops.FailSafeAgentLoop), not an API failure
        m["vsearch/episode_error_ratio"] = float(np.mean([e.status == ERROR_STATUS for e in eps]))
        m["vsearch/accuracy_reward"] = float(correct[ok].mean()) if ok.any() else 0.0
        m["vsearch/has_answer"] = float(np.mean([e.has_answer for e in eps]))
        calls = np.array([e.n_calls for e in eps])
        m["vsearch/calls_per_qa"] = float(calls.mean())
        fb = np.array([e.n_feedback for e in eps])
        m["vsearch/feedback_rate"] = float(fb.sum() / calls.sum()) if calls.sum() else 0.0
    inloop = [f for f in rows if f.role == ROLE_INLOOP]
    if inloop:
        m["vsearch/pseudo_iou_rate"] = float(
            np.mean([bool(f.feedback_helpful) and bool(f.answer_correct) for f in inloop])
        )
        m["vsearch/inloop_samples"] = float(len(inloop))
    outloop = np.array([f.role == ROLE_OUTLOOP for f in rows], dtype=bool)
    if outloop.any():
        m["vsearch/outloop_samples"] = float(outloop.sum())
        for key in ("iou", "r_iou"):  # the reward's own outputs (reward_fn.compute_score), not sample fields
            if key in batch.non_tensor_batch:
                vals = np.array([float(v) for v in batch.non_tensor_batch[key][outloop] if v is not None])
                vals = vals[vals >= 0] if key == "iou" else vals
                m[f"vsearch/outloop_mean_{key}"] = float(vals.mean()) if len(vals) else 0.0
    return m


@dataclass(frozen=True)
class EpisodeFailures:
    """Why a step's episodes failed, by side: ``raised`` ended in an exception on the policy's side (the rollout
    server or engine, an image file, the agent loop: :func:`failed_episode_output`), ``api_lost`` lost a vReasoner
    or judge call (in-loop). ``first_error``: the first raised episode's ``"<ExceptionType>: <message>"``."""

    episodes: int
    raised: int
    api_lost: int
    first_error: str | None

    @property
    def first_error_type(self) -> str | None:
        return None if self.first_error is None else self.first_error.split(":", 1)[0].strip()


def episode_failures(batch: DataProto) -> EpisodeFailures:
    """The :class:`EpisodeFailures` of a rollout batch (before :func:`finalize_batch` drops the placeholders),
    over the episodes :func:`episode_metrics` counts."""
    rows = SampleFields.from_batch(batch.non_tensor_batch, len(batch), (*METRIC_KEYS, "format_error"))
    first: dict[str, SampleFields] = {}
    for f in rows:
        if f.role in (ROLE_INLOOP, ROLE_PLACEHOLDER) and f.episode is not None:
            first.setdefault(f.episode.id, f)
    raised = [f for f in first.values() if f.episode is not None and f.episode.status == ERROR_STATUS]
    lost = [f for f in first.values() if f.episode is not None and f.episode.critical_failure]
    error = next((str(f.format_error) for f in raised if f.format_error), None)
    if error is not None and error.startswith(EPISODE_FAILED_PREFIX):
        error = error[len(EPISODE_FAILED_PREFIX) :]
    return EpisodeFailures(len(first), len(raised), len(lost) - len(raised), error)


#: the status an in-loop episode gets under ``original`` when its answer check was still lost after every judge
#: round (the fork's ``compute_score_success`` False): its rows are dropped and replaced by copies of kept rows
JUDGE_LOST_STATUS = "judge_lost"


def withhold_pseudo_iou(batch: DataProto, rules: RewardRules) -> int:
    """The fork's batch rule on the pseudo IoU (:func:`insight_o3.protocol.rewards.batch_withholds_pseudo_iou`, ``original``
    only): when no sample of the step's rollout ``batch`` carries a vReasoner rating, every in-loop sample's
    ``r_iou`` becomes 0 and its score is recombined from its other terms, in place: the reward columns ``r_iou`` /
    ``score`` and ``rm_scores`` (the reward loop scored each sample alone, before the batch existed). Called on the
    whole rollout, before :func:`finalize_batch` (the fork decides before replacing rows). Returns the number of
    samples whose score changed."""
    ratings = [None if r is None else bool(r) for r in _col(batch, "feedback_helpful")]
    if not batch_withholds_pseudo_iou(rules, ratings):
        return 0
    nt = batch.non_tensor_batch
    rows = [i for i, role in enumerate(_col(batch, ROLE_KEY)) if role == ROLE_INLOOP and float(nt["r_iou"][i]) != 0.0]
    if not rows:
        return 0
    rm = batch.batch["rm_scores"]  # the reward loop put each score on the response's last token
    last = batch.batch["attention_mask"][:, batch.batch["prompts"].size(1) :].sum(dim=1) - 1
    r_iou, score = nt["r_iou"].copy(), nt["score"].copy()
    for i in rows:
        new = combine_terms(
            rules.reward_type,
            rules.weights,
            gate=float(nt["tool_gate"][i]),
            r_format=float(nt["r_format"][i]),
            r_iou=0.0,
        )
        r_iou[i], score[i] = 0.0, new
        rm[i] = 0.0
        rm[i, int(last[i])] = new
    nt["r_iou"], nt["score"] = r_iou, score
    return len(rows)


def finalize_batch(
    batch: DataProto, dp_size: int, protocol: Protocol = PROTOCOLS["original"]
) -> tuple[DataProto, dict[str, float]]:
    """The training batch of a step: placeholders dropped, padded to a multiple of ``dp_size``.

    ``protocol`` (the run's ``vsearch.variant``) decides the rest, each as the fork did under ``original``:

    * rows of episodes whose answer check was lost after every judge round (:data:`JUDGE_LOST_STATUS`,
      ``original`` only) are dropped and replaced by copies of kept rows drawn with ``RandomState(42)``, as the
      fork's trainer replaces rows whose ``compute_score_success`` is False (copies trained like their source);
    * padding rows (role ``padding``, metrics leave them out) are copies of the first kept rows, trained like
      them (``original``, verl's ``pad_dataproto_to_divisor`` in the fork) or with an all-zero response mask
      (``paper``: no sample, no token; uid ``pad-<i>``).

    Returns the batch and the step's episode metrics (computed before dropping), with ``vsearch/padding_rows``,
    ``vsearch/masked_rows``, ``vsearch/judge_lost_rows`` and ``vsearch/judge_lost_ratio`` (lost checks over every
    row the fork scored: the policy rows plus one vReasoner row per in-loop episode)."""
    metrics = episode_metrics(batch)
    rows = SampleFields.from_batch(batch.non_tensor_batch, len(batch), METRIC_KEYS)
    roles = np.array([f.role for f in rows], dtype=object)
    lost = np.array([f.episode is not None and f.episode.status == JUDGE_LOST_STATUS for f in rows], dtype=bool)
    n_episodes = len({f.episode.id for f in rows if f.episode is not None})
    keep = np.flatnonzero((roles != ROLE_PLACEHOLDER) & ~lost)
    n_lost_rows = int(((roles != ROLE_PLACEHOLDER) & lost).sum())
    n_lost_checks = len({f.episode.id for f, x in zip(rows, lost) if x and f.episode is not None})
    scored = int((roles != ROLE_PLACEHOLDER).sum()) + n_episodes
    metrics["vsearch/judge_lost_rows"] = float(n_lost_rows)
    metrics["vsearch/judge_lost_ratio"] = n_lost_checks / scored if scored else 0.0
    if n_lost_rows and len(keep):  # the fork: rng = RandomState(42); rng.choice(idxs_to_keep, num_to_pad)
        keep = np.concatenate([keep, np.random.RandomState(42).choice(keep, size=n_lost_rows, replace=True)])
    donors = keep if len(keep) else np.arange(len(batch))
    n = len(keep)
    target = max(dp_size, -(-n // dp_size) * dp_size)
    n_pad = target - n
    pad_idx = donors[np.arange(n_pad) % len(donors)]
    out = batch.select_idxs(np.concatenate([keep, pad_idx]).astype(np.int64))
    if n_pad:
        if not protocol.pad_rows_trained or not len(keep):
            out.batch["response_mask"][n:] = 0
        if "uid" not in out.non_tensor_batch:
            out.non_tensor_batch["uid"] = np.array([None] * len(out), dtype=object)
        uids = out.non_tensor_batch["uid"].copy()
        roles_out = _col(out, ROLE_KEY, ROLE_OUTLOOP).copy()
        for j in range(n, target):
            roles_out[j] = ROLE_PADDING
            if not protocol.pad_rows_trained:  # a trained copy keeps its uid: it joins its group, as in the fork
                uids[j] = f"pad-{j}"
        out.non_tensor_batch["uid"], out.non_tensor_batch[ROLE_KEY] = uids, roles_out
    metrics["vsearch/padding_rows"] = float(n_pad)
    metrics["vsearch/masked_rows"] = float((out.batch["response_mask"].sum(-1) == 0).sum().item())
    assert torch.is_tensor(out.batch["response_mask"])
    return out, metrics
