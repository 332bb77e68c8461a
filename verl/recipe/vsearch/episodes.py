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

from insight_o3.api import ENV_KEYS, resolve_key
from insight_o3.redaction import failure_reason
from verl import DataProto

from .hybrid_advantage import inloop_uid

EXTRA_SAMPLES_KEY = "vsearch_extra_samples"
ROLE_KEY = "vsearch_role"
ROLE_OUTLOOP, ROLE_INLOOP, ROLE_PLACEHOLDER, ROLE_PADDING = "outloop", "inloop", "placeholder", "padding"
#: row identity copied from the input row onto every sample of its episode
ROW_KEYS = ("uid", "data_source", "reward_model", "extra_info", "index", "agent_name")
EPISODE_FIELDS = (
    "episode_id",
    "episode_n_calls",
    "episode_has_answer",
    "episode_correct",
    "episode_critical_failure",
    "episode_status",
    "episode_n_feedback",
)
#: input column naming the episode of each rollout row (``<uid>-<j>``, set by the trainer: the n repeats of
#: one QA item share the uid but are distinct episodes); the in-loop loop falls back to the uid
EPISODE_ID_KEY = "vsearch_episode_id"
#: input column telling the agent loops that a rollout belongs to a validation pass (set by the trainer on
#: every generation batch; verl 0.7 passes only sampling parameters, not ``meta_info["validate"]``, to a loop)
VALIDATE_KEY = "vsearch_validate"
#: sample fields only some agent loops emit; every worker fills them (None) so that verl's
#: ``DataProto.concat`` of the workers' outputs sees the same columns from each worker
OPTIONAL_SAMPLE_KEYS = ("bboxes", "call_index", "feedback", "crop_boxes", "frame_size", "image_size", *EPISODE_FIELDS)


def episode_fields(
    episode_id: str,
    *,
    n_calls: int,
    has_answer: bool,
    correct: bool,
    critical_failure: bool,
    status: str,
    n_feedback: int,
) -> dict:
    """Episode-level statistics, repeated on each of the episode's samples (and its placeholder)."""
    return dict(
        zip(
            EPISODE_FIELDS,
            (
                episode_id,
                int(n_calls),
                bool(has_answer),
                bool(correct),
                bool(critical_failure),
                str(status),
                int(n_feedback),
            ),
        )
    )


def failed_episode_output(tokenizer, row: dict, error: BaseException, in_loop: bool, where: str) -> AgentLoopOutput:
    """The failed-episode placeholder of ``agent_loops.FailSafeAgentLoop`` (also used by the worker when an episode's
    rows cannot be post-processed, :class:`VSearchAgentLoopWorker`)."""
    episode_id = str(row.get(EPISODE_ID_KEY) or row.get("uid") or uuid4().hex)
    for role in ("main", "judge"):  # registers this process's keys, so that the message below never shows them
        resolve_key(None, ENV_KEYS[role][0])
    message = failure_reason(error, 500)
    print(f"[vsearch] episode {episode_id} ({where}) failed: {message}", file=sys.stderr, flush=True)
    common = episode_fields(
        episode_id, n_calls=0, has_answer=False, correct=False, critical_failure=True, status="error", n_feedback=0
    )
    extra = {
        "n_tool": 0,
        "format_ok": False,
        "format_error": f"episode failed: {message}",
        "pred_box": None,
        "is_in_loop": in_loop,
        "feedback_helpful": None,
        "answer_correct": False,
        "call_index": -1,
        "feedback": None,
        ROLE_KEY: ROLE_PLACEHOLDER,
        "critical_failure": True,
        "search_status": "error",
        "search_truncated": False,
        **common,
    }
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return AgentLoopOutput(
        prompt_ids=[eos],
        response_ids=[eos],
        response_mask=[0],
        multi_modal_data={},
        num_turns=1,
        metrics=AgentLoopMetrics(),
        extra_fields=extra,
    )


