"""The recipe's agent loops on CPU: a scripted stand-in for verl's server manager (token ids from the
tiny Qwen2.5-VL tokenizer, :mod:`tests.support.recipe_loops`) and a local OpenAI-compatible vReasoner/judge
(ScriptedOpenAIServer)."""

from __future__ import annotations

import asyncio
import re

import pytest

from tests.support.openai_server import chat, request_text
from tests.support.stacks import REPO, require_recipe

require_recipe()

import numpy as np  # noqa: E402
import torch  # noqa: E402
from PIL import Image  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402

from recipe.vsearch import agent_loops  # noqa: E402
from recipe.vsearch.agent_loops import VReasonerAgentLoop, VSearcherAgentLoop  # noqa: E402
from recipe.vsearch.episodes import EXTRA_SAMPLES_KEY, ROLE_KEY, VALIDATE_KEY, VSearchAgentLoopWorker, finalize_batch  # noqa: E402
from recipe.vsearch.protocols import PROTOCOLS  # noqa: E402
from recipe.vsearch.reward_fn import compute_score  # noqa: E402
from tests.support.recipe_loops import (  # noqa: E402
    AGENT_YAML,
    ANSWER,
    JUDGE,
    MAX_PIXELS,
    REASONER,
    RESPONSE_LENGTH,
    REWARD,
    TOOL,
    ScriptedServerManager,
    expand_rows,
    inloop_row,
    loop_config,
    make_loop,
    reasoner_script,
    run_inloop,
    searcher_script,
)


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
    }

    async def go():
        loop = make_loop(VSearcherAgentLoop, policy, server)
        assert loop.searcher.max_pixels == MAX_PIXELS  # the agent YAML's train budget
        return await loop.run({"temperature": 1.0}, **row)

    out = asyncio.run(go())

    gen1, gen2 = server.replies
    assert len(server.calls) == 2 and server.calls[1]["n_images"] == 2
    # response = generated turn 1 (1) | tool response (0) | generated turn 2 (1)
    spans = _spans(out.response_mask)
    assert [s[0] for s in spans] == [1, 0, 1]
    assert out.response_ids[spans[0][1] : spans[0][2]] == gen1
    assert out.response_ids[spans[2][1] : spans[2][2]] == gen2
    tool_text = tok.decode(out.response_ids[spans[1][1] : spans[1][2]])
    assert tool_text.startswith("\n<|im_start|>user\n<tool_response>") and "</tool_response>" in tool_text
    assert tool_text.endswith("<|im_start|>assistant\n")
    # the crop's image tokens sit in the masked span, and their number matches the crop's pixels
    crop = out.multi_modal_data["images"][1]
    n_pad = out.response_ids[spans[1][1] : spans[1][2]].count(tok.convert_tokens_to_ids("<|image_pad|>"))
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
    # what the 'original' reward reads: the model's crop box in the model frame, the frame, the image
    assert f["crop_boxes"] == [[40.0, 30.0, 200.0, 150.0]] and f["image_size"] == [640, 480]
    assert len(f["frame_size"]) == 2 and f["frame_size"][0] * f["frame_size"][1] <= MAX_PIXELS
    # the reward as verl's reward loop computes it (extra_info updated with the extra fields)
    paper = compute_score(row["data_source"], "", "", {**row["extra_info"], **f}, **{**REWARD, "variant": "paper"})
    assert 0.2 < paper["score"] < 1.0 and paper["iou"] > 0.25
    # the scripted answer does not cover 95 % of the ground truth: 'original' scores only the format part
    score = compute_score(row["data_source"], "", "", {**row["extra_info"], **f}, **REWARD)
    assert score["variant"] == "original" and score["score"] == pytest.approx(0.2) and score["repeated_view"] == 0


