"""The recipe's ``RayPPOTrainer``: one PPO/GRPO step over a rollout batch of *variable* size.

Why a trainer subclass at all. verl 0.7's ``RayPPOTrainer.fit`` repeats the input batch ``n`` times
and ``union``s it row by row with the rollout output. With the recipe's agent-loop manager
(:class:`recipe.vsearch.episodes.VSearchAgentLoopManager`) an in-loop episode becomes 0..6 rows,
so the rollout has more or fewer rows than ``batch × n`` and that ``union`` cannot hold. The join
sits in the middle of ``fit`` (no hook before or after it), so :meth:`fit` is re-composed here from
verl's own pieces; only the join changes:

* the rollout rows are **self-contained** (the worker copies ``uid``, ``data_source``,
  ``reward_model``, ``extra_info`` onto every sample), so nothing is joined back;
* :func:`~recipe.vsearch.episodes.finalize_batch` reads the episode metrics, drops placeholders and
  pads to a multiple of the actor's data-parallel size with zero-mask rows;
* everything else is verl's: ``_balance_batch`` (``trainer.balance_batch``), reward extraction
  (``_compute_or_extract_reward``: the reward loop's ``rm_scores``), ``_compute_old_log_prob`` (only when
  :func:`~recipe.vsearch.on_policy.old_log_prob_needed` says something reads it: the on-policy update does not),
  ``_compute_ref_log_prob``, ``compute_advantage`` (``vsearch_hybrid_grpo``), ``apply_kl_penalty``,
  ``_update_actor``, ``_save_checkpoint`` / ``_load_checkpoint``, ``Tracking`` and the
  ``compute_{data,timing,throughout}_metrics`` helpers.

Validation (:meth:`_validate`) is episode-level and needs no expansion back to input rows: it runs
the same rollout (``validate=True``: ``val_kwargs`` sampling), drops the rows generated for the
divisibility padding, and reports the recipe's episode metrics (``accuracy_reward``,
``critical_failure_ratio``, ``has_answer``, ``calls_per_qa``, ...) overall and per data source, as
``val-core/...`` (accuracy) and ``val-aux/...``. With ``val_kwargs.n = k`` every item runs k
episodes and the numbers are means over them (mean@k).

Each rollout row of the repeated batch gets its own :data:`EPISODE_ID_KEY` (``<uid>-<j>``): the n
repeats of a QA item share the dataset uid (needed for the out-of-loop GRPO groups) but are distinct
episodes, and in-loop sample uids / episode metrics are keyed by the episode id.

Not supported by this loop (rejected up front, not silently ignored): a critic (GAE), REMAX,
``reward_model.launch_reward_fn_async``, rollout-correction bypass mode, synchronous (non agent-loop)
rollouts. verl's profiler / ESI-expiry hooks are not wired.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from verl.trainer.ppo.core_algos import AdvantageEstimator, agg_loss
from verl.trainer.ppo.metric_utils import compute_data_metrics, compute_throughout_metrics, compute_timing_metrics
from verl.trainer.ppo.ray_trainer import RayPPOTrainer, apply_kl_penalty, compute_advantage
from verl.utils.debug import marked_timer
from verl.utils.metric import reduce_metrics
from verl.utils.tracking import Tracking

from insight_o3.base.json_types import JSONObject
from verl import DataProto

from . import hybrid_advantage  # also registers vsearch_hybrid_grpo in this process
from .episodes import EpisodeFailures, episode_failures, episode_metrics, finalize_batch, withhold_pseudo_iou
from .fatal_grpo import apply_fatal
from .on_policy import EQ2_META_KEY, old_log_prob_needed
from .rollout_fields import (
    EPISODE_ID_KEY,
    EPISODE_KEYS,
    INLOOP_UID_PREFIX,
    METRIC_KEYS,
    ROLE_PADDING,
    VALIDATE_KEY,
    SampleFields,
    episode_id,
    episode_item,
)
from .settings import RunSettings, run_settings

#: uid prefix of the rows added to make the validation batch divisible by the number of agent workers
VAL_PAD_PREFIX = "vsearch-valpad-"
#: non-tensor columns the validation metrics read (and the validation dump carries)
_VAL_COLUMNS = ("uid", "data_source", *METRIC_KEYS, "iou", "r_iou")


def with_episode_ids(gen_batch: DataProto) -> DataProto:
    """Give every row of the (already repeated) generation batch a distinct episode id ``<uid>-<j>``."""
    uids = gen_batch.non_tensor_batch["uid"]
    seen: dict = defaultdict(int)
    ids = []
    for u in uids:
        ids.append(episode_id(u, seen[u]))
        seen[u] += 1
    gen_batch.non_tensor_batch[EPISODE_ID_KEY] = np.array(ids, dtype=object)
    return gen_batch


class VSearchRayPPOTrainer(RayPPOTrainer):
    """``RayPPOTrainer`` whose step accepts a rollout batch of any size (see the module doc)."""

    def _check_supported(self) -> None:
        cfg = self.config
        problems = []
        if self.use_critic:
            problems.append("a critic (use GRPO-style estimators, e.g. vsearch_hybrid_grpo)")
        if cfg.algorithm.adv_estimator == AdvantageEstimator.REMAX:
            problems.append("algorithm.adv_estimator=remax")
        if cfg.reward_model.get("launch_reward_fn_async", False):
            problems.append("reward_model.launch_reward_fn_async=True")
        corr = cfg.algorithm.get("rollout_correction", None)
        if corr and corr.get("bypass_mode", False):
            problems.append("algorithm.rollout_correction.bypass_mode=True")
        if not getattr(self, "async_rollout_mode", False):
            problems.append("synchronous rollouts (set actor_rollout_ref.rollout.mode=async)")
        if problems:
            raise ValueError("the vsearch trainer does not support: " + "; ".join(problems))

    # ------------------------------------------------------------------ rollout
    def _generate(self, batch: DataProto, n: int, meta: dict, timing_raw: dict) -> DataProto:
        """Rollout of ``batch`` repeated ``n`` times through the agent-loop manager (expanded rows)."""
        gen = self._get_gen_batch(batch).repeat(repeat_times=n, interleave=True)
        gen = with_episode_ids(gen)
        gen.non_tensor_batch[VALIDATE_KEY] = np.array([False] * len(gen), dtype=object)
        gen.meta_info.update(meta)
        out = self.async_rollout_manager.generate_sequences(gen)
        timing_raw.update(out.meta_info.pop("timing", {}))
        return out

    # ------------------------------------------------------------------ one training step
    def _train_step(self, batch_dict: dict, metrics: dict, timing_raw: dict) -> tuple[DataProto, JSONObject]:
        """Rollout, expand, balance, score, log-probs, advantages, actor update. Returns the training
        batch and ``reward_extra_infos``."""
        cfg = self.config
        rollout_cfg = cfg.actor_rollout_ref.rollout
        batch = DataProto.from_single_dict(batch_dict)
        batch.non_tensor_batch["uid"] = np.array([str(uuid.uuid4()) for _ in range(len(batch))], dtype=object)

        with marked_timer("gen", timing_raw, color="red"):
            out = self._generate(batch, rollout_cfg.n, {"global_steps": self.global_steps}, timing_raw)
        dp_size = self._get_dp_size(self.actor_rollout_wg, "actor")
        settings = run_settings(cfg)
        outcomes = episode_outcomes(out)  # every in-loop episode, also those finalize_batch drops
        failures = episode_failures(out)  # ... and why episodes failed (the placeholders are dropped below)
        withheld = withhold_pseudo_iou(out, settings.reward.rules())  # the fork's batch rule (original only)
        batch, vsearch_metrics = finalize_batch(out, dp_size, settings.protocol)
        metrics.update(vsearch_metrics)
        metrics["vsearch/pseudo_iou_withheld_rows"] = float(withheld)
        metrics.update(multimodal_footprint(batch))
        check_api_failures(vsearch_metrics, settings, self.global_steps, failures)
        batch.meta_info["temperature"] = rollout_cfg.temperature
        if cfg.trainer.balance_batch:
            self._balance_batch(batch, metrics=metrics)
        batch.meta_info["global_token_num"] = torch.sum(batch.batch["attention_mask"], dim=-1).tolist()

        with marked_timer("reward", timing_raw, color="yellow"):
            reward_tensor, reward_extra = self._compute_or_extract_reward(batch, reward_fn=self.reward_fn)

        # the update is on-policy (recipe.vsearch.on_policy): it reads no old log-probs unless something else does
        if old_log_prob_needed(cfg) is not None:
            with marked_timer("old_log_prob", timing_raw, color="blue"):
                old_log_prob, mfu = self._compute_old_log_prob(batch)
                entropys = old_log_prob.batch.pop("entropys")
                metrics["perf/mfu/actor_infer"] = mfu
                if bool((batch.batch["response_mask"].sum(-1) > 0).any()):  # Eq. 2's mean; no 0/0 on an empty step
                    entropy = agg_loss(
                        loss_mat=entropys, loss_mask=batch.batch["response_mask"], loss_agg_mode="seq-mean-token-mean"
                    )
                    metrics["actor/entropy"] = entropy.detach().item()
                batch = batch.union(old_log_prob)
        if self.use_reference_policy:
            with marked_timer("ref", timing_raw, color="olive"):
                batch = batch.union(self._compute_ref_log_prob(batch))

        with marked_timer("adv", timing_raw, color="brown"):
            batch.batch["token_level_scores"] = reward_tensor
            batch.non_tensor_batch.update({k: np.array(v) for k, v in (reward_extra or {}).items()})
            if cfg.algorithm.use_kl_in_reward:
                batch, kl_metrics = apply_kl_penalty(
                    batch, kl_ctrl=self.kl_ctrl_in_reward, kl_penalty=cfg.algorithm.kl_penalty
                )
                metrics.update(kl_metrics)
            else:
                batch.batch["token_level_rewards"] = batch.batch["token_level_scores"]
            if cfg.algorithm.adv_estimator == hybrid_advantage.ESTIMATOR_NAME:
                hybrid_advantages(batch, cfg.algorithm, outcomes)
            else:
                batch = compute_advantage(
                    batch,
                    adv_estimator=cfg.algorithm.adv_estimator,
                    gamma=cfg.algorithm.gamma,
                    lam=cfg.algorithm.lam,
                    num_repeat=rollout_cfg.n,
                    norm_adv_by_std_in_grpo=cfg.algorithm.get("norm_adv_by_std_in_grpo", True),
                    config=cfg.algorithm,
                )

            # fatal-aware GRPO (vsearch.fatal; off: nothing): clamp and mask the fatal rows after the advantages,
            # whose statistics every row entered (recipe.vsearch.fatal_grpo)
            metrics.update(apply_fatal(batch, settings.fatal.fatal_mode))

        if cfg.trainer.critic_warmup <= self.global_steps:
            with marked_timer("update_actor", timing_raw, color="red"):
                # Eq. 2's sample count over the whole batch, for every rank (recipe.vsearch.on_policy.apply_eq2)
                batch.meta_info[EQ2_META_KEY] = {
                    "variant": settings.variant,
                    "valid_rows": int((batch.batch["response_mask"].sum(-1) > 0).sum()),
                    "dp_size": dp_size,
                }
                actor_output = self._update_actor(batch)
            metrics.update(reduce_metrics(actor_output.meta_info["metrics"]))
        return batch, reward_extra

    # ------------------------------------------------------------------ the loop
    def fit(self) -> None:
        """verl's training loop (resume, validation, checkpoints, logging) around :meth:`_train_step`."""
        self._check_supported()
        cfg = self.config
        logger = Tracking(
            project_name=cfg.trainer.project_name,
            experiment_name=cfg.trainer.experiment_name,
            default_backend=cfg.trainer.logger,
            config=OmegaConf.to_container(cfg, resolve=True),
        )
        self.global_steps = 0
        self._load_checkpoint()
        if cfg.trainer.get("val_before_train", True):
            val_metrics = self._validate()
            logger.log(data=plain_metrics(val_metrics), step=self.global_steps)
            if cfg.trainer.get("val_only", False):
                return
        first_epoch = self.global_steps // len(self.train_dataloader)
        progress = tqdm(total=self.total_training_steps, initial=self.global_steps, desc="Training Progress")
        self.global_steps += 1
        for epoch in range(first_epoch, cfg.trainer.total_epochs):
            for batch_dict in self.train_dataloader:
                metrics: dict[str, Any] = {}
                timing_raw: dict[str, Any] = {}
                is_last = self.global_steps >= self.total_training_steps
                with marked_timer("step", timing_raw):
                    batch, reward_extra = self._train_step(batch_dict, metrics, timing_raw)
                    if cfg.trainer.get("rollout_data_dir", None):
                        self._log_rollout_data(batch, reward_extra, timing_raw, cfg.trainer.rollout_data_dir)
                if cfg.trainer.test_freq > 0 and (is_last or self.global_steps % cfg.trainer.test_freq == 0):
                    with marked_timer("testing", timing_raw, color="green"):
                        metrics.update(self._validate())
                if cfg.trainer.save_freq > 0 and (is_last or self.global_steps % cfg.trainer.save_freq == 0):
                    with marked_timer("save_checkpoint", timing_raw, color="green"):
                        self._save_checkpoint()
                metrics.update({"training/global_step": self.global_steps, "training/epoch": epoch})
                # verl's critic/score, critic/rewards, response_length... over the real rows only: the DP padding
                # rows are duplicates whose scores would bias them
                metrics.update(compute_data_metrics(batch=without_padding(batch), use_critic=False))
                metrics.update(compute_timing_metrics(batch=batch, timing_raw=timing_raw))
                metrics.update(
                    compute_throughout_metrics(
                        batch=batch, timing_raw=timing_raw, n_gpus=self.resource_pool_manager.get_n_gpus()
                    )
                )
                logger.log(data=plain_metrics(metrics), step=self.global_steps)
                progress.update(1)
                if is_last:
                    progress.close()
                    return
                self.global_steps += 1

    # ------------------------------------------------------------------ generations on disk
    def _dump_generations(
        self,
        inputs: list[str],
        outputs: list[str],
        gts: list[Any],
        scores: list[float],
        reward_extra_infos_dict: dict[str, list[Any]],
        dump_path: str,
    ) -> None:
        """verl's JSONL dump (``<dump_path>/<step>.jsonl``: input, output, gts, score, step, extra columns),
        written atomically and with numpy / torch values as plain JSON (verl's ``json.dumps`` crashes on the
        ``np.int64`` / ``np.bool_`` values of the reward columns)."""
        import json
        import os

        os.makedirs(dump_path, exist_ok=True)
        n = len(inputs)
        columns = {"input": inputs, "output": outputs, "gts": gts, "score": scores, "step": [self.global_steps] * n}
        columns.update({k: v for k, v in (reward_extra_infos_dict or {}).items() if len(v) == n})
        path = os.path.join(dump_path, f"{self.global_steps}.jsonl")
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            for i in range(n):
                f.write(json.dumps({k: jsonable(v[i]) for k, v in columns.items()}, ensure_ascii=False) + "\n")
        os.replace(tmp, path)
        print(f"Dumped generations to {path}")

    # ------------------------------------------------------------------ validation
    def _validate(self) -> dict[str, float]:
        """Episode-level evaluation over the val set (see the module doc); no row-wise join needed."""
        rollout_cfg = self.config.actor_rollout_ref.rollout
        n_workers = int(rollout_cfg.agent.num_workers)
        meta = {
            "eos_token_id": self.tokenizer.eos_token_id,
            "pad_token_id": self.tokenizer.pad_token_id,
            "recompute_log_prob": False,
            "do_sample": rollout_cfg.val_kwargs.do_sample,
            "validate": True,
            "global_steps": getattr(self, "global_steps", 0),
        }
        columns: dict[str, list] = defaultdict(list)
        dump_dir = self.config.trainer.get("validation_data_dir", None)
        texts: dict[str, list] = defaultdict(list)
        for test_data in self.val_dataloader:
            batch = DataProto.from_single_dict(test_data)
            n_real = len(batch)
            n_pad = (-(n_real * rollout_cfg.val_kwargs.n)) % n_workers
            if n_pad:  # agent workers take equal chunks: pad with copies whose rows are dropped afterwards
                batch = DataProto.concat([batch, batch.select_idxs(np.arange(n_pad) % n_real)])
            uids = [str(uuid.uuid4()) for _ in range(n_real)] + [f"{VAL_PAD_PREFIX}{i}" for i in range(n_pad)]
            batch.non_tensor_batch["uid"] = np.array(uids, dtype=object)
            # repeat n per item, but the padding rows once each
            reps = np.array([rollout_cfg.val_kwargs.n] * n_real + [1] * n_pad)
            out = self._generate_val(batch, reps, meta)
            keep = np.array(
                [
                    not _is_val_pad(u, f.episode.id if f.episode else None)
                    for u, f in zip(
                        out.non_tensor_batch["uid"],
                        SampleFields.from_batch(out.non_tensor_batch, len(out), METRIC_KEYS),
                    )
                ]
            )
            for key in _VAL_COLUMNS:
                columns[key].extend(_column(out, key)[keep].tolist())
            if dump_dir:
                kept = out.select_idxs(np.flatnonzero(keep))
                texts["input"] += self.tokenizer.batch_decode(kept.batch["prompts"], skip_special_tokens=True)
                texts["output"] += self.tokenizer.batch_decode(kept.batch["responses"], skip_special_tokens=True)
                rm = (
                    kept.batch["rm_scores"].sum(-1).tolist() if "rm_scores" in kept.batch.keys() else [None] * len(kept)
                )
                texts["score"] += rm
                texts["gts"] += [
                    (r or {}).get("ground_truth") if isinstance(r, dict) else None
                    for r in _column(kept, "reward_model")
                ]
        if dump_dir:  # trainer.validation_data_dir: one JSONL per validation pass, named by the step
            self._dump_generations(
                texts["input"],
                texts["output"],
                texts["gts"],
                texts["score"],
                {k: v for k, v in columns.items()},
                dump_dir,
            )
        view = DataProto(batch=None, non_tensor_batch={k: _object_array(v) for k, v in columns.items()}, meta_info={})
        return validation_metrics(view)

    def _generate_val(self, batch: DataProto, reps: np.ndarray, meta: dict) -> DataProto:
        gen = self._get_gen_batch(batch)
        gen = gen.select_idxs(np.repeat(np.arange(len(gen)), reps))
        gen = with_episode_ids(gen)
        gen.non_tensor_batch[VALIDATE_KEY] = np.array([True] * len(gen), dtype=object)  # inference prompts
        gen.meta_info.update(meta)
        out = self.async_rollout_manager.generate_sequences(gen)
        out.meta_info.pop("timing", None)
        return out


