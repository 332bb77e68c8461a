"""What the vSearcher is trained on under ``vsearch.variant=original`` where the fork's loop differs from a literal
reading: the reminder after the last crop, an episode that runs out of its token budget, the
vReasoner's requests in training. CPU: the scripted server manager and local OpenAI server of
``tests/recipe/test_agent_loops.py``."""

from __future__ import annotations

import asyncio

import pytest

from tests.support.openai_server import error
from tests.support.stacks import REPO, require_recipe

require_recipe()

from insight_o3.protocol.prompts import VSEARCHER_LIMIT_PROMPT, VSEARCHER_TOOL_RESPONSE_PROMPT  # noqa: E402
from recipe.vsearch.agent_config import load_agent_config  # noqa: E402
from recipe.vsearch.agent_loops import VSearcherAgentLoop  # noqa: E402
from tests.support.recipe_loops import (  # noqa: E402
    ANSWER,
    JUDGE,
    REASONER,
    TOOL,
    ScriptedServerManager,
    loop_config,
    make_loop,
    reasoner_script,
    run_inloop,
)


def _outloop_row(image_path: str) -> dict:
    return {
        "raw_prompt": [{"role": "user", "content": [{"type": "image", "image": {"image": f"file://{image_path}"}}]}],
        "extra_info": {"description": "the striped band", "bboxes": [[50, 40, 300, 200]]},
        "data_source": "region_loc",
        "reward_model": {"ground_truth": "", "style": "rule"},
    }


def _run_outloop(policy, image_path, script, config):
    server = ScriptedServerManager(policy[0], script)

    async def go():
        return await make_loop(VSearcherAgentLoop, policy, server, config).run(
            {"temperature": 1.0}, **_outloop_row(image_path)
        )

    return server, asyncio.run(go())


# ----------------------------------------------------------------------------- item 1
@pytest.mark.parametrize("variant", ["original", "paper"])
def test_reminder_after_the_last_allowed_crop(policy, image_path, variant):
    """The fork renders each tool turn on its own (``tool_agent_loop.py:329-336``): its template's image count is
    at most 1, the limit branch never fires and the 7th turn follows the normal reminder. ``paper`` keeps F.1's
    limit text."""
    prompts: list[str] = []

    def script(n_images, prompt):
        prompts.append(prompt)
        return TOOL % (40, 30, 200, 150) if n_images <= 6 else ANSWER % (60, 40, 180, 140)

    server, out = _run_outloop(policy, image_path, script, loop_config(response_length=8192, variant=variant))
    assert len(server.calls) == 7 and server.calls[-1]["n_images"] == 7
    last_tool_turn = prompts[-1].rsplit("<tool_response>", 1)[1]
    if variant == "original":
        assert VSEARCHER_LIMIT_PROMPT.strip() not in prompts[-1]
        assert VSEARCHER_TOOL_RESPONSE_PROMPT in last_tool_turn
    else:
        assert VSEARCHER_LIMIT_PROMPT.strip() in last_tool_turn
    assert out.extra_fields["search_status"] == "found"


# ----------------------------------------------------------------------------- item 2
def _first_turn_then_crop(n_images, prompt):
    return TOOL % (40, 30, 200, 150) if n_images == 1 else ANSWER % (60, 40, 180, 140)


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_tool_response_past_the_budget_ends_the_episode_as_the_fork(policy, image_path, variant):
    """A crop that no longer fits the trajectory budget: the fork's loop just stops (``tool_agent_loop.py:348-349``)
    and the episode's box is the last turn's ``<answer>`` (none here); ``paper`` marks the vSearcher failed."""
    server, out = _run_outloop(
        policy, image_path, _first_turn_then_crop, loop_config(response_length=120, variant=variant)
    )
    f = out.extra_fields
    assert len(server.calls) == 1 and f["search_truncated"] is True and f["pred_box"] is None
    assert f["search_status"] == ("invalid" if variant == "original" else "failed")
    assert [v for v in out.response_mask] == [1] * len(out.response_ids)  # the crop that did not fit is not there


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_in_loop_call_past_the_budget_is_no_critical_failure(policy, image_path, openai_server, monkeypatch, variant):
    """In a vReasoner episode the fork's vSearcher without a box ends the episode normally (no critical failure,
    ``insight_o3_agent_loop.py:238-241, 299-302``): it cannot count toward the 20 % abort."""
    srv = openai_server(reasoner_script())
    config = loop_config(response_length=120, variant=variant)
    _server, _loop, out = run_inloop(policy, image_path, srv, monkeypatch, config, script=_first_turn_then_crop)
    f = out.extra_fields
    assert f["critical_failure"] is (variant == "paper") and f["episode_critical_failure"] is (variant == "paper")
    assert f["answer_correct"] is False