def test_vreasoner_episode_with_k_searches_yields_k_samples(policy, image_path, openai_server, monkeypatch):
    srv = openai_server(reasoner_script())
    server, loop, out = run_inloop(policy, image_path, srv, monkeypatch)
    extras = out.extra_fields[EXTRA_SAMPLES_KEY]
    samples = [out, *extras]
    assert len(samples) == 2 and len(server.calls) == 4  # 2 vSearcher episodes x 2 turns
    assert [s.extra_fields["feedback"] for s in samples] == ["helpful", "unhelpful"]
    assert all(s.extra_fields["answer_correct"] is True for s in samples)
    assert all(s.extra_fields["episode_has_answer"] and not s.extra_fields["critical_failure"] for s in samples)
    # the judge model was asked once, the fork's in-loop check (QA_VERIFY_PROMPT on the boxed span, max_tokens
    # 2048); the vReasoner used the training prompt
    judge_reqs = [r for r in srv.requests if r["model"] == JUDGE]
    assert len(judge_reqs) == 1 and judge_reqs[0]["max_tokens"] == 2048
    assert "GT Answer: forty-two" in request_text(judge_reqs[0]) and "Model Answer: 42" in request_text(judge_reqs[0])
    assert "<tool_feedback>" in srv.requests[0]["messages"][0]["content"]
    # the vReasoner saw the policy's crop after the first call
    assert any(p.get("type") == "image_url" for p in srv.requests[1]["messages"][-1]["content"])
    # each sample is a full vSearcher trajectory with its tool response masked
    for s in samples:
        assert [v for v, _, _ in _spans(s.response_mask)] == [1, 0, 1]
        assert len(s.multi_modal_data["images"]) == 2
    rewards = [compute_score("collage", "", "", s.extra_fields, **REWARD)["score"] for s in samples]
    assert rewards == pytest.approx([1.0, 0.2])  # r̂_IoU = 1[s=c=1], plus the format part

    batch = expand_rows(policy, out, inloop_row(image_path))
    assert len(batch) == 2
    assert list(batch.non_tensor_batch["uid"]) == ["inloop-ep1-0", "inloop-ep1-1"]
    assert batch.batch["response_mask"].sum() == sum(sum(s.response_mask) for s in samples)
    assert len(batch.non_tensor_batch["multi_modal_inputs"][1]["image_grid_thw"]) == 2
    final, metrics = finalize_batch(batch, dp_size=4, protocol=PROTOCOLS["paper"])
    assert len(final) == 4 and list(final.non_tensor_batch["uid"][2:]) == ["pad-2", "pad-3"]
    assert (final.batch["response_mask"][2:] == 0).all() and (final.batch["response_mask"][:2].sum(-1) > 0).all()
    # original: the padding rows are trained copies of the first rows, in their groups (the fork's
    # pad_dataproto_to_divisor)
    orig, _ = finalize_batch(batch, dp_size=4, protocol=PROTOCOLS["original"])
    assert list(orig.non_tensor_batch["uid"]) == ["inloop-ep1-0", "inloop-ep1-1"] * 2
    assert list(orig.non_tensor_batch[ROLE_KEY][2:]) == ["padding", "padding"]
    assert torch.equal(orig.batch["response_mask"][2:], orig.batch["response_mask"][:2])
    assert metrics["vsearch/accuracy_reward"] == 1.0 and metrics["vsearch/calls_per_qa"] == 2.0
    assert metrics["vsearch/pseudo_iou_rate"] == 0.5 and metrics["vsearch/feedback_rate"] == 1.0
    assert metrics["vsearch/critical_failure_ratio"] == 0.0


@pytest.mark.parametrize("variant", ["paper", "original"])
def test_vreasoner_api_failure_masks_samples(policy, image_path, openai_server, monkeypatch, variant):
    """An episode cut by a vReasoner API failure: its samples are masked out of the loss under ``paper`` and
    trained on (with c = 0) under ``original``, as the fork did; either way it counts as a critical failure."""
    srv = openai_server(reasoner_script(fail_at=1))
    server, loop, out = run_inloop(policy, image_path, srv, monkeypatch, loop_config(variant=variant))
    assert out.extra_fields[EXTRA_SAMPLES_KEY] == []
    f = out.extra_fields
    assert f["critical_failure"] is True and f["episode_critical_failure"] is True and f["n_tool"] == 1
    assert f["answer_correct"] is False and len(out.response_ids) > 0
    assert (sum(out.response_mask) == 0) is (variant == "paper")  # paper: excluded, not punished
    assert "sk-test-secret" not in repr(f)
    batch = expand_rows(policy, out, inloop_row(image_path))
    final, metrics = finalize_batch(batch, dp_size=2, protocol=PROTOCOLS[variant])
    assert metrics["vsearch/critical_failure_ratio"] == 1.0
    assert bool(final.batch["response_mask"].sum() == 0) is (variant == "paper")


