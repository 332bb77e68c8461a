"""The recipe's agent loops on CPU: a scripted stand-in for verl's server manager (token ids from the
tiny Qwen2.5-VL tokenizer) and a local OpenAI-compatible vReasoner/judge (ScriptedOpenAIServer)."""
from __future__ import annotations

import asyncio
import re

import pytest

from tests.conftest import require_module
from tests.support.openai_server import chat, error

require_module("verl")

import numpy as np  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from PIL import Image  # noqa: E402
from verl.experimental.agent_loop.agent_loop import DictConfigWrap  # noqa: E402
from verl.utils import hf_tokenizer  # noqa: E402
from verl.utils.dataset.rl_dataset import RLHFDataset  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from recipe.vsearch import agent_loops  # noqa: E402
from recipe.vsearch.agent_loops import VReasonerAgentLoop, VSearcherAgentLoop  # noqa: E402
# Qwen2.5-VL's processor without its video half: transformers' video processor needs torchvision, which the
# CPU environment must not have (verl's hf_processor returns None here); on GPU verl loads the full one
from recipe.vsearch.cpu.processor import image_only_processor  # noqa: E402
from recipe.vsearch.episodes import (EXTRA_SAMPLES_KEY, ROLE_KEY, VSearchAgentLoopWorker,  # noqa: E402
                                     finalize_batch)
from recipe.vsearch.reward_fn import compute_score  # noqa: E402

MAX_PIXELS = 160 * 28 * 28          # small vSearcher budget: few image tokens on CPU
RESPONSE_LENGTH = 2048
TOOL = '<think>look</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [%d, %d, %d, %d]}}</tool_call>'
ANSWER = "<think>found it</think> <answer>[%d, %d, %d, %d]</answer>"


class ScriptedServerManager:
    """Same ``generate`` signature as verl's AsyncLLMServerManager; replies chosen by ``script``
    from (number of images so far, decoded prompt), tokenised with the policy's tokenizer."""

    def __init__(self, tokenizer, script):
        self.tokenizer, self.script = tokenizer, script
        self.calls: list[dict] = []
        self.replies: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
        text = self.script(len(image_data or []), self.tokenizer.decode(prompt_ids))
        ids = self.tokenizer.encode(text, add_special_tokens=False) + [self.tokenizer.convert_tokens_to_ids("<|im_end|>")]
        self.calls.append({"request_id": request_id, "n_prompt": len(prompt_ids), "n_images": len(image_data or []),
                           "sampling_params": sampling_params})
        self.replies.append(ids)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def searcher_script(n_images: int, prompt: str) -> str:
    """One crop, then an answer (boxes in the model frame of the first image)."""
    return TOOL % (40, 30, 200, 150) if n_images == 1 else ANSWER % (60, 40, 180, 140)


@pytest.fixture(scope="module")
def policy(tiny_qwen_dir):
    tok = hf_tokenizer(str(tiny_qwen_dir))
    return tok, image_only_processor(str(tiny_qwen_dir), tok)


@pytest.fixture
def image_path(tmp_path):
    img = Image.new("RGB", (640, 480), (30, 60, 90))
    for x in range(0, 640, 40):
        img.paste((200, x % 255, 40), (x, 100, x + 20, 300))
    p = tmp_path / "img.png"
    img.save(p)
    return str(p)


def _config():
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 1024, "response_length": RESPONSE_LENGTH},
                              "model": {}},
        "reward_model": {"enable": False, "enable_resource_pool": False, "use_reward_loop": False},
        "data": {},
    })


def _make(cls, policy, server, **kw):
    tok, proc = policy
    return cls(DictConfigWrap(_config()), server, tok, proc, dataset_cls=RLHFDataset,
               dataset_config=OmegaConf.create({}), **kw)


def _spans(mask: list[int]) -> list[tuple[int, int, int]]:
    out, start = [], 0
    for i in range(1, len(mask) + 1):
        if i == len(mask) or mask[i] != mask[start]:
            out.append((mask[start], start, i))
            start = i
    return out


