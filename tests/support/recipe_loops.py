"""The recipe's agent loops driven on CPU without a rollout server: a scripted stand-in for verl's server manager
(token ids from the tiny Qwen2.5-VL tokenizer), the parts of a composed config the loops read, rows of each kind, verl's
worker post-processing, and an actor config and a GRPO batch for the update tests. Import it after
:func:`tests.support.stacks.require_recipe` (it imports verl and the recipe)."""

from __future__ import annotations

import asyncio
import os

import numpy as np
import torch
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorkerBase, DictConfigWrap
from verl.trainer.ppo.ray_trainer import compute_advantage
from verl.utils.config import omega_conf_to_dataclass
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

import verl
from recipe.vsearch import agent_loops
from recipe.vsearch.agent_loops import VReasonerAgentLoop, VSearcherAgentLoop
from recipe.vsearch.episodes import VALIDATE_KEY, VSearchAgentLoopWorker
from recipe.vsearch.hybrid_advantage import ESTIMATOR_NAME
from tests.support.openai_server import chat, error, request_text
from tests.support.stacks import REPO
from verl import DataProto

MAX_PIXELS = 160 * 28 * 28  # small vSearcher budget: few image tokens on CPU (tests/support/agent_tiny.yaml)
RESPONSE_LENGTH = 2048
AGENT_YAML = REPO / "tests" / "support" / "agent_tiny.yaml"
REWARD = {
    "variant": "original",
    "format_weight": 0.2,
    "iou_weight": 0.8,
    "alpha": 0.25,
    "max_consecutive_iou": 0.6,
    "min_gt_coverage": 0.95,
}
TOOL = '<think>look</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [%d, %d, %d, %d]}}</tool_call>'
ANSWER = "<think>found it</think> <answer>[%d, %d, %d, %d]</answer>"
#: the vReasoner and judge models of tests/support/agent_tiny.yaml and vsearch.judge_model
REASONER = "reasoner-m"
JUDGE = "judge-m"


