"""The data engine against goldens recorded by running Insight-V's released ``data_generation.py`` and
``data_check.py`` (tests/golden/record_insight_v_goldens.py; tests/golden/README.md "Insight-V goldens"): the
progressive generator's every request (messages, the repairs, the ``Error`` step, the cap) and its final steps, the
tier-1 check's messages and its reading of the judge's reply."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insight_o3.reasoning_data import prompts
from insight_o3.reasoning_data.assessment import check_messages, parse_verdict, passed
from insight_o3.reasoning_data.chain import ChainSession, final_content

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "insight_v.json").read_text(encoding="utf-8"))
GENERATION = GOLDEN["generation"]["cases"]
CHECK = GOLDEN["check"]
IMAGE = {"type": "image", "image": {"path": "p.png", "region": [0, 0, 8, 8], "size": [8, 8]}}


def _normal(messages: list[dict]) -> list[tuple[str, object]]:
    """Messages with every image part as ``<image>`` and text-only content as one string (how a chat template sees
    them: a string and a list of text parts render the same)."""
    out = []
    for m in messages:
        c = m["content"]
        if isinstance(c, list):
            parts = ["<image>" if p["type"] == "image" else p["text"] for p in c]
            c = parts[0] if len(parts) == 1 and parts[0] != "<image>" else parts
        out.append((m["role"], c))
    return out


@pytest.mark.parametrize("case", GENERATION, ids=[c["name"] for c in GENERATION])
def test_generation_requests_match_the_release(case):
    session = ChainSession(case["prompt"], IMAGE)
    replies = list(case["replies"])
    for req in case["requests"]:
        assert not session.done
        assert _normal(session.messages) == _normal(req["messages"])
        assert req["add_generation_prompt"] is True
        session.reply(replies.pop(0), "stop")
    assert session.done
    assert session.requests == case["replies_used"]
    *steps, final = case["steps"]
    assert final[:2] == ["Final Answer", session.final]
    assert session.steps == steps


def test_the_generation_settings_are_the_recorded_ones():
    case = GENERATION[0]
    sampling = case["settings"][1]["sampling"]
    kw = prompts.GENERATION_KWARGS
    assert (kw["temperature"], kw["top_p"], kw["max_tokens"]) == (
        sampling["temperature"],
        sampling["top_p"],
        sampling["max_tokens"],
    )
    assert (
        kw["extra_body"] == {"repetition_penalty": sampling["repetition_penalty"]} and sampling["stop_token_ids"] == []
    )
    image = case["requests"][0]["messages"][1]["content"][0]
    assert (image["min_pixels"], image["max_pixels"]) == (prompts.IMAGE_MIN_PIXELS, prompts.IMAGE_MAX_PIXELS)


def test_the_release_caps_a_chain_at_16_steps_and_quirks_inference():
    endless = next(c for c in GENERATION if c["name"] == "endless_continue")
    assert len(endless["steps"]) == prompts.STEP_CAP + 2  # 16 steps and the final answer
    # the release's inference() extends a list with the generator's growing list at every yield: 137 entries
    assert len(endless["inference_steps"]) == 137


def test_malformed_chains_are_the_ones_the_engine_rejects():
    problems = {}
    for case in GENERATION:
        session = ChainSession(case["prompt"], IMAGE)
        for reply in case["replies"][: case["replies_used"]]:
            session.reply(reply, "stop")
        problems[case["name"]] = session.problem()
    assert problems["three_failures"].startswith("a step failed 3 times: 'content'")
    assert problems["endless_continue"] == "no final_answer after 16 steps (the cap)"
    assert problems["failures_then_cap"] == "no final_answer after 16 steps (the cap)"
    assert problems["empty_content"] == "step 1 has no content"
    assert problems["extra_keys_unicode"] == "the final answer is not JSON with a 'content'"
    ok = {"two_steps", "broken_json_once", "missing_key_then_ok", "not_an_object", "unknown_action"}
    ok |= {"first_step_final", "leading_whitespace", "trailing_text", "content_not_a_string"}
    assert {k for k, v in problems.items() if v is None} == ok


def test_check_messages_and_verdicts_match_the_release():
    settings = CHECK["settings"][1]["sampling"]
    kw = prompts.CHECK_KWARGS
    assert (kw["temperature"], kw["top_p"], kw["max_tokens"], kw["extra_body"]["repetition_penalty"]) == (
        settings["temperature"],
        settings["top_p"],
        settings["max_tokens"],
        settings["repetition_penalty"],
    )
    assert prompts.CHECK_PROMPT == CHECK["prompt"]
    for case in CHECK["cases"]:
        got = check_messages(case["question"], case["ground_truth"], final_content(case["final"]))
        assert got == case["messages"]
        assert parse_verdict(case["judge_reply"]) == case["answer"]
    assert CHECK["bad_count"] == sum(final_content(c["final"]) is None for c in CHECK["cases"])


@pytest.mark.parametrize(
    "verdict, ok",
    [([1], True), ([0], False), ([1, 0], True), ([True], False), (["1"], False), ([2], False), ([], False)],
)
def test_a_chain_passes_on_a_leading_integer_one(verdict, ok):
    assert passed(verdict) is ok


@given(st.text(max_size=300))
def test_any_check_reply_reads_as_the_release_reads_it(text):
    try:
        want = json.loads(text.split("]")[0] + "]")
    except Exception:  # noqa: BLE001 - the release's bare except
        want = [0]
    assert parse_verdict(text) == want