def test_turn_cut_at_the_budget_with_a_tool_call_ends_without_running_it(policy, image_path):
    """The fork stops on a full budget before it parses the turn (``tool_agent_loop.py:237``): a complete tool call
    in the last tokens is not run, and the episode is not a failure."""
    tok = policy[0]
    n_first = len(tok.encode(TOOL % (40, 30, 200, 150), add_special_tokens=False)) + 1
    server, out = _run_outloop(
        policy, image_path, _first_turn_then_crop, loop_config(response_length=n_first, variant="original")
    )
    f = out.extra_fields
    assert len(server.calls) == 1 and len(out.response_ids) == n_first
    assert f["search_status"] == "invalid" and f["n_tool"] == 0


# ----------------------------------------------------------------------------- item 3
def test_training_vreasoner_requests_are_the_forks(policy, image_path, openai_server, monkeypatch):
    """The fork sends ``temperature: 1.0`` and ``reasoning_effort: null`` with ``max_completion_tokens``
    (``vsearch_gpt_async.py:142, 221-231``)."""
    srv = openai_server(reasoner_script())
    run_inloop(policy, image_path, srv, monkeypatch)
    reqs = [r for r in srv.requests if r["model"] == REASONER]
    assert reqs and all(r["temperature"] == 1.0 for r in reqs)
    assert all("reasoning_effort" in r and r["reasoning_effort"] is None for r in reqs)
    assert all(r["max_completion_tokens"] == 512 for r in reqs)  # tests/support/agent_tiny.yaml


def test_a_lost_vreasoner_reply_uses_one_attempt_of_the_round(policy, image_path, openai_server, monkeypatch):
    """An API error (after the SDK's retries) uses one of the round's 3 attempts (``vsearch_gpt_async.py:233-243``):
    the turn is asked again and the episode goes on; three in a round are a critical failure."""
    base = reasoner_script()

    def flaky(req, call):
        if req["model"] != JUDGE and call in (0, 2):
            return error(500, "boom")
        return base(req, call)

    srv = openai_server(flaky)
    _server, _loop, out = run_inloop(policy, image_path, srv, monkeypatch)
    assert out.extra_fields["critical_failure"] is False and out.extra_fields["answer_correct"] is True

    def dead(req, call):
        return base(req, call) if req["model"] == JUDGE else error(500, "boom")

    srv = openai_server(dead)
    _server, _loop, out = run_inloop(policy, image_path, srv, monkeypatch)
    reqs = [r for r in srv.requests if r["model"] == REASONER]
    assert out.extra_fields["critical_failure"] is True and len(reqs) == 3  # max_format_retries_train 2 -> 3 attempts


@pytest.mark.parametrize("name", ["gpt-5-mini", "gpt-5-nano", "gemini-2.5-flash"])
def test_shipped_agent_configs_use_the_forks_client_limits(name):
    """The fork's client: ``OPENAI_CLIENT_TIMEOUT=60`` (train.sh:18), the SDK's 2 retries; judge task timeout 60 s."""
    cfg = load_agent_config(REPO / "verl" / "recipe" / "vsearch" / "config" / f"agent_{name}.yaml")
    assert (cfg.vreasoner.timeout_s, cfg.vreasoner.max_retries) == (60, 2)
    assert (cfg.judge.timeout_s, cfg.judge.max_retries) == (60, 2)


