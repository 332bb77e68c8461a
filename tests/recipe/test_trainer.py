"""One real training step (and a validation pass) of the recipe's ``VSearchRayPPOTrainer`` on CPU.

The trainer is built by verl's own ``RayPPOTrainer.__init__`` (dataloaders from a tiny in-memory
dataset, config composed from the recipe YAML) and runs its own ``fit``: verl's ``_balance_batch``,
``_compute_or_extract_reward``, ``_compute_old_log_prob``, ``_compute_ref_log_prob``,
``compute_advantage`` (``vsearch_hybrid_grpo``), ``_update_actor`` and ``Tracking``. Only what needs
Ray/GPUs is replaced: the worker group (log-probs; ``update_actor`` splits the batch over DP ranks the
way verl's dispatch does and takes the gradient of verl's vanilla policy loss) and the agent-loop
manager, which returns rows in the format of ``VSearchAgentLoopWorker`` (expanded in-loop episodes:
3, 0, 1 calls and one API failure; out-of-loop groups of n), rewards by the recipe's ``compute_score``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support.stacks import REPO, require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from hydra import compose, initialize_config_dir  # noqa: E402
from omegaconf import OmegaConf, open_dict  # noqa: E402
from torch.utils.data import SequentialSampler  # noqa: E402
from verl.trainer.ppo.core_algos import get_policy_loss_fn  # noqa: E402
from verl.trainer.ppo.utils import Role  # noqa: E402
from verl.utils.config import omega_conf_to_dataclass  # noqa: E402
from verl.utils.dataset.rl_dataset import collate_fn  # noqa: E402
from verl.utils.tracking import Tracking  # noqa: E402

from recipe.vsearch.episodes import (  # noqa: E402
    EPISODE_ID_KEY,
    ROLE_INLOOP,
    ROLE_KEY,
    ROLE_OUTLOOP,
    ROLE_PADDING,
    ROLE_PLACEHOLDER,
    episode_fields,
)
from recipe.vsearch.hybrid_advantage import inloop_uid  # noqa: E402
from recipe.vsearch.main import install_trainer  # noqa: E402
from recipe.vsearch.reward_fn import compute_score  # noqa: E402
from recipe.vsearch.trainer import VSearchRayPPOTrainer  # noqa: E402
from verl import DataProto  # noqa: E402

CONFIG_DIR = REPO / "verl" / "recipe" / "vsearch" / "config"
P, R = 4, 6  # prompt / response length of the fake rollout rows
DP = 3  # actor data-parallel size of the fake worker group
N = 2  # rollouts per prompt
GT = [10.0, 10.0, 50.0, 50.0]

# scripted episodes, per dataset row, per repeat j: ("out", pred_box), ("in", feedback list, correct, failed) or
# ("error", "<ExceptionType>: <message>") (an episode that raised: agent_loops.FailSafeAgentLoop's placeholder)
TRAIN_ROWS = [
    {"agent_name": "vsearcher", "script": [("out", GT), ("out", [60.0, 60.0, 90.0, 90.0])]},
    {
        "agent_name": "vreasoner",
        "script": [("in", ["helpful", "unhelpful", "helpful"], True, False), ("in", [], False, False)],
    },
    {
        "agent_name": "vreasoner",
        "script": [("in", ["helpful"], False, False), ("in", ["helpful", "helpful"], False, True)],
    },
]
VAL_ROWS = [
    {"agent_name": "vreasoner", "script": [("in", ["helpful"], True, False)]},
    {"agent_name": "vreasoner", "script": [("in", [], False, False)]},
    {"agent_name": "vsearcher", "script": [("out", GT)]},
]


class RowsDataset(torch.utils.data.Dataset):
    def __init__(self, rows, source):
        self.rows, self.source = rows, source

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        r = self.rows[i]
        return {
            "dummy_tensor": torch.tensor([0], dtype=torch.uint8),
            "raw_prompt": [{"role": "user", "content": "q"}],
            "agent_name": r["agent_name"],
            "data_source": f"{self.source}_{r['agent_name']}",
            "reward_model": {"ground_truth": "a", "style": "rule"},
            "extra_info": {"row": i, "split": self.source, "bboxes": [GT]},
        }


def _sample(fields: dict, n_resp: int, masked: bool) -> dict:
    # Eq. (1) literally: these fake rows carry no crop boxes (the 'original' rules are tested in test_rewards)
    score = compute_score(fields.get("data_source"), "", "", fields, variant="paper")
    return dict(fields, _score=score, _n_resp=n_resp, _masked=masked)


class FakeAgentLoopManager:
    """Stands in for VSearchAgentLoopManager: the rows VSearchAgentLoopWorker would return."""

    def __init__(self, config, scripts: dict):
        self.config, self.scripts, self.calls = config, scripts, []

    def generate_sequences(self, gen: DataProto) -> DataProto:
        assert len(gen) % self.config.actor_rollout_ref.rollout.agent.num_workers == 0, "chunks must be equal"
        self.calls.append(gen)
        nt = gen.non_tensor_batch
        samples, repeat_of = [], {}
        for i in range(len(gen)):
            row = {k: nt[k][i] for k in ("uid", "data_source", "reward_model", "extra_info", "agent_name")}
            split, idx = row["extra_info"]["split"], row["extra_info"]["row"]
            j = repeat_of[(row["uid"])] = repeat_of.get(row["uid"], -1) + 1
            script = self.scripts[split][idx]["script"][j]
            ep_id = nt[EPISODE_ID_KEY][i]
            base = {"n_tool": 1, "format_ok": True, "format_error": None}
            if script[0] == "error":
                ep = episode_fields(
                    ep_id,
                    n_calls=0,
                    has_answer=False,
                    correct=False,
                    critical_failure=True,
                    status="error",
                    n_feedback=0,
                )
                fields = dict(base, n_tool=0, format_ok=False, format_error=f"episode failed: {script[1]}")
                samples.append(
                    _sample(
                        dict(
                            row,
                            **fields,
                            **ep,
                            uid=inloop_uid(ep_id, -1),
                            pred_box=None,
                            is_in_loop=row["agent_name"] == "vreasoner",
                            feedback_helpful=None,
                            answer_correct=False,
                            call_index=-1,
                            **{ROLE_KEY: ROLE_PLACEHOLDER},
                        ),
                        n_resp=1,
                        masked=True,
                    )
                )
                continue
            if script[0] == "out":
                samples.append(
                    _sample(
                        dict(
                            row,
                            **base,
                            pred_box=script[1],
                            bboxes=[GT],
                            is_in_loop=False,
                            feedback_helpful=None,
                            answer_correct=None,
                            **{ROLE_KEY: ROLE_OUTLOOP},
                        ),
                        n_resp=3,
                        masked=False,
                    )
                )
                continue
            _, feedback, correct, failed = script
            ep = episode_fields(
                ep_id,
                n_calls=len(feedback),
                has_answer=not failed,
                correct=correct,
                critical_failure=failed,
                status="failed" if failed else "answered",
                n_feedback=len(feedback),
            )
            for k, fb in enumerate(feedback):
                samples.append(
                    _sample(
                        dict(
                            row,
                            **base,
                            **ep,
                            uid=inloop_uid(ep_id, k),
                            pred_box=None,
                            is_in_loop=True,
                            feedback_helpful=fb == "helpful",
                            answer_correct=correct,
                            call_index=k,
                            **{ROLE_KEY: ROLE_INLOOP},
                        ),
                        n_resp=2 + k,
                        masked=failed,
                    )
                )
            if not feedback:
                samples.append(
                    _sample(
                        dict(
                            row,
                            **dict(base, n_tool=0),
                            **ep,
                            uid=inloop_uid(ep_id, -1),
                            pred_box=None,
                            is_in_loop=True,
                            feedback_helpful=None,
                            answer_correct=correct,
                            call_index=-1,
                            **{ROLE_KEY: ROLE_PLACEHOLDER},
                        ),
                        n_resp=1,
                        masked=True,
                    )
                )
        b = len(samples)
        resp_len = torch.tensor([s["_n_resp"] for s in samples])
        attn = torch.cat(
            [torch.ones(b, P, dtype=torch.long), (torch.arange(R)[None] < resp_len[:, None]).long()], dim=1
        )
        response_mask = attn[:, P:].clone()
        response_mask[torch.tensor([s["_masked"] for s in samples])] = 0
        rm = torch.zeros(b, R)
        rm[torch.arange(b), resp_len - 1] = torch.tensor([s["_score"]["score"] for s in samples], dtype=torch.float)
        ids = torch.randint(1, 100, (b, P + R)) * attn
        tensors = {
            "prompts": ids[:, :P],
            "responses": ids[:, P:],
            "input_ids": ids,
            "attention_mask": attn,
            "position_ids": torch.cumsum(attn, -1) - 1,
            "response_mask": response_mask,
            "rm_scores": rm,
        }
        extra_keys = ["iou", "r_iou", "in_loop"]
        non_tensor = {
            k: np.array([s.get(k) for s in samples], dtype=object)
            for k in {k for s in samples for k in s if not k.startswith("_")}
        }
        for k in extra_keys:
            non_tensor[k] = np.array([s["_score"][k] for s in samples])
        non_tensor["__num_turns__"] = np.array([2] * b, dtype=np.int32)
        return DataProto.from_dict(
            tensors=tensors,
            non_tensors=non_tensor,
            meta_info={"reward_extra_keys": extra_keys, "timing": {"agent_loop/x": 0.0}},
        )


class FakeWorkerGroup:
    """The actor/ref worker group: verl's DP dispatch (equal chunks) + verl's policy loss."""

    def __init__(self, actor_cfg):
        self.world_size, self._dispatch_info, self.actor_cfg = DP, {"actor": list(range(DP))}, actor_cfg
        self.updates = []
        self.old_log_prob_passes = 0

    def _query_dispatch_info(self, role):
        return list(range(DP))

    def compute_log_prob(self, data: DataProto) -> DataProto:
        self.old_log_prob_passes += 1
        data.chunk(DP)
        return DataProto.from_dict(
            tensors={"old_log_probs": -torch.ones(len(data), R), "entropys": torch.ones(len(data), R)}
        )

    def compute_ref_log_prob(self, data: DataProto) -> DataProto:
        data.chunk(DP)
        return DataProto.from_dict(tensors={"ref_log_prob": -torch.ones(len(data), R)})

    def update_actor(self, data: DataProto) -> DataProto:
        loss_fn = get_policy_loss_fn("vanilla")
        grads, losses = [], []
        for shard in data.chunk(DP):
            theta = torch.zeros(len(shard), R, requires_grad=True)
            # verl's on-policy update: the old log-probs are its own forward's, detached (-1 here, as compute_log_prob)
            current = -torch.ones(len(shard), R)
            log_prob = current + theta
            loss, _ = loss_fn(
                old_log_prob=current,
                log_prob=log_prob,
                advantages=shard.batch["advantages"],
                response_mask=shard.batch["response_mask"],
                loss_agg_mode=self.actor_cfg.loss_agg_mode,
                config=self.actor_cfg,
            )
            loss.backward()
            grads.append(theta.grad)
            losses.append(loss.item())
        self.updates.append((data, torch.cat(grads)))
        return DataProto(meta_info={"metrics": {"actor/pg_loss": losses}})


def _config(tmp_path, variant: str = "paper"):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base=None):
        cfg = compose(
            config_name="qwen_2_5_vl_7b_async",
            overrides=[
                "actor_rollout_ref.model.path=tiny",
                f"vsearch.variant={variant}",
                # the trainer reads its settings through RunSettings, which needs a complete run config
                f"vsearch.agent_config_path={CONFIG_DIR / 'agent_gpt-5-mini.yaml'}",
                f"data.train_batch_size={len(TRAIN_ROWS)}",
                f"actor_rollout_ref.rollout.n={N}",
                "actor_rollout_ref.rollout.agent.num_workers=2",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={len(TRAIN_ROWS)}",
                "trainer.logger=[console]",
                "trainer.save_freq=-1",
                "trainer.test_freq=1",
                "trainer.total_training_steps=1",
                "trainer.resume_mode=disable",
                "trainer.val_before_train=False",
                "trainer.balance_batch=True",
                f"trainer.default_local_dir={tmp_path}/ckpt",
                f"data.max_response_length={R}",
            ],
        )
    OmegaConf.resolve(cfg)
    return cfg


@pytest.fixture()
def trainer(tmp_path, monkeypatch):
    cfg = _config(tmp_path)
    assert cfg.algorithm.adv_estimator == "vsearch_hybrid_grpo"
    manager = cfg.actor_rollout_ref.rollout.agent.agent_loop_manager_class
    assert manager == "recipe.vsearch.episodes.VSearchAgentLoopManager"
    train_ds, val_ds = RowsDataset(TRAIN_ROWS, "train"), RowsDataset(VAL_ROWS, "val")
    t = VSearchRayPPOTrainer(
        config=cfg,
        tokenizer=SimpleNamespace(eos_token_id=2, pad_token_id=0),
        role_worker_mapping={Role.ActorRolloutRef: object},
        resource_pool_manager=SimpleNamespace(get_n_gpus=lambda: DP),
        reward_fn=None,
        val_reward_fn=None,
        train_dataset=train_ds,
        val_dataset=val_ds,
        collate_fn=collate_fn,
        train_sampler=SequentialSampler(train_ds),
    )
    actor_cfg = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    t.actor_rollout_wg = t.ref_policy_wg = FakeWorkerGroup(actor_cfg)
    t.async_rollout_mode = True
    t.async_rollout_manager = FakeAgentLoopManager(cfg, {"train": TRAIN_ROWS, "val": VAL_ROWS})
    logged = []
    real_log = Tracking.log
    monkeypatch.setattr(
        Tracking,
        "log",
        lambda self, data, step, **kw: (logged.append((step, dict(data))), real_log(self, data, step, **kw)),
    )
    t.logged = logged
    return t


def test_one_training_step_with_expanded_episodes(trainer):
    trainer.fit()
    wg = trainer.actor_rollout_wg
    assert len(wg.updates) == 1, "exactly one actor update"
    batch, grad = wg.updates[0]
    nt = batch.non_tensor_batch
    # 2 out-of-loop + 3 + 1 + 2 (failed) in-loop samples; the placeholder is dropped; 1 zero-mask pad row -> 9
    assert len(batch) % DP == 0 and len(batch) == 9
    roles = list(nt[ROLE_KEY])
    assert roles.count(ROLE_OUTLOOP) == 2 and roles.count(ROLE_INLOOP) == 6 and roles.count(ROLE_PADDING) == 1
    assert ROLE_PLACEHOLDER not in roles
    # the n repeats of one QA item are distinct episodes (distinct in-loop uids)
    inloop_uids = [u for u, r in zip(nt["uid"], roles) if r == ROLE_INLOOP]
    assert len(set(inloop_uids)) == 6 and all(u.startswith("inloop-") for u in inloop_uids)

    mask, adv = batch.batch["response_mask"], batch.batch["advantages"]
    score = batch.batch["token_level_rewards"].sum(-1)
    valid = mask.sum(-1) > 0
    masked_rows = np.flatnonzero(~valid.numpy())
    assert len(masked_rows) == 3  # 2 samples of the API-failed episode + the padding row
    assert (adv[~valid] == 0).all() and (adv[mask == 0] == 0).all()
    # out-of-loop: GRPO within the uid group (perfect box 1.0 vs. format-only 0.2)
    out = np.flatnonzero(np.array([r == ROLE_OUTLOOP for r in roles]))
    assert sorted(score[out].tolist()) == pytest.approx([0.2, 1.0])
    s = score[out]
    exp = (s - s.mean()) / (s.std() + 1e-6)
    for row, e in zip(out, exp):
        assert adv[row][mask[row] > 0] == pytest.approx(torch.full((int(mask[row].sum()),), float(e)), abs=1e-5)
    # in-loop: one global mean/std over the valid in-loop samples (r̂ = 1[s=c=1]: 1.0, 0.2, 1.0 | 0.2)
    inl = np.flatnonzero(np.array([r == ROLE_INLOOP for r in roles]) & valid.numpy())
    assert sorted(score[inl].tolist()) == pytest.approx([0.2, 0.2, 1.0, 1.0])
    s = score[inl]
    exp = (s - s.mean()) / (s.std() + 1e-6)
    for row, e in zip(inl, exp):
        assert adv[row][mask[row] > 0] == pytest.approx(torch.full((int(mask[row].sum()),), float(e)), abs=1e-5)
    # masked samples (API failure, padding) and masked tokens get exactly zero gradient; the others do not
    assert (grad[~valid] == 0).all() and (grad[mask == 0] == 0).all()
    assert all(grad[row].abs().sum() > 0 for row in np.flatnonzero(valid.numpy()))

    step, metrics = trainer.logged[-1]
    assert step == 1
    assert metrics["vsearch/accuracy_reward"] == pytest.approx(1 / 3)  # 1 correct of 3 episodes not cut
    assert metrics["vsearch/critical_failure_ratio"] == pytest.approx(1 / 4)
    assert metrics["vsearch/calls_per_qa"] == pytest.approx(6 / 4)
    assert metrics["vsearch/has_answer"] == pytest.approx(3 / 4)
    assert metrics["vsearch/outloop_mean_iou"] == pytest.approx(0.5)  # IoU 1 and 0
    assert metrics["vsearch/padding_rows"] == 1 and metrics["vsearch/masked_rows"] == 3
    # the update is on-policy: no old-log-prob pass, hence no entropy from it (verl's update logs it with
    # actor.calculate_entropy=True)
    assert trainer.actor_rollout_wg.old_log_prob_passes == 0 and "old_log_probs" not in batch.batch.keys()
    assert "actor/entropy" not in metrics and "timing_s/old_log_prob" not in metrics
    for key in (
        "actor/pg_loss",
        "timing_s/step",
        "timing_s/gen",
        "response_length/mean",
        "critic/advantages/mean",
        "global_seqlen/mean",
        "training/global_step",
    ):
        assert key in metrics, key
    # validation ran at the last step (test_freq=1) and is in the same metrics
    assert metrics["val-core/vsearch/accuracy_reward"] == pytest.approx(0.5)


def test_old_log_prob_pass_runs_when_the_kl_penalty_in_the_reward_reads_it(trainer):
    """``algorithm.use_kl_in_reward``: ``apply_kl_penalty`` reads the old log-probs, so the pass runs (and logs the
    entropy of its forward), and the batch the update gets carries them."""
    with open_dict(trainer.config):
        trainer.config.algorithm.use_kl_in_reward = True
    trainer.kl_ctrl_in_reward = SimpleNamespace(value=0.001, update=lambda current_kl, n_steps: None)
    trainer.fit()
    wg = trainer.actor_rollout_wg
    assert wg.old_log_prob_passes == 1
    batch, _ = wg.updates[0]
    assert torch.equal(batch.batch["old_log_probs"], -torch.ones(len(batch), R))
    _, metrics = trainer.logged[-1]
    assert metrics["actor/entropy"] == pytest.approx(1.0) and "timing_s/old_log_prob" in metrics


def test_validation_is_episode_level_and_drops_padding(trainer):
    metrics = trainer._validate()
    gen = trainer.async_rollout_manager.calls[-1]
    assert gen.meta_info["validate"] is True
    assert len(gen) == 4  # 3 items + 1 row to make 2 equal worker chunks
    # the padding copy of the first (correct) item would make the accuracy 2/3
    assert metrics["val-core/vsearch/accuracy_reward"] == pytest.approx(0.5)
    assert metrics["val-core/val_vreasoner/vsearch/accuracy_reward"] == pytest.approx(0.5)
    assert metrics["val-aux/vsearch/calls_per_qa"] == pytest.approx(0.5)
    assert metrics["val-aux/vsearch/critical_failure_ratio"] == 0.0
    assert metrics["val-aux/vsearch/outloop_mean_iou"] == pytest.approx(1.0)


def test_task_runner_builds_the_recipe_trainer(monkeypatch):
    import verl.trainer.main_ppo as main_ppo

    monkeypatch.setattr(main_ppo, "RayPPOTrainer", main_ppo.RayPPOTrainer)
    assert install_trainer() is VSearchRayPPOTrainer and main_ppo.RayPPOTrainer is VSearchRayPPOTrainer


def test_unsupported_settings_are_rejected(trainer):
    trainer.use_critic = True
    with pytest.raises(ValueError, match="critic"):
        trainer.fit()


def test_api_failures_above_the_limit_abort_before_the_update(trainer):
    """The step has 1 API-failed in-loop episode of 4 (25 %): above vsearch.max_api_failure_ratio=0.2 the run
    stops with a message naming the setting, before anything is trained."""
    from recipe.vsearch.trainer import ApiFailureAbort

    trainer.config.vsearch.max_api_failure_ratio = 0.2
    with pytest.raises(
        ApiFailureAbort, match=r"step 1: 25% of the in-loop episodes failed .*max_api_failure_ratio=0.2"
    ):
        trainer.fit()
    assert trainer.actor_rollout_wg.updates == []
    trainer.config.vsearch.max_api_failure_ratio = 0.25  # at the limit: trains
    trainer.fit()
    assert len(trainer.actor_rollout_wg.updates) == 1


def test_a_dead_rollout_engine_is_not_reported_as_an_api_failure(trainer):
    """Every episode raised on the policy's side (a dead vLLM engine: each ``generate`` fails, each episode becomes
    a failed placeholder): the abort names the rollout side, the first exception type and where to look, and does
    not send the researcher to the vReasoner's API key (before: "failed on the vReasoner API ... Check
    OPENAI_API_KEY"). One API-lost episode among them is still named as such."""
    from recipe.vsearch.trainer import ApiFailureAbort

    dead = "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the root cause."
    trainer.async_rollout_manager.scripts["train"] = [
        {"agent_name": "vsearcher", "script": [("error", dead), ("error", "ActorDiedError: the actor died")]},
        {"agent_name": "vreasoner", "script": [("error", dead), ("error", dead)]},
        {"agent_name": "vreasoner", "script": [("error", dead), ("error", dead)]},
    ]
    with pytest.raises(ApiFailureAbort) as e:
        trainer.fit()
    msg = str(e.value)
    assert "100% of the episodes failed" in msg and "6 of 6 ended in an exception (first: EngineDeadError:" in msg
    assert "vLLM rollout server / engine" in msg and "vLLMHttpServer / EngineCore" in msg
    assert "OPENAI_API_KEY" not in msg and "vReasoner API" not in msg.split("not the vReasoner API")[0]
    assert trainer.actor_rollout_wg.updates == []

    trainer.async_rollout_manager.scripts["train"][2]["script"][1] = ("in", ["helpful"], False, True)  # API lost
    with pytest.raises(ApiFailureAbort, match=r"5 of 6 ended in an exception .*; 1 lost the vReasoner / judge API"):
        trainer.fit()