def episode_outcomes(out: DataProto) -> dict[str, tuple[str, bool]]:
    """``{episode id: (QA item uid, c)}`` of every in-loop episode of a rollout (placeholders included: the fork's
    vReasoner rows exist for every episode), for ``subagent_advantage_estimator=broadcast*``."""
    rows = SampleFields.from_batch(out.non_tensor_batch, len(out), (*METRIC_KEYS, "is_in_loop"))
    return {
        f.episode.id: (episode_item(f.episode.id), f.episode.correct)
        for f in rows
        if f.episode is not None and f.is_in_loop
    }


def hybrid_advantages(batch: DataProto, algorithm: Any, outcomes: dict[str, tuple[str, bool]]) -> None:
    """``vsearch_hybrid_grpo`` on ``batch`` (in place), as verl's ``compute_advantage`` calls it, plus what the
    fork's ``broadcast*`` subagent estimators read: each row's episode, the episodes' outcomes, the tool gates."""
    nt = batch.non_tensor_batch
    gate = nt.get("tool_gate")
    adv, ret = hybrid_advantage.compute_vsearch_hybrid_advantage(
        token_level_rewards=batch.batch["token_level_rewards"],
        response_mask=batch.batch["response_mask"],
        index=nt["uid"],
        config=algorithm,
        episode_ids=nt.get(EPISODE_KEYS[0]),
        episode_correct=outcomes,
        tool_gate=None if gate is None else np.array([float(g) for g in gate]),
    )
    batch.batch["advantages"], batch.batch["returns"] = adv, ret