def test_vreasoner_episode_without_search_is_a_dropped_placeholder(policy, image_path, openai_server, monkeypatch):
    srv = openai_server(reasoner_script(n_search=0))
    server, loop, out = run_inloop(policy, image_path, srv, monkeypatch)
    assert not server.calls and out.extra_fields[ROLE_KEY] == "placeholder" and sum(out.response_mask) == 0
    batch = expand_rows(policy, out, inloop_row(image_path))
    final, metrics = finalize_batch(batch, dp_size=2, protocol=PROTOCOLS["paper"])
    assert metrics["vsearch/calls_per_qa"] == 0.0 and metrics["vsearch/has_answer"] == 1.0
    assert len(final) == 2 and set(final.non_tensor_batch[ROLE_KEY]) == {"padding"}
    assert re.fullmatch(r"pad-\d", final.non_tensor_batch["uid"][0])
    assert np.all(final.batch["response_mask"].numpy() == 0)


# ----------------------------------------------------------------------------- settings the loops really use
def infer_script(n_search: int = 1):
    """vReasoner on the inference prompt (no <tool_feedback>), then \\boxed{42}; the judge as above."""

    def script(req, call):
        if req["model"] == JUDGE:
            return chat("<correct>" if "GT Answer" in request_text(req) else "42")
        turn = sum(m["role"] == "assistant" for m in req["messages"])
        if turn < n_search:
            return chat(f"<think>t{turn}</think><tool_call>region_description={{the band {turn}}}</tool_call>")
        return chat("<think>done</think>Answer: \\boxed{42}")

    return script


def _reasoner_requests(srv):
    return [r for r in srv.requests if r["model"] == REASONER]


def _reasoner(loop, validate: bool):
    """The InSightO3 vReasoner the loop builds for an episode (its API clients need a running event loop)."""

    async def go():
        return loop.reasoner(None, validate)

    return asyncio.run(go())


def test_training_rollout_uses_training_prompts_and_yaml_caps(policy, image_path, openai_server, monkeypatch):
    from insight_o3.protocol.prompts import VREASONER_TRAIN_SYSTEM_PROMPT

    srv = openai_server(reasoner_script())
    server, loop, out = run_inloop(policy, image_path, srv, monkeypatch)
    reqs = _reasoner_requests(srv)
    assert reqs[0]["messages"][0]["content"] == VREASONER_TRAIN_SYSTEM_PROMPT
    # the agent YAML's per-request token cap and image detail reach every vReasoner request
    assert all(r.get("max_completion_tokens") == 512 for r in reqs)
    details = [
        p["image_url"].get("detail")
        for r in reqs
        for m in r["messages"]
        if isinstance(m["content"], list)
        for p in m["content"]
        if p.get("type") == "image_url"
    ]
    assert details and set(details) == {"high"}
    # the judge is vsearch.judge_model
    assert {r["model"] for r in srv.requests} == {REASONER, JUDGE}
    assert loop.policy.max_pixels == MAX_PIXELS and loop.policy.max_tool_calls == 6
    assert loop.policy.response_length == RESPONSE_LENGTH
    assert "sk-test-secret" not in repr(loop.endpoints) + repr(loop.settings) + loop.settings.describe()


def test_validation_rollout_uses_inference_prompts(policy, image_path, openai_server, monkeypatch):
    from insight_o3.protocol.prompts import VREASONER_INFER_SYSTEM_PROMPT

    srv = openai_server(infer_script())
    server, loop, out = run_inloop(policy, image_path, srv, monkeypatch, validate=True)
    reqs = _reasoner_requests(srv)
    assert reqs[0]["messages"][0]["content"] == VREASONER_INFER_SYSTEM_PROMPT
    assert "<tool_feedback>" not in reqs[0]["messages"][0]["content"]
    assert out.extra_fields["episode_has_answer"] and out.extra_fields["answer_correct"] is True
    assert out.extra_fields["feedback"] is None  # no rating at validation: s is absent
    assert _reasoner(loop, validate=True).max_format_retries == 4  # max_format_retries_eval
    assert _reasoner(loop, validate=False).max_format_retries == 2


def hints_script(req, call):
    """vReasoner for the four user hints, with 3 searches allowed: a search that finds the region, a turn
    with no action (format retry), a search that finds nothing, the last search, then \\boxed{42}."""
    if req["model"] == JUDGE:
        return chat("<correct>" if "GT Answer" in request_text(req) else "42")
    turn = sum(m["role"] == "assistant" for m in req["messages"])
    fb = "<tool_feedback>NA</tool_feedback>" if turn == 0 else "<tool_feedback>helpful</tool_feedback>"
    search = "<tool_call>region_description={%s}</tool_call>"
    body = [search % "the band", "", search % "the unicorn", search % "the band again", "Answer: \\boxed{42}"][turn]
    return chat(f"<think>t{turn}</think>{fb}{body}")