def test_generations_dumps_and_scores_without_padding(trainer, tmp_path):
    """trainer.rollout_data_dir and trainer.validation_data_dir are written (JSONL, numpy values as JSON);
    verl's critic/score/* are over the real rows, not the DP padding duplicates."""
    import json

    import numpy as np

    trainer.tokenizer = SimpleNamespace(
        eos_token_id=2, pad_token_id=0, batch_decode=lambda ids, skip_special_tokens=True: [f"t{len(x)}" for x in ids]
    )
    trainer.config.trainer.rollout_data_dir = str(tmp_path / "rollouts")
    trainer.config.trainer.validation_data_dir = str(tmp_path / "val_generations")
    trainer.fit()
    rows = [json.loads(line) for line in (tmp_path / "rollouts" / "1.jsonl").read_text().splitlines()]
    batch, _ = trainer.actor_rollout_wg.updates[0]
    assert len(rows) == len(batch) and all(r["step"] == 1 for r in rows)
    val = [json.loads(line) for line in (tmp_path / "val_generations" / "1.jsonl").read_text().splitlines()]
    assert val and {"input", "output", "score", "uid", "episode_correct"} <= set(val[0])
    # np.int64 / np.bool_ columns (verl's own json.dumps raises on them)
    trainer._dump_generations(
        ["a", "b"],
        ["x", "y"],
        [None, "g"],
        [1.0, 0.0],
        {
            "n_tool": np.array([1, 2]),
            "ok": np.array([True, False]),
            "box": np.array([np.array([1.0, 2.0]), None], dtype=object),
        },
        str(tmp_path / "d"),
    )
    d = [json.loads(line) for line in (tmp_path / "d" / "1.jsonl").read_text().splitlines()]
    assert d[0]["n_tool"] == 1 and d[1]["ok"] is False and d[0]["box"] == [1.0, 2.0]
    assert not list((tmp_path / "d").glob("*.tmp"))
    # critic/score/*: over the non-padding rows
    step = dict(next(m for s, m in trainer.logged if "critic/score/mean" in m))
    real = np.array([r != "padding" for r in batch.non_tensor_batch["vsearch_role"]])
    scores = batch.batch["token_level_scores"].sum(-1).numpy()
    assert (~real).sum() == 1
    assert step["critic/score/mean"] == pytest.approx(float(scores[real].mean()))
    assert step["critic/score/max"] == pytest.approx(float(scores[real].max()))


def test_multimodal_footprint_counts_each_tensor_once():
    from recipe.vsearch.trainer import multimodal_footprint

    pv = torch.zeros(64, 1176)  # 16 image tokens, fp32
    grid = torch.tensor([[1, 8, 8]])
    row = {"pixel_values": pv, "image_grid_thw": grid}
    other = {"pixel_values": torch.zeros(16, 1176), "image_grid_thw": torch.tensor([[1, 4, 4]])}
    cols = np.empty(4, dtype=object)
    cols[:] = [row, other, row, None]  # row 2: a DP padding duplicate of row 0
    batch = DataProto.from_dict(tensors={"x": torch.zeros(4, 1)}, non_tensors={"multi_modal_inputs": cols})
    m = multimodal_footprint(batch)
    want = (pv.nbytes + grid.nbytes + other["pixel_values"].nbytes + other["image_grid_thw"].nbytes) / 2**20
    assert m["vsearch/mm_inputs_mb"] == pytest.approx(want)
    assert m["vsearch/mm_inputs_row_max_mb"] == pytest.approx((pv.nbytes + grid.nbytes) / 2**20)