class ScriptedServerManager:
    """Same ``generate`` signature as verl's AsyncLLMServerManager; replies chosen by ``script``
    from (number of images so far, decoded prompt), tokenised with the policy's tokenizer."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.calls: list[dict] = []
        self.replies: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
        text = self.script(len(image_data or []), self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [
            self.tokenizer.convert_tokens_to_ids("<|im_end|>")
        ]
        self.calls.append(
            {
                "request_id": request_id,
                "n_prompt": len(prompt_ids),
                "n_images": len(image_data or []),
                "sampling_params": sampling_params,
            }
        )
        self.replies.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def searcher_script(n_images: int, prompt: str) -> str:
    """One crop, then an answer (boxes in the model frame of the first image)."""
    return TOOL % (40, 30, 200, 150) if n_images == 1 else ANSWER % (60, 40, 180, 140)


def loop_config(
    stage: str = "train",
    agent_yaml=AGENT_YAML,
    prompt_length: int = 1280,
    response_length: int = RESPONSE_LENGTH,
    variant: str = "original",
):
    """The parts of a composed recipe config the loops read (see recipe.vsearch.settings)."""
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {"prompt_length": prompt_length, "response_length": response_length},
                "actor": {"ppo_epochs": 1},
                "model": {},
            },
            "reward_model": {"enable": False, "enable_resource_pool": False, "use_reward_loop": False},
            "custom_reward_function": {"reward_kwargs": {**REWARD, "variant": variant}},
            "vsearch": {
                "variant": variant,
                "agent_config_path": str(agent_yaml),
                "stage": stage,
                "judge_model": "judge-m",
                "reward": {**REWARD, "variant": variant},
            },
            "trainer": {"use_legacy_worker_impl": "auto"},
            "data": {},
        }
    )


def make_loop(cls, policy, server, config=None):
    tok, proc = policy
    return cls(
        DictConfigWrap(config if config is not None else loop_config()),
        server,
        tok,
        proc,
        dataset_cls=RLHFDataset,
        dataset_config=OmegaConf.create({}),
    )


def reasoner_script(fail_at: int | None = None, n_search: int = 2):
    """vReasoner: n_search calls (feedback helpful on the first, unhelpful after), then \\boxed{42};
    the judge: <correct> to the in-loop verify prompt ("42" to anything else). ``fail_at``: the vReasoner's
    turn that answers 500 (no SDK retries in the test)."""

    def script(req, call):
        if req["model"] == JUDGE:
            text = request_text(req)  # judge requests are [text part] user messages, as the original's
            return chat("<correct>" if "GT Answer" in text else "42")
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        if fail_at is not None and turn == fail_at:
            return error(500, "boom")
        fb = "NA" if turn == 0 else ("helpful" if turn == 1 else "unhelpful")
        if turn < n_search:
            return chat(
                f"<think>t{turn}</think><tool_feedback>{fb}</tool_feedback>"
                f"<tool_call>region_description={{the band {turn}}}</tool_call>"
            )
        return chat(f"<think>done</think><tool_feedback>{fb}</tool_feedback>Answer: \\boxed{{42}}")

    return script


def inloop_row(image_path, validate: bool = False):
    return {
        "raw_prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": {"image": f"file://{image_path}"}},
                    {"type": "text", "text": "How many bars?"},
                ],
            }
        ],
        "extra_info": {"question": "How many bars?"},
        "uid": "ep1",
        "data_source": "collage",
        "reward_model": {"ground_truth": "forty-two", "style": "rule"},
        VALIDATE_KEY: validate,
    }


def run_inloop(policy, image_path, srv, monkeypatch, config=None, validate: bool = False, script=searcher_script):
    agent_loops._API.clear()
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    server = ScriptedServerManager(policy[0], script)

    async def go():
        loop = make_loop(VReasonerAgentLoop, policy, server, config)
        return loop, await loop.run({"temperature": 1.0}, **inloop_row(image_path, validate))

    loop, out = asyncio.run(go())
    return server, loop, out


def expand_rows(policy, out, row, config=None) -> DataProto:
    """verl's worker post-processing (padding, mm inputs, position ids) through the recipe's worker."""
    tok, proc = policy
    w = object.__new__(VSearchAgentLoopWorker)
    # the worker pads prompts to rollout.prompt_length; these prompts are < 1024 tokens (the loops' start-up
    # check asks for the recipe's conservative image tokens + 1024, hence 1280 in loop_config)
    w.config, w.tokenizer, w.processor = config if config is not None else loop_config(prompt_length=1024), tok, proc
    w.reward_router_address, w.use_reward_loop = None, None
    rows = asyncio.run(w._agent_loop_postprocess(out, **row))
    return w._postprocess([rows])


def actor_config():
    cfgdir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
    with initialize_config_dir(config_dir=cfgdir, version_base=None):
        cfg = compose(
            config_name="ppo_trainer",
            overrides=[
                "actor_rollout_ref.model.path=tiny",
                "actor_rollout_ref.rollout.n=2",
                "actor_rollout_ref.actor.ppo_mini_batch_size=2",
                "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2",
                "actor_rollout_ref.actor.use_dynamic_bsz=False",
                "actor_rollout_ref.actor.ppo_epochs=1",
                "actor_rollout_ref.actor.use_kl_loss=True",
                "actor_rollout_ref.actor.kl_loss_coef=0.01",
                "actor_rollout_ref.actor.kl_loss_type=low_var_kl",
                "actor_rollout_ref.actor.entropy_coeff=0",
                "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-mean",
                "actor_rollout_ref.actor.freeze_vision_tower=True",
                "actor_rollout_ref.actor.use_remove_padding=False",
            ],
        )
    OmegaConf.resolve(cfg)
    return omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


def rollout_batch(policy, image_path, config=None) -> DataProto:
    """Two rollouts of one out-of-loop prompt (a GRPO group), different answers, through the recipe
    (``config``: the loop/worker config, default :func:`loop_config`)."""
    tok, proc = policy
    answers = iter([(60, 40, 180, 140), (10, 10, 60, 50)])
    state = {}

    def script(n_images, prompt):
        if n_images == 1:
            state["ans"] = next(answers)
            return TOOL % (40, 30, 200, 150)
        return ANSWER % state["ans"]

    rows = []
    row = {
        "raw_prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": {"image": f"file://{image_path}"}},
                    {"type": "text", "text": "the striped band"},
                ],
            }
        ],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
        "uid": "g0",
    }
    for _ in range(2):
        server = ScriptedServerManager(tok, script)

        async def go(server=server):
            return await make_loop(VSearcherAgentLoop, policy, server, config).run({}, **row)

        rows.append(expand_rows(policy, asyncio.run(go()), row, config))
    batch = DataProto.concat(rows)
    # outcome reward on the last response token (what verl's reward loop writes as rm_scores)
    mask = batch.batch["response_mask"]
    valid = batch.batch["attention_mask"][:, -mask.shape[1] :].sum(-1) - 1
    tlr = torch.zeros_like(mask, dtype=torch.float32)
    tlr[torch.arange(len(batch)), valid] = torch.tensor([1.0, 0.2])
    batch.batch["token_level_rewards"] = tlr
    batch.non_tensor_batch["uid"] = np.array(["g0", "g0"], dtype=object)
    return compute_advantage(
        batch, adv_estimator=ESTIMATOR_NAME, config=OmegaConf.create({}), norm_adv_by_std_in_grpo=True
    )


#: crop calls in the model frame (the whole image shown at the test budget); regions of odd sizes in the original
CROPS = [(3, 5, 120, 77), (101, 33, 352, 250), (7, 200, 48, 231)]


def region_row(path: str) -> dict:
    """A region-localisation row on the image at ``path``."""
    return {
        "raw_prompt": [
            {
                "role": "user",
                "content": [
                    {"type": "image", "image": {"image": f"file://{path}"}},
                    {"type": "text", "text": "the striped band"},
                ],
            }
        ],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
        "uid": "u1",
    }


def scripted_rollout(policy, path: str, crops=CROPS):
    """A vSearcher rollout on ``path`` calling the crop tool on ``crops`` in turn, then answering."""
    tok, _ = policy
    boxes = iter(crops)

    def script(n_images, prompt):
        box = next(boxes, None)
        return TOOL % box if box is not None else ANSWER % (10, 10, 50, 50)

    server = ScriptedServerManager(tok, script)

    async def go():
        return await make_loop(VSearcherAgentLoop, policy, server, loop_config(response_length=2048)).run(
            {"temperature": 1.0}, **region_row(path)
        )

    return asyncio.run(go())


def verl_inputs(policy, out) -> dict:
    """verl 0.7.0's own multimodal inputs of a sample (what its agent-loop worker puts in every row)."""
    tok, proc = policy
    w = object.__new__(VSearchAgentLoopWorker)
    w.tokenizer, w.processor = tok, proc
    return AgentLoopWorkerBase._compute_multi_modal_inputs(w, out, torch.tensor([out.prompt_ids + out.response_ids]))