def test_vsearcher_loop_masks_tool_response_and_attaches_crops(policy, image_path):
    tok, proc = policy
    server = ScriptedServerManager(tok, searcher_script)
    row = {"raw_prompt": [{"role": "user", "content": [{"type": "image", "image": {"image": f"file://{image_path}"}},
                                                      {"type": "text", "text": "the striped band"}]}],
           "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
           "data_source": "region_loc", "reward_model": {"ground_truth": "", "style": "rule"}}

    async def go():
        loop = _make(VSearcherAgentLoop, policy, server, max_pixels=MAX_PIXELS)
        return await loop.run({"temperature": 1.0}, **row)
    out = asyncio.run(go())

    gen1, gen2 = server.replies
    assert len(server.calls) == 2 and server.calls[1]["n_images"] == 2
    # response = generated turn 1 (1) | tool response (0) | generated turn 2 (1)
    spans = _spans(out.response_mask)
    assert [s[0] for s in spans] == [1, 0, 1]
    assert out.response_ids[spans[0][1]:spans[0][2]] == gen1
    assert out.response_ids[spans[2][1]:spans[2][2]] == gen2
    tool_text = tok.decode(out.response_ids[spans[1][1]:spans[1][2]])
    assert tool_text.startswith("\n<|im_start|>user\n<tool_response>") and "</tool_response>" in tool_text
    assert tool_text.endswith("<|im_start|>assistant\n")
    # the crop's image tokens sit in the masked span, and their number matches the crop's pixels
    crop = out.multi_modal_data["images"][1]
    n_pad = out.response_ids[spans[1][1]:spans[1][2]].count(tok.convert_tokens_to_ids("<|image_pad|>"))
    grid = proc.image_processor(images=[crop], return_tensors="pt")["image_grid_thw"][0]
    assert n_pad == int(grid.prod()) // 4 > 0
    assert len(out.multi_modal_data["images"]) == 2
    # the policy's second turn saw the first turn and the tool response
    assert server.calls[1]["n_prompt"] == len(out.prompt_ids) + spans[1][2]
    assert out.response_logprobs is not None and len(out.response_logprobs) == len(out.response_ids)

    f = out.extra_fields
    assert f["n_tool"] == 1 and f["format_ok"] is True and f["is_in_loop"] is False
    assert f["bboxes"] == [[50, 40, 300, 200]] and f[ROLE_KEY] == "outloop"
    assert f["pred_box"] is not None and len(f["pred_box"]) == 4
    # the reward as verl's reward loop computes it (extra_info updated with the extra fields)
    score = compute_score(row["data_source"], "", "", {**row["extra_info"], **f})
    assert 0.2 <= score["score"] <= 1.0 and score["iou"] > 0


REASONER, JUDGE = "reasoner-m", "judge-m"


def reasoner_script(fail_at: int | None = None, n_search: int = 2):
    """vReasoner: n_search calls (feedback helpful on the first, unhelpful after), then \\boxed{42};
    the judge: extraction says "42", the F.3 judge says <correct>. ``fail_at``: the vReasoner's
    turn that answers 500 (no SDK retries in the test)."""
    def script(req, call):
        if req["model"] == JUDGE:
            text = req["messages"][0]["content"]
            return chat("<correct>" if "GT Answer" in text else "42")
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        if fail_at is not None and turn == fail_at:
            return error(500, "boom")
        fb = "NA" if turn == 0 else ("helpful" if turn == 1 else "unhelpful")
        if turn < n_search:
            return chat(f"<think>t{turn}</think><tool_feedback>{fb}</tool_feedback>"
                        f"<tool_call>region_description={{the band {turn}}}</tool_call>")
        return chat(f"<think>done</think><tool_feedback>{fb}</tool_feedback>Answer: \\boxed{{42}}")
    return script


def _inloop_row(image_path):
    return {"raw_prompt": [{"role": "user", "content": [{"type": "image", "image": {"image": f"file://{image_path}"}},
                                                      {"type": "text", "text": "How many bars?"}]}],
            "extra_info": {"question": "How many bars?"}, "uid": "ep1", "data_source": "collage",
            "reward_model": {"ground_truth": "forty-two", "style": "rule"}}


def _run_inloop(policy, image_path, srv, monkeypatch):
    agent_loops._API.clear()
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    server = ScriptedServerManager(policy[0], searcher_script)

    async def go():
        loop = _make(VReasonerAgentLoop, policy, server, reasoner_model=REASONER, judge_model=JUDGE,
                     api_max_retries=0, max_concurrency=2, searcher_max_pixels=MAX_PIXELS)
        return loop, await loop.run({"temperature": 1.0}, **_inloop_row(image_path))
    loop, out = asyncio.run(go())
    return server, loop, out


def _expand(policy, out, row) -> "DataProto":  # noqa: F821
    """verl's worker post-processing (padding, mm inputs, position ids) through the recipe's worker."""
    tok, proc = policy
    w = object.__new__(VSearchAgentLoopWorker)
    w.config, w.tokenizer, w.processor = _config(), tok, proc
    w.reward_router_address, w.use_reward_loop = None, None
    rows = asyncio.run(w._agent_loop_postprocess(out, **row))
    return w._postprocess([rows])