def unicorn_searcher_script(n_images: int, prompt: str) -> str:
    """searcher_script, but "not found" ([0, 0, 0, 0] at once) for the unicorn."""
    return ANSWER % (0, 0, 0, 0) if "unicorn" in prompt else searcher_script(n_images, prompt)


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_training_rollout_sends_the_variants_user_hints(
    policy, image_path, tmp_path, openai_server, monkeypatch, variant
):
    """The in-loop vReasoner's user turn after a found region, a format retry, a not-found search and the last
    search: the fork's hints (the evaluation's) under ``original``, the paper's F.1 training hints under
    ``paper``, byte for byte; a validation rollout of ``paper`` keeps the fork's."""
    from insight_o3.protocol import prompts

    agent_yaml = tmp_path / "agent.yaml"
    agent_yaml.write_text(AGENT_YAML.read_text().replace("max_search_calls: 6", "max_search_calls: 3"))
    srv = openai_server(hints_script)
    config = loop_config(agent_yaml=agent_yaml, variant=variant)
    _, loop, out = run_inloop(policy, image_path, srv, monkeypatch, config, script=unicorn_searcher_script)
    reqs = _reasoner_requests(srv)
    assert len(reqs) == 5 and out.extra_fields["episode_has_answer"]
    last = [r["messages"][-1]["content"] for r in reqs[1:]]
    texts = [p["text"] for m in last for p in m if p["type"] == "text"]
    images = [[p["type"] for p in m].count("image_url") for m in last]
    if variant == "paper":
        want = [
            prompts.VREASONER_PAPER_TRAIN_CONTINUE_PROMPT,
            prompts.VREASONER_PAPER_TRAIN_FORMAT_RETRY_PROMPT,
            prompts.VREASONER_PAPER_TRAIN_NOT_FOUND_PROMPT,
            prompts.VREASONER_PAPER_TRAIN_LIMIT_PROMPT,
        ]
    else:
        want = [
            prompts.VREASONER_CONTINUE_PROMPT,
            prompts.VREASONER_FORMAT_RETRY_PROMPT,
            prompts.VREASONER_NOT_FOUND_PROMPT,
            prompts.VREASONER_LIMIT_PROMPT,
        ]
    assert texts == want and images == [1, 0, 0, 1]
    # each F.1 training hint asks again for the rating (the retry also for NA); the fork's do not
    assert [t.count("<tool_feedback>") for t in texts] == ([1, 2, 1, 1] if variant == "paper" else [0, 0, 0, 0])
    assert loop.settings.reasoner_hints(validate=True) is prompts.FORK_HINTS
    assert _reasoner(loop, validate=True).hints is prompts.FORK_HINTS


def test_eval_stage_uses_eval_pixels_and_per_model_image_budget(policy, monkeypatch):
    from recipe.vsearch.settings import SettingsError

    cfg_dir = REPO / "verl" / "recipe" / "vsearch" / "config"
    server = ScriptedServerManager(policy[0], searcher_script)
    eval_loop = make_loop(VSearcherAgentLoop, policy, server, loop_config(stage="eval", prompt_length=1536))
    assert eval_loop.searcher.max_pixels == 2 * MAX_PIXELS
    # the released agent configs: 3500x3500 for Gemini, 1280x1280 for GPT; 16K-token vSearcher images at eval
    for model, px in [("gemini-2.5-flash", 3500 * 3500), ("gpt-5-mini", 1280 * 1280)]:
        cfg = loop_config(stage="eval", agent_yaml=cfg_dir / f"agent_{model}.yaml", prompt_length=17408)
        loop = make_loop(VReasonerAgentLoop, policy, server, cfg)
        r = _reasoner(loop, validate=True)
        assert (r.model, r.max_pixels, r.mode) == (model, px, "infer")
        # the fork's request (vsearch_gpt_async.py:142, 221-231): temperature 1.0, reasoning_effort null
        assert r.completion_kwargs == {"max_completion_tokens": 2048, "temperature": 1.0, "reasoning_effort": None}
        assert r.image_url_extra == {"detail": "high"}
        assert loop.policy.max_pixels == 16384 * 28 * 28
    # a 16K-token image does not fit an 8K prompt: an error at start-up naming the key, not a crash mid-run
    with pytest.raises(SettingsError, match="data.max_prompt_length"):
        make_loop(
            VSearcherAgentLoop,
            policy,
            server,
            loop_config(stage="eval", agent_yaml=cfg_dir / "agent_gpt-5-mini.yaml", prompt_length=8192),
        )