class ApiFailureAbort(RuntimeError):
    """Too many episodes of a training step failed: cut by vReasoner / judge API failures, or ended by an exception
    on the policy's side (the rollout server or engine, an image file, the agent loop)."""


#: what to check when episodes raise on the policy's side (a dead vLLM engine fails every episode of the step)
ROLLOUT_SIDE_HINT = (
    "the policy's side (verl's vLLM rollout server / engine, the image files, the agent loop), not the vReasoner "
    "API: read the Ray logs of vLLMHttpServer / EngineCore (`ray logs`, <ray tmp>/session_latest/logs) for the "
    "cause (CUDA out of memory at wake-up, EngineDeadError, a dead server actor) and fix it there"
)
#: what to check when in-loop episodes lose the vReasoner or the judge
API_SIDE_HINT = "check OPENAI_API_KEY / OPENAI_BASE_URL (and JUDGE_*) on every Ray node and the API's health"


def failure_message(failures: EpisodeFailures | None) -> str:
    """Which side failed, with counts and the first exception type: the abort must send the researcher to the
    subsystem that broke (a dead vLLM engine makes every episode fail too, and is no API problem)."""
    if failures is None or failures.raised == 0:
        return f"lost the vReasoner / judge API: {API_SIDE_HINT}"
    parts = [
        f"{failures.raised} of {failures.episodes} ended in an exception (first: {failures.first_error or 'unknown'}) "
        f"on {ROLLOUT_SIDE_HINT}"
    ]
    if failures.api_lost:
        parts.append(f"{failures.api_lost} lost the vReasoner / judge API: {API_SIDE_HINT}")
    return "; ".join(parts)