def test_vreasoner_episode_with_k_searches_yields_k_samples(policy, image_path, openai_server, monkeypatch):
    srv = openai_server(reasoner_script())
    server, loop, out = _run_inloop(policy, image_path, srv, monkeypatch)
    extras = out.extra_fields[EXTRA_SAMPLES_KEY]
    samples = [out, *extras]
    assert len(samples) == 2 and len(server.calls) == 4          # 2 vSearcher episodes x 2 turns
    assert [s.extra_fields["feedback"] for s in samples] == ["helpful", "unhelpful"]
    assert all(s.extra_fields["answer_correct"] is True for s in samples)
    assert all(s.extra_fields["episode_has_answer"] and not s.extra_fields["critical_failure"] for s in samples)
    # the judge model was asked (extraction, then the F.3 prompt); the vReasoner used the training prompt
    judge_reqs = [r for r in srv.requests if r["model"] == JUDGE]
    assert len(judge_reqs) == 2 and "GT Answer: forty-two" in judge_reqs[1]["messages"][0]["content"]
    assert "<tool_feedback>" in srv.requests[0]["messages"][0]["content"]
    # the vReasoner saw the policy's crop after the first call
    assert any(p.get("type") == "image_url" for p in srv.requests[1]["messages"][-1]["content"])
    # each sample is a full vSearcher trajectory with its tool response masked
    for s in samples:
        assert [v for v, _, _ in _spans(s.response_mask)] == [1, 0, 1]
        assert len(s.multi_modal_data["images"]) == 2
    rewards = [compute_score("collage", "", "", s.extra_fields)["score"] for s in samples]
    assert rewards == pytest.approx([1.0, 0.2])                   # r̂_IoU = 1[s=c=1], plus the format part

    batch = _expand(policy, out, _inloop_row(image_path))
    assert len(batch) == 2
    assert list(batch.non_tensor_batch["uid"]) == ["inloop-ep1-0", "inloop-ep1-1"]
    assert batch.batch["response_mask"].sum() == sum(sum(s.response_mask) for s in samples)
    assert len(batch.non_tensor_batch["multi_modal_inputs"][1]["image_grid_thw"]) == 2
    final, metrics = finalize_batch(batch, dp_size=4)
    assert len(final) == 4 and list(final.non_tensor_batch["uid"][2:]) == ["pad-2", "pad-3"]
    assert (final.batch["response_mask"][2:] == 0).all() and (final.batch["response_mask"][:2].sum(-1) > 0).all()
    assert metrics["vsearch/accuracy_reward"] == 1.0 and metrics["vsearch/calls_per_qa"] == 2.0
    assert metrics["vsearch/pseudo_iou_rate"] == 0.5 and metrics["vsearch/feedback_rate"] == 1.0
    assert metrics["vsearch/critical_failure_ratio"] == 0.0


def test_vreasoner_api_failure_masks_samples(policy, image_path, openai_server, monkeypatch):
    srv = openai_server(reasoner_script(fail_at=1))
    server, loop, out = _run_inloop(policy, image_path, srv, monkeypatch)
    assert out.extra_fields[EXTRA_SAMPLES_KEY] == []
    f = out.extra_fields
    assert f["critical_failure"] is True and f["episode_critical_failure"] is True and f["n_tool"] == 1
    assert sum(out.response_mask) == 0 and len(out.response_ids) > 0          # excluded, not punished
    assert "sk-test-secret" not in repr(f)
    batch = _expand(policy, out, _inloop_row(image_path))
    final, metrics = finalize_batch(batch, dp_size=2)
    assert metrics["vsearch/critical_failure_ratio"] == 1.0
    assert final.batch["response_mask"].sum() == 0


def test_vreasoner_episode_without_search_is_a_dropped_placeholder(policy, image_path, openai_server, monkeypatch):
    srv = openai_server(reasoner_script(n_search=0))
    server, loop, out = _run_inloop(policy, image_path, srv, monkeypatch)
    assert not server.calls and out.extra_fields[ROLE_KEY] == "placeholder" and sum(out.response_mask) == 0
    batch = _expand(policy, out, _inloop_row(image_path))
    final, metrics = finalize_batch(batch, dp_size=2)
    assert metrics["vsearch/calls_per_qa"] == 0.0 and metrics["vsearch/has_answer"] == 1.0
    assert len(final) == 2 and set(final.non_tensor_batch[ROLE_KEY]) == {"padding"}
    assert re.fullmatch(r"pad-\d", final.non_tensor_batch["uid"][0])
    assert np.all(final.batch["response_mask"].numpy() == 0)