def image_grid_thw(processor, images) -> torch.Tensor:
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

    async def _agent_loop_postprocess(self, output, **kwargs) -> list:
        extras = output.extra_fields.pop(EXTRA_SAMPLES_KEY, None) or []
        try:
            return [await self._postprocess_sample(sample, **kwargs) for sample in [output, *extras]]
        except Exception as e:
            # e.g. a model that emitted image pads of its own: the processor cannot pair pads and images. One
            # episode's rows fail, not the step: the episode becomes the failed placeholder of
            # agent_loops.FailSafeAgentLoop (masked, counted with the API failures)
            in_loop = output.extra_fields.get(ROLE_KEY) in (ROLE_INLOOP, ROLE_PLACEHOLDER)
            failed = failed_episode_output(self.tokenizer, kwargs, e, in_loop, "post-processing")
            return [await self._postprocess_sample(failed, **kwargs)]

    async def _postprocess_sample(self, sample, **kwargs):
        for key in ROW_KEYS:
            if key in kwargs:
                sample.extra_fields.setdefault(key, kwargs[key])
        if sample.extra_fields.get(ROLE_KEY) in (ROLE_INLOOP, ROLE_PLACEHOLDER):
            sample.extra_fields["uid"] = inloop_uid(
                str(sample.extra_fields.get("episode_id", kwargs.get("uid"))),
                int(sample.extra_fields.get("call_index", 0)),
            )
        images = (sample.multi_modal_data or {}).get("images")
        if self.processor is not None and images and kwargs.get(VALIDATE_KEY):
            # a validation row is never trained on: no pixel values (fp32, ~18 KB per image token, ~308 MB for
            # one image at val.sh's 12.8M-pixel budget), only the grids verl's mrope position ids need
            self._mm_inputs_ready()[id(sample)] = {"image_grid_thw": image_grid_thw(self.processor, images)}
        elif self.processor is not None and images:
            # the image processor (pixel values of every image of the row) in a thread, not on the event loop
            # that every agent loop of this worker shares; verl's post-processing then takes the result
            ids = torch.tensor([list(sample.prompt_ids) + list(sample.response_ids)])
            self._mm_inputs_ready()[id(sample)] = await asyncio.to_thread(
                AgentLoopWorkerBase._compute_multi_modal_inputs, self, sample, ids
            )
        return await super()._agent_loop_postprocess(sample, **kwargs)

    def _mm_inputs_ready(self) -> dict:
        if not hasattr(self, "_mm_ready"):
            self._mm_ready = {}
        return self._mm_ready

    def _compute_multi_modal_inputs(self, output, input_ids) -> dict:
        """verl's multimodal inputs of ``output``, computed off the event loop by :meth:`_agent_loop_postprocess`
        (verl decodes the padded ids without special tokens: the same text as prompt + response ids)."""
        ready = self._mm_inputs_ready().pop(id(output), None)
        return ready if ready is not None else super()._compute_multi_modal_inputs(output, input_ids)

    def _postprocess(self, inputs: list) -> DataProto:
        flat = [row for item in inputs for row in (item if isinstance(item, list) else [item])]
        for row in flat:
            for key in OPTIONAL_SAMPLE_KEYS:
                row.extra_fields.setdefault(key, None)
        return super()._postprocess(flat)