def check_api_failures(
    step_metrics: JSONObject, settings: RunSettings, step: int, failures: EpisodeFailures | None = None
) -> None:
    """Abort (before the update) when the step's ``vsearch/critical_failure_ratio`` exceeds
    ``vsearch.max_api_failure_ratio`` (the fork's ``max_critical_failure_ratio`` check right after generation), or,
    under ``original``, when ``vsearch/judge_lost_ratio`` exceeds the protocol's ``max_judge_failure_ratio`` (the
    fork's reward worker raises when fewer than 99 % of the rows were scored after every round). Under ``paper``
    failed episodes are masked out of the loss, so without this check a dead API key or endpoint would quietly
    turn the run into out-of-loop-only training; under ``original`` they are trained on with c = 0.
    ``failures`` (:func:`~recipe.vsearch.episodes.episode_failures` of the rollout) names the failing side in the
    message: episodes that raised (the rollout) and episodes that lost an API call."""
    ratio = step_metrics.get("vsearch/critical_failure_ratio")
    max_ratio = settings.max_api_failure_ratio
    if ratio is not None and ratio > max_ratio:
        scope = "in-loop episodes" if failures is None or failures.raised == 0 else "episodes"
        raise ApiFailureAbort(
            f"[vsearch] step {step}: {ratio:.0%} of the {scope} failed "
            f"(vsearch.max_api_failure_ratio={max_ratio}, vsearch.variant={settings.variant}); stopping before the "
            f"update. They {failure_message(failures)}; then resume from the last checkpoint "
            "(trainer.resume_mode=auto)."
        )
    lost, max_lost = step_metrics.get("vsearch/judge_lost_ratio"), settings.protocol.max_judge_failure_ratio
    if lost is not None and max_lost is not None and lost > max_lost:
        raise ApiFailureAbort(
            f"[vsearch] step {step}: the judge could not check {lost:.1%} of the scored rows after "
            f"{settings.protocol.judge_rounds} rounds (more than {max_lost:.0%}, vsearch.variant={settings.variant}); "
            "stopping before the update. Check JUDGE_* / OPENAI_* and the judge model's health, then resume."
        )