class BudgetServerManager(ScriptedServerManager):
    """Honours ``max_tokens`` as verl's vLLM server does (pops it; at most that many tokens, no stop token
    when cut)."""

    async def generate(self, request_id, *, prompt_ids, sampling_params, image_data=None, video_data=None):
        asked = sampling_params.pop("max_tokens", None)
        out = await super().generate(
            request_id,
            prompt_ids=prompt_ids,
            sampling_params=dict(sampling_params),
            image_data=image_data,
            video_data=video_data,
        )
        self.calls[-1]["max_tokens"] = asked
        if asked is not None and len(out.token_ids) > asked:
            ids = out.token_ids[:asked]
            self.replies[-1] = ids
            return TokenOutput(token_ids=ids, log_probs=out.log_probs[:asked], stop_reason="completed")
        return out


def test_over_long_turn_is_cut_by_the_request_max_tokens(policy, image_path):
    """An over-long second turn (rambling, then a valid answer past the budget) is cut by the request's
    max_tokens = the unused response budget; the verdict is that of the kept tokens (no answer), not of
    the uncut text."""
    tok, _ = policy
    ramble = "<think>" + "look again " * 400 + "</think> "

    def script(n_images, prompt):
        return TOOL % (40, 30, 200, 150) if n_images == 1 else ramble + ANSWER % (60, 40, 180, 140)

    budget = 600
    server = BudgetServerManager(tok, script)
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
    }
    params = {"temperature": 1.0}

    async def go():
        loop = make_loop(VSearcherAgentLoop, policy, server, loop_config(response_length=budget))
        return await loop.run(params, **row)

    out = asyncio.run(go())

    assert params == {"temperature": 1.0}  # the caller's dict is not changed
    first, second = server.calls
    assert first["max_tokens"] == budget  # the whole budget for the first turn
    n_first = len(server.replies[0])
    spans = _spans(out.response_mask)
    n_tool = spans[1][2] - spans[1][1]
    assert second["max_tokens"] == budget - n_first - n_tool  # only what is left for the second
    assert len(server.replies[1]) == second["max_tokens"]  # the server cut it, not the loop
    assert len(out.response_ids) == budget
    assert out.response_ids[spans[2][1] :] == server.replies[1]
    f = out.extra_fields
    # the kept tokens contain no answer: no box, the format check fails, the episode is marked truncated
    assert f["pred_box"] is None and f["format_ok"] is False and f["search_truncated"] is True
    assert compute_score(row["data_source"], "", "", {**row["extra_info"], **f}, **REWARD)["score"] == 0.0


class SlowProcessor:
    """The policy's processor, but each image-processing call blocks for ``delay`` seconds (a 3.2 MP image)."""

    def __init__(self, inner, delay: float):
        self._inner, self._delay = inner, delay

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def __call__(self, *args, **kwargs):
        import time

        time.sleep(self._delay)
        return self._inner(*args, **kwargs)


@pytest.mark.timing
def test_processor_runs_off_the_agent_loop_event_loop(policy, image_path):
    """Other episodes of the worker keep running while one episode's images are processed: a heartbeat on
    the same event loop never waits for a (blocking) processor call."""
    tok, proc = policy
    # a blocked loop misses a whole delay (a gap >= delay fails however loaded the machine); half of one is the room
    # left for scheduling: the suite's xdist workers saturate both cores, and CI saw an unblocked loop's 0.59 s gap
    delay = 2.0
    server = ScriptedServerManager(tok, searcher_script)
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
    }

    async def go():
        loop = make_loop(VSearcherAgentLoop, (tok, SlowProcessor(proc, delay)), server)
        gaps, done = [], asyncio.Event()

        async def heartbeat():
            t = asyncio.get_running_loop().time()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = asyncio.get_running_loop().time()
                gaps.append(now - t)
                t = now

        async def episode():
            try:
                return await loop.run({"temperature": 1.0}, **row)
            finally:
                done.set()

        out, _ = await asyncio.gather(episode(), heartbeat())
        return out, gaps

    out, gaps = asyncio.run(go())
    assert out.extra_fields["n_tool"] == 1 and len(server.calls) == 2  # 2 processor calls of `delay` each
    assert max(gaps) < delay / 2, f"the event loop was blocked for {max(gaps):.2f} s"