# ----------------------------------------------------------------------------- item 4
def test_released_texts_are_kept_raw():
    """The fork writes the released question / answer / region description raw (``create_parquet_dataset.py``
    ``VisCoT_VStar_Collage:231-235``, ``InfoVQA_RegionLocalization:278-285``): no ``.strip()``."""
    from recipe.vsearch.released_data import InputError, text_field

    assert text_field({"q": " What is it?\n"}, "q", "row 1") == " What is it?\n"
    with pytest.raises(InputError, match="row 1: field 'q'"):
        text_field({"q": "  "}, "q", "row 1")


@pytest.mark.parametrize("variant", ["original", "paper"])
def test_pad_token_ends_the_episode_as_the_fork(policy, image_path, variant):
    """A turn that ends on the pad token (``<|endoftext|>``) with a tool call: the fork's loop ends the episode
    (``insight_o3_agent_loop.py:152-159``); ``paper`` runs the call and goes on."""
    tok = policy[0]

    class PadServer(ScriptedServerManager):
        async def generate(self, request_id, **kw):
            out = await super().generate(request_id, **kw)
            ids = list(out.token_ids[:-1]) + [tok.pad_token_id]
            return type(out)(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")

    server = PadServer(tok, _first_turn_then_crop)

    async def go():
        cfg = loop_config(variant=variant)
        return await make_loop(VSearcherAgentLoop, policy, server, cfg).run(
            {"temperature": 1.0}, **_outloop_row(image_path)
        )

    out = asyncio.run(go())
    f = out.extra_fields
    if variant == "original":
        assert len(server.calls) == 1 and f["search_status"] == "invalid" and f["n_tool"] == 0
    else:
        assert len(server.calls) == 2 and f["search_status"] == "found"


def test_tool_call_is_parsed_with_special_tokens_kept(policy, image_path):
    """The fork's hermes parser reads the turn decoded with its special tokens: a special token inside the call's
    JSON makes it unreadable (no call, the episode ends), though the text without special tokens would parse."""
    bad = '<think>look</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [40, 30, 200, 150]<|vision_start|>}}</tool_call>'

    def script(n_images, prompt):
        return bad if n_images == 1 else ANSWER % (60, 40, 180, 140)

    server, out = _run_outloop(policy, image_path, script, loop_config(variant="original"))
    assert len(server.calls) == 1 and out.extra_fields["search_status"] == "invalid"


def test_the_judge_sees_the_answer_turn_left_truncated(policy, image_path, openai_server, monkeypatch):
    """The fork's judge reads each vReasoner turn left-truncated to 4096 characters (``maybe_truncate``,
    ``insight_o3_agent_loop.py:340-346``): a ``\\boxed{}`` only in the first part is no answer (c = 0) under
    ``original``; ``paper`` judges the whole turn."""
    from recipe.vsearch.agent_loops import judged_text

    assert judged_text("a" * 10 + "b" * 4096, 4096) == "..." + "b" * 4093
    assert judged_text("short", 4096) == "short" and judged_text("x" * 9, None) == "x" * 9
    base = reasoner_script(n_search=1)

    def long_answer(req, call):
        if req["model"] != JUDGE and sum(m["role"] == "assistant" for m in req["messages"]) == 1:
            from tests.support.openai_server import chat

            return chat("<think>done</think><tool_feedback>helpful</tool_feedback>Answer: \\boxed{42} " + "so " * 2000)
        return base(req, call)

    for variant, correct in (("original", False), ("paper", True)):
        srv = openai_server(long_answer)
        _s, _l, out = run_inloop(policy, image_path, srv, monkeypatch, loop_config(variant=variant))
        assert out.extra_fields["answer_correct"] is correct, variant