def multimodal_footprint(batch: DataProto) -> dict[str, float]:
    """Host memory the step's image inputs take in the driver: the bytes of every distinct tensor in the rows'
    ``multi_modal_inputs``, in MB, and the largest row's share. Training rows carry image references and their
    grids (``recipe.vsearch.image_inputs``), so this is the grids' bytes; rows with verl's ``pixel_values`` (1176
    fp32 values per patch, 4 patches per image token) count those. Rows that share one dict or tensor (the DP
    padding duplicates) count once.
    Logged each step as ``vsearch/mm_inputs_mb`` and ``vsearch/mm_inputs_row_max_mb``."""
    seen: set[int] = set()
    total, row_max = 0, 0
    for inputs in _column(batch, "multi_modal_inputs"):
        if not isinstance(inputs, dict):
            continue
        row = 0
        for value in inputs.values():
            if torch.is_tensor(value):
                nbytes = value.numel() * value.element_size()
                row += nbytes
                if id(value) not in seen:
                    seen.add(id(value))
                    total += nbytes
        row_max = max(row_max, row)
    return {"vsearch/mm_inputs_mb": total / 2**20, "vsearch/mm_inputs_row_max_mb": row_max / 2**20}


def without_padding(batch: DataProto) -> DataProto:
    """``batch`` without the zero-mask rows :func:`~recipe.vsearch.episodes.finalize_batch` added for DP."""
    rows = SampleFields.from_batch(batch.non_tensor_batch, len(batch), METRIC_KEYS)
    keep = np.flatnonzero(np.array([f.role != ROLE_PADDING for f in rows], dtype=bool))
    return batch if len(keep) == len(batch) else batch.select_idxs(keep)