@pytest.mark.timing
def test_worker_computes_multimodal_inputs_off_the_event_loop(policy, image_path):
    """The worker's post-processing runs the image processor in a thread, and its multimodal inputs are
    exactly verl's (same pixel values and grids as verl's own ``_compute_multi_modal_inputs``)."""
    import torch
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorkerBase

    tok, proc = policy
    server = ScriptedServerManager(tok, searcher_script)
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
        "uid": "u1",
    }

    async def rollout():
        return await make_loop(VSearcherAgentLoop, policy, server).run({"temperature": 1.0}, **row)

    out = asyncio.run(rollout())
    # the recipe's loops hand image references, which the worker keeps instead of pixel values
    # (tests/recipe/test_image_inputs.py); a sample without them (another agent loop) gets verl's pixel values
    from recipe.vsearch.image_inputs import VIEWS_KEY

    assert out.multi_modal_data.pop(VIEWS_KEY) is not None
    w = object.__new__(VSearchAgentLoopWorker)
    w.config, w.tokenizer, w.processor = loop_config(prompt_length=1024), tok, SlowProcessor(proc, 0.4)
    w.reward_router_address, w.use_reward_loop = None, None
    want = AgentLoopWorkerBase._compute_multi_modal_inputs(w, out, torch.tensor([out.prompt_ids + out.response_ids]))

    async def go():
        gaps, done = [], asyncio.Event()

        async def heartbeat():
            t = asyncio.get_running_loop().time()
            while not done.is_set():
                await asyncio.sleep(0.01)
                now = asyncio.get_running_loop().time()
                gaps.append(now - t)
                t = now

        async def post():
            try:
                return await w._agent_loop_postprocess(out, **row)
            finally:
                done.set()

        rows, _ = await asyncio.gather(post(), heartbeat())
        return rows, gaps

    rows, gaps = asyncio.run(go())
    assert gaps and max(gaps) < 0.2, f"the event loop was blocked for {max(gaps or [0]):.2f} s"
    got = rows[0].multi_modal_inputs
    assert torch.equal(got["pixel_values"], want["pixel_values"]) and torch.equal(
        got["image_grid_thw"], want["image_grid_thw"]
    )
    assert not w._mm_ready


def test_vsearcher_turns_are_capped_at_1024_new_tokens_inside_the_budget(policy, image_path):
    """The fork's VSearcherLoop.MAX_TOKENS_PER_TURN: each turn asks for at most 1024 new tokens (when the
    sampling parameters set no max_tokens), and never more than the unused response budget."""
    tok, _ = policy
    server = BudgetServerManager(tok, searcher_script)
    row = {
        "raw_prompt": [{"role": "user", "content": [{"type": "image", "image": {"image": f"file://{image_path}"}}]}],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
    }

    async def go(budget, params):
        loop = make_loop(VSearcherAgentLoop, policy, server, loop_config(response_length=budget))
        return await loop.run(params, **row)

    asyncio.run(go(4096, {"temperature": 1.0}))
    assert [c["max_tokens"] for c in server.calls] == [1024, 1024]
    server.calls.clear()
    server.replies.clear()
    asyncio.run(go(1100, {"temperature": 1.0}))  # the second turn gets what is left of 1100
    first, second = server.calls
    assert first["max_tokens"] == 1024 and second["max_tokens"] < 1100 - len(server.replies[0])
    server.calls.clear()
    server.replies.clear()
    asyncio.run(go(4096, {"temperature": 1.0, "max_tokens": 300}))  # the caller's own cap wins, as in the fork
    assert [c["max_tokens"] for c in server.calls] == [300, 300]