class VSearchAgentLoopManager(AgentLoopManager):
    """``AgentLoopManager`` whose workers expand episodes (``agent_loop_workers_class`` is verl's
    documented hook for recipes)."""

    def __init__(self, *args, **kwargs):
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
    roles = _col(batch, ROLE_KEY, ROLE_OUTLOOP)
    ep_ids = _col(batch, "episode_id")
    seen: dict[str, int] = {}
    for i, (role, ep) in enumerate(zip(roles, ep_ids)):
        if role in (ROLE_INLOOP, ROLE_PLACEHOLDER) and ep is not None and ep not in seen:
            seen[ep] = i
    m: dict[str, float] = {}
    if seen:
        rows = list(seen.values())
        crit = np.array([bool(_col(batch, "episode_critical_failure")[i]) for i in rows])
        ok = ~crit
        correct = np.array([bool(_col(batch, "episode_correct")[i]) for i in rows])
        m["vsearch/critical_failure_ratio"] = float(crit.mean())
        # the share of those that ended in an exception (agent_loops.FailSafeAgentLoop), not an API failure
        status = np.array([str(_col(batch, "episode_status")[i]) for i in rows])
        m["vsearch/episode_error_ratio"] = float((status == "error").mean())
        m["vsearch/accuracy_reward"] = float(correct[ok].mean()) if ok.any() else 0.0
        m["vsearch/has_answer"] = float(np.mean([bool(_col(batch, "episode_has_answer")[i]) for i in rows]))
        calls = np.array([int(_col(batch, "episode_n_calls")[i]) for i in rows])
        m["vsearch/calls_per_qa"] = float(calls.mean())
        fb = np.array([int(_col(batch, "episode_n_feedback")[i]) for i in rows])
        m["vsearch/feedback_rate"] = float(fb.sum() / calls.sum()) if calls.sum() else 0.0
    inloop = np.array([r == ROLE_INLOOP for r in roles])
    if inloop.any():
        helpful = _col(batch, "feedback_helpful")
        correct_s = _col(batch, "answer_correct")
        pseudo = [bool(helpful[i]) and bool(correct_s[i]) for i in np.flatnonzero(inloop)]
        m["vsearch/pseudo_iou_rate"] = float(np.mean(pseudo))
        m["vsearch/inloop_samples"] = float(inloop.sum())
    outloop = np.array([r == ROLE_OUTLOOP for r in roles])
    if outloop.any():
        m["vsearch/outloop_samples"] = float(outloop.sum())
        for key in ("iou", "r_iou"):
            if key in batch.non_tensor_batch:
                vals = np.array([float(v) for v in batch.non_tensor_batch[key][outloop] if v is not None])
                vals = vals[vals >= 0] if key == "iou" else vals
                m[f"vsearch/outloop_mean_{key}"] = float(vals.mean()) if len(vals) else 0.0
    return m


def finalize_batch(batch: DataProto, dp_size: int) -> tuple[DataProto, dict[str, float]]:
    """Drop placeholders and pad to a multiple of ``dp_size`` with zero-mask duplicates.

    Returns the training batch and the step's episode metrics (computed before dropping)."""
    metrics = episode_metrics(batch)
    roles = _col(batch, ROLE_KEY, ROLE_OUTLOOP)
    keep = np.flatnonzero(roles != ROLE_PLACEHOLDER)
    donors = keep if len(keep) else np.arange(len(batch))
    n = len(keep)
    target = max(dp_size, -(-n // dp_size) * dp_size)
    n_pad = target - n
    pad_idx = donors[np.arange(n_pad) % len(donors)]
    out = batch.select_idxs(np.concatenate([keep, pad_idx]).astype(np.int64))
    if n_pad:
        out.batch["response_mask"][n:] = 0
        if "uid" not in out.non_tensor_batch:
            out.non_tensor_batch["uid"] = np.array([None] * len(out), dtype=object)
        uids = out.non_tensor_batch["uid"].copy()
        roles_out = _col(out, ROLE_KEY, ROLE_OUTLOOP).copy()
        for j in range(n, target):
            uids[j], roles_out[j] = f"pad-{j}", ROLE_PADDING
        out.non_tensor_batch["uid"], out.non_tensor_batch[ROLE_KEY] = uids, roles_out
    metrics["vsearch/padding_rows"] = float(n_pad)
    metrics["vsearch/masked_rows"] = float((out.batch["response_mask"].sum(-1) == 0).sum().item())
    assert torch.is_tensor(out.batch["response_mask"])
    return out, metrics