def jsonable(value: Any) -> Any:
    """A JSON-serialisable version of one dumped value (numpy scalars/arrays, tensors, nested containers)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if torch.is_tensor(value):
        return jsonable(value.detach().cpu().numpy())
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, float) and value != value:
        return None
    return value


def plain_metrics(metrics: dict) -> JSONObject:
    """Metric values as Python numbers. verl's helpers return some as 0-d tensors (``_balance_batch``'s
    ``global_seqlen/*``) or numpy scalars (``num_turns/*``); the console logger silently skips
    those and the ``file`` logger (``json.dumps``) crashes on them."""
    out = {}
    for key, value in metrics.items():
        if torch.is_tensor(value) and value.numel() == 1:
            value = value.item()
        elif isinstance(value, np.generic):
            value = value.item()
        out[key] = value
    return out


def _object_array(values: list) -> np.ndarray:
    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    return arr


def _column(batch: DataProto, key: str) -> np.ndarray:
    if key in batch.non_tensor_batch:
        return np.asarray(batch.non_tensor_batch[key], dtype=object)
    return _object_array([None] * len(batch))


def _is_val_pad(uid: Any, episode_id: Any) -> bool:
    return any(
        isinstance(v, str) and (v.startswith(VAL_PAD_PREFIX) or v.startswith(INLOOP_UID_PREFIX + VAL_PAD_PREFIX))
        for v in (uid, episode_id)
    )


def validation_metrics(view: DataProto) -> dict[str, float]:
    """``episode_metrics`` over the whole val set and per data source, named like verl's val metrics:
    ``val-core/vsearch/accuracy_reward`` (+ ``val-core/<data_source>/vsearch/accuracy_reward``) and
    ``val-aux/...`` for the rest."""
    out: dict[str, float] = {}

    def add(prefix_source: str, sub: DataProto) -> None:
        for key, value in episode_metrics(sub).items():
            name = key.split("/", 1)[1]
            section = "val-core" if name == "accuracy_reward" else "val-aux"
            out[f"{section}/{prefix_source}vsearch/{name}"] = value

    add("", view)
    sources = _column(view, "data_source")
    for source in sorted({str(s) for s in sources if s is not None}):
        idx = np.flatnonzero(np.array([str(s) == source for s in sources]))
        add(
            f"{source}/",
            DataProto(batch=None, non_tensor_batch={k: v[idx] for k, v in view.non_tensor_batch.items()}, meta_info={}),
        )
    return out