def test_first_vreasoner_request_is_byte_identical_in_evaluation_and_training(
    policy, tmp_path, openai_server, monkeypatch
):
    """One question formatter (insight_o3.protocol.questions): a multiple-choice question whose options hold a literal
    backslash-n reaches the vReasoner as the same bytes from the evaluation solver (annotation loader ->
    InSightO3Solver) and from a validation rollout of the recipe (parquet writer -> dataset -> agent loop):
    the fork's get_question turns the literal \\n into a newline in both."""
    import json as _json

    from insight_o3.agents.drivers import VREASONER_COMPLETION_KWARGS, InSightO3
    from insight_o3.agents.solver import InSightO3Solver
    from insight_o3.endpoints.client import make_client
    from insight_o3.endpoints.endpoint import Endpoint
    from insight_o3.evaluation.samples import load_samples
    from insight_o3.imaging.images import ImageStore
    from recipe.vsearch.create_parquet_dataset import qa_rows
    from recipe.vsearch.dataset import build_messages

    img = Image.new("RGBA", (320, 240), (200, 30, 30, 255))
    img.paste((0, 0, 0, 0), (0, 0, 100, 100))  # a transparent corner: composited on white on both sides
    img.save(tmp_path / "q.png")
    ann = tmp_path / "bench.jsonl"
    rec = {"image": "q.png", "question": "Which side\\nis red?", "options": "A. left\\nB. right", "answer": "A"}
    ann.write_text(_json.dumps(rec) + "\n")
    assert "\\n" in ann.read_text()  # the annotation holds a literal backslash-n

    srv = openai_server(infer_script(n_search=0))  # answers at once: the first request is the whole episode
    # evaluation: the annotation loader and the InSight-o3 solver
    (sample,) = load_samples(str(ann), str(tmp_path))
    client = make_client(Endpoint(api_key="sk-test", base_url=srv.base_url, max_retries=0))
    system = InSightO3(
        client,
        REASONER,
        None,
        ImageStore(alpha="white"),
        1638400,
        mode="infer",
        completion_kwargs={**VREASONER_COMPLETION_KWARGS, "max_completion_tokens": 512},  # the fork's, the YAML's cap
        image_url_extra={"detail": "high"},
    )
    asyncio.run(InSightO3Solver(system, (client,)).solve(sample, 1))
    eval_req = _reasoner_requests(srv)[0]
    # training (validation rollout): the parquet writer's row, the recipe dataset's messages, the agent loop
    (row,) = qa_rows(str(ann), str(tmp_path), "bench", "benchmark")
    messages, _ = build_messages(row)
    assert messages[1]["content"][0]["text"] == "Which side\nis red?\nA. left\nB. right"
    kwargs = {**row, "raw_prompt": messages, VALIDATE_KEY: True, "uid": "q"}
    agent_loops._API.clear()
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")

    async def go():
        loop = make_loop(VReasonerAgentLoop, policy, ScriptedServerManager(policy[0], searcher_script))
        return await loop.run({"temperature": 1.0}, **kwargs)

    asyncio.run(go())
    train_req = _reasoner_requests(srv)[-1]
    assert train_req is not eval_req and len(_reasoner_requests(srv)) == 2
    assert _json.dumps(train_req, sort_keys=True) == _json.dumps(eval_req, sort_keys=True)
    user = eval_req["messages"][1]["content"]
    assert user[-1] == {"type": "text", "text": "Which side\nis red?\nA. left\nB. right"}


def test_tool_error_is_a_text_tool_response_and_the_episode_goes_on(policy, image_path):
    """The fork's zoom-in tool answers an unusable box with its error text: a masked text-only tool turn (no image),
    then the policy's next turn; r_format fails (the tool box is inverted), the answer still counts as found."""
    tok, _ = policy

    def script(n_images, prompt):
        if "<tool_response>Error" in prompt:
            return ANSWER % (60, 40, 180, 140)
        return TOOL % (200, 150, 40, 30)  # inverted

    server = ScriptedServerManager(tok, script)
    row = {
        "raw_prompt": [{"role": "user", "content": [{"type": "image", "image": {"image": f"file://{image_path}"}}]}],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
    }

    async def go():
        return await make_loop(VSearcherAgentLoop, policy, server).run({"temperature": 1.0}, **row)

    out = asyncio.run(go())
    spans = _spans(out.response_mask)
    assert [s[0] for s in spans] == [1, 0, 1] and len(out.multi_modal_data["images"]) == 1
    tool_text = tok.decode(out.response_ids[spans[1][1] : spans[1][2]])
    assert "<tool_response>Error: The specified bounding box [200, 150, 40, 30] is invalid" in tool_text
    assert server.calls[1]["n_images"] == 1
    f = out.extra_fields
    assert f["search_status"] == "found" and f["format_ok"] is False and f["n_tool"] == 0
    assert compute_score(row["data_source"], "", "", {**row["extra_info"], **f}, **REWARD)["score"] == 0.0
