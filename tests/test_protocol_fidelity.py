"""Each protocol rule taken from the original release (docs/fidelity.md), checked on its own:
answer extraction, the vReasoner's turn parsing and rounds, the judge flows, image sizing and
encoding, the GPT image budget, the benchmark layout."""

from __future__ import annotations

import asyncio
import base64
import io
import math
import os

import numpy as np
import openai
import pytest
from PIL import Image

from insight_o3.agents import ReasonerSession, SearcherSession
from insight_o3.agents.reasoner_session import crop_region, vreasoner_resize
from insight_o3.agents.searcher_session import LocateResult
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.evaluation.benchmarks import BENCHMARKS, resolve_layout
from insight_o3.evaluation.judge import AnswerJudge, in_loop_check
from insight_o3.imaging.geometry import api_image_max_pixels, fit_max_pixels, upscale_small
from insight_o3.imaging.images import ImageStore, Resize, encode_pil
from insight_o3.imaging.view_ops import Resample
from insight_o3.protocol import prompts
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.attempt_stats import InSightO3Stats
from insight_o3.protocol.parsing import extract_answer_span, extract_verify_span, parse_reasoner_turn
from insight_o3.protocol.questions import insight_o3_question
from insight_o3.protocol.sample import Sample
from insight_o3.protocol.trajectory import message_text
from insight_o3.scripts import evaluate
from tests.support.openai_server import chat, error, request_text

W, H = 700, 500


@pytest.fixture
def img(tmp_path):
    p = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(3).integers(0, 256, (H, W, 3), dtype=np.uint8)).save(p)
    return str(p)


@pytest.fixture
def store():
    s = ImageStore(fmt="PNG")
    yield s
    s.close()


# ----------------------------------------------------------------------------- answer spans
def test_evaluation_span_is_the_released_rule():
    assert extract_answer_span("<answer> C </answer>") == "C"
    assert extract_answer_span("<answer>a</answer> then <answer>b</answer>") == "b"  # the last tag
    assert extract_answer_span("so \\boxed{1} or \\boxed{ 2 }") == "2"  # the last box
    assert extract_answer_span("<answer>x \\boxed{B} y</answer> \\boxed{C}") == "B"  # box inside the tag
    assert extract_answer_span("A\n") == "A\n"  # no tag: text as is
    assert extract_answer_span("<ANSWER>C</ANSWER>") == "<ANSWER>C</ANSWER>"  # tags are case-sensitive
    assert extract_answer_span("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"  # deviation: balanced


def test_in_loop_span_is_the_forks_rule():
    assert extract_verify_span("\\boxed{1} and later \\boxed{2}") == "1"  # the first box
    assert extract_verify_span("<answer> B </answer> <answer>C</answer>") == "B"  # else the first tag
    assert extract_verify_span("\\boxed{A} <answer>B</answer>") == "A"
    assert extract_verify_span("no span") is None and extract_verify_span("\\boxed{ }") is None
    assert extract_verify_span("\\boxed{ B <answer>A</answer>") == "B <answer>A</answer>"  # unclosed: the rest


# ----------------------------------------------------------------------------- vReasoner turns
def test_reasoner_turn_parsing_follows_the_fork():
    t = parse_reasoner_turn("<think>maybe <tool_call>region_description={the sky}</tool_call></think>")
    assert t.action == "search" and t.description == "the sky"  # <think> is not skipped
    t = parse_reasoner_turn("<tool_call>region_description={a}</tool_call> \\boxed{B}")
    assert t.action == "search"  # a call wins over an answer
    assert parse_reasoner_turn("<tool_call> region_description=the sky </tool_call>").action == "invalid"  # no braces
    assert parse_reasoner_turn("<tool_call>region_description={}</tool_call>").description == ""
    assert parse_reasoner_turn("Answer: \\boxed{\\text{B}}").answer == "\\text{B}"
    # training: NA is valid only before any search result, helpful/unhelpful only after one
    na = "<tool_feedback>NA</tool_feedback><tool_call>region_description={x}</tool_call>"
    assert parse_reasoner_turn(na, require_feedback=True, first_round=True).action == "search"
    assert parse_reasoner_turn(na, require_feedback=True, first_round=False).action == "invalid"
    ok = "<tool_feedback> helpful </tool_feedback>\\boxed{A}"
    assert parse_reasoner_turn(ok, require_feedback=True, first_round=False).feedback == "helpful"
    assert (
        parse_reasoner_turn(ok.replace("helpful", "Helpful"), require_feedback=True, first_round=False).action
        == "invalid"
    )


def _result(status, box_model=None, model_size=(1400, 1000)) -> LocateResult:
    return LocateResult(status, None, box_model, 0, True, [], 1, None, "d", model_size=model_size)


def test_reasoner_rounds_retries_and_last_round(img, store):
    r = ReasonerSession(img, "Q", store, None, max_search_calls=2)
    assert r.max_round_attempts == 5  # the fork's validation setting
    for _ in range(4):
        assert r.step("thinking").action == "retry"
    assert message_text(r.messages[-1]) == prompts.VREASONER_FORMAT_RETRY_PROMPT
    assert r.step("<tool_call>region_description={a}</tool_call>").action == "search"  # 5th reply of round 1
    crop = r.provide_search_result(_result("found", (200, 200, 600, 500)))
    assert crop is not None and r.messages[-1]["content"][0]["type"] == "image"
    for _ in range(4):  # a new round: five replies again
        assert r.step("thinking").action == "retry"
    r.step("<tool_call>region_description={b}</tool_call>")
    assert r.provide_search_result(_result("not_found")) is None
    # two calls made: the last round's text, without an image since nothing was found
    assert message_text(r.messages[-1]) == prompts.VREASONER_LIMIT_PROMPT
    assert not any(p["type"] == "image" for p in r.messages[-1]["content"])
    r.step("still thinking")
    assert message_text(r.messages[-1]) == prompts.VREASONER_LIMIT_PROMPT  # retries repeat it
    st = r.step("<tool_call>region_description={c}</tool_call>")
    assert st.action == "stop" and r.status == "search_after_limit" and not r.has_answer
    assert ReasonerSession(img, "Q", store, None, mode="train").max_round_attempts == 3


def test_last_round_retry_sends_the_crop_again(img, store):
    r = ReasonerSession(img, "Q", store, None, max_search_calls=1)
    r.step("<tool_call>region_description={a}</tool_call>")
    crop = r.provide_search_result(_result("found", (10, 10, 700, 600)))
    assert crop is not None and r.messages[-1]["content"][0]["image"]["region"] == list(crop.region)
    assert message_text(r.messages[-1]) == prompts.VREASONER_LIMIT_PROMPT  # the only search was the last
    r.step("no format")
    last = r.messages[-1]["content"]
    assert last[0]["type"] == "image" and last[0]["image"]["region"] == list(crop.region)
    assert message_text(r.messages[-1]) == prompts.VREASONER_LIMIT_PROMPT


def test_tool_call_turns_count_towards_the_limit_as_in_the_fork(img, store):
    """The fork counts assistant turns containing "<tool_call>", parsable or not."""
    r = ReasonerSession(img, "Q", store, None, max_search_calls=2)
    r.step("<tool_call>oops</tool_call>")  # no region_description: a retry
    r.step("<tool_call>region_description={a}</tool_call>")
    r.provide_search_result(_result("not_found"))
    assert r.n_search_calls == 1 and message_text(r.messages[-1]) == prompts.VREASONER_LIMIT_PROMPT


def test_format_retries_run_out_with_no_answer(img, store):
    r = ReasonerSession(img, "Q", store, None, max_format_retries=1)
    r.step("a")
    st = r.step("b")
    assert st.action == "stop" and r.status == "format_failed" and not r.has_answer


def test_invalid_vsearcher_answer_ends_the_episode(img, store):
    r = ReasonerSession(img, "Q", store, None)
    r.step("<tool_call>region_description={a}</tool_call>")
    r.provide_search_result(_result("invalid"))
    assert r.done and r.status == "search_invalid" and not r.has_answer


def test_crop_box_rounding_and_clamping():
    # model frame 1400x1000 of a 700x500 image: round(v * 700 / 1400)
    assert crop_region(_result("found", (201, 301, 1001, 803)), (700, 500)) == (100, 150, 500, 402)
    assert crop_region(_result("found", (1300, 900, 1500, 1100)), (700, 500)) == (650, 450, 700, 500)
    assert crop_region(_result("found", (1500, 900, 1600, 1000)), (700, 500)) is None  # no area in the image


def test_small_crops_are_enlarged_like_the_fork():
    assert upscale_small((30, 221), 56, 112 * 112) == [(56, 412)]  # short side to 56
    assert upscale_small((60, 70), 56, 112 * 112) == [(103, 120)]  # area to 112x112 (int)
    assert upscale_small((20, 50), 56, 112 * 112) == [(56, 140), (70, 177)]  # both steps, in order
    assert upscale_small((200, 100), 56, 112 * 112) == []
    r = vreasoner_resize(1280 * 1280)
    assert r.target((30, 221), crop=True) == (56, 412) and r.target((30, 221)) == (30, 221)


def test_whole_image_budget_is_the_originals_floor():
    rng = np.random.default_rng(0)
    for _ in range(500):
        w, h = int(rng.integers(1, 9000)), int(rng.integers(1, 9000))
        budget = int(rng.integers(1000, 20_000_000))
        if w * h <= budget:
            assert fit_max_pixels((w, h), budget) == (w, h)
            continue
        ratio = (budget / (w * h)) ** 0.5  # maybe_resize_image
        assert fit_max_pixels((w, h), budget) == (max(1, math.floor(w * ratio)), max(1, math.floor(h * ratio)))


def test_views_are_lanczos_and_jpeg_at_pils_default(tmp_path):
    p = tmp_path / "big.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (900, 1200, 3), dtype=np.uint8)).save(p)
    store = ImageStore()
    try:
        enc = store.get(str(p), Resize.fit(500_000))
        sent = Image.open(io.BytesIO(base64.b64decode(enc.data_url.split(",", 1)[1])))
        buf = io.BytesIO()
        Image.open(p).convert("RGB").resize(enc.ref.size, Image.LANCZOS).save(buf, format="JPEG")
        assert enc.data_url.split(",", 1)[1] == base64.b64encode(buf.getvalue()).decode()
        assert sent.quantization == Image.open(buf).quantization
        view, _ = store.view(str(p), Resize.qwen(500_000))
        ref = Image.open(p).convert("RGB").resize(view.size, Image.BICUBIC)  # qwen_vl_utils' default
        assert np.array_equal(np.asarray(view), np.asarray(ref))
    finally:
        store.close()
    default = Image.open(io.BytesIO(base64.b64decode(encode_pil(Image.new("RGB", (8, 8))).split(",")[1])))
    buf = io.BytesIO()
    Image.new("RGB", (8, 8)).save(buf, format="JPEG", quality=75)
    assert default.quantization == Image.open(buf).quantization


# ----------------------------------------------------------------------------- judge flows
def _sample(answer="B", options="A. one\nB. two"):
    return Sample(0, "q", "i.png", "i.png", "[q] Which?", options, answer)


def _judge(openai_server, reply="<correct>", flow="verify"):
    srv = openai_server(lambda r, c: chat(reply))
    return srv, AnswerJudge(
        make_client(Endpoint(api_key="k", base_url=srv.base_url, timeout=5, max_retries=0)), "judge-m", flow=flow
    )


@pytest.mark.parametrize("status", ["format_failed", "search_after_limit", "search_invalid"])
def test_episodes_without_an_answer_are_not_judged(openai_server, status):
    srv, judge = _judge(openai_server)
    stats = InSightO3Stats(status=status, protocol_error=None)
    v = asyncio.run(judge.check(_sample(), Attempt("\\boxed{B}", "stop", stats=stats)))
    assert v.status == "invalid" and not v.has_answer and srv.count == 0
    assert v.fail_reason == f"no answer: {status}"


def test_in_loop_check_requests_and_rules(openai_server):
    srv, judge = _judge(openai_server, "<correct> it matches")

    async def go():
        return [
            await judge.check(_sample(), Attempt("so \\boxed{B}", "length")),  # exact: no call, no finish check
            await judge.check(_sample(), Attempt("nothing boxed", "stop")),  # no span: wrong, no call
            await judge.check(_sample(), Attempt("\\boxed{B. two}", "stop")),
        ]  # judged

    exact, none, judged = asyncio.run(go())
    assert (exact.status, exact.method) == ("correct", "rule") and (none.status, none.has_answer) == ("wrong", False)
    assert (judged.status, judged.extracted_answer, judged.method) == ("correct", "B. two", "judge")
    assert srv.count == 1
    req = srv.requests[0]
    assert req["max_tokens"] == 2048 and "max_completion_tokens" not in req and req["model"] == "judge-m"
    assert req["messages"] == [
        {
            "role": "user",
            "content": [
                {
                    "type": "text",
                    "text": prompts.format_judge_prompt(
                        prompts.QA_VERIFY_PROMPT,
                        question="[q] Which?\nA. one\nB. two",
                        gt_answer="B",
                        model_answer="B. two",
                    ),
                }
            ],
        }
    ]


def test_in_loop_check_is_a_public_function(openai_server):
    """The same check the training recipe can call (the fork's compute_accuracy_reward)."""
    srv = openai_server(lambda r, c: chat("I think <wrong>" if "GT Answer: 7" in request_text(r) else "<correct>"))
    client = make_client(Endpoint(api_key="k", base_url=srv.base_url, timeout=5, max_retries=0))

    async def go():
        try:
            return [
                await in_loop_check(client, "j", "How many?", "<answer>seven</answer>", "7"),
                await in_loop_check(client, "j", "Color?", "\\boxed{red}", "Red"),
            ]
        finally:
            await client.close()

    seven, red = asyncio.run(go())
    assert seven.status == "wrong" and red.status == "correct" and srv.count == 2
    bad = openai_server(lambda r, c: error(400, "no"))
    bad_client = make_client(Endpoint(api_key="k", base_url=bad.base_url, timeout=5, max_retries=0))
    with pytest.raises(openai.BadRequestError):
        asyncio.run(in_loop_check(bad_client, "j", "Q", "\\boxed{x}", "y"))


def test_insight_o3_question_text():
    s = _sample(options="A. one\\nB. two")  # a literal backslash-n, as some converted files hold
    assert insight_o3_question(s) == "[q] Which?\nA. one\nB. two"
    assert insight_o3_question(_sample(options=None)) == "[q] Which?"


# ----------------------------------------------------------------------------- budgets and layout
@pytest.mark.parametrize(
    "model,budget",
    [
        ("gpt-5-mini", 1280 * 1280),
        ("openai/gpt-5-mini", 1280 * 1280),
        ("GPT-4o", 1280 * 1280),
        ("azure/gpt-4.1-mini", 1280 * 1280),
        ("gemini-2.5-flash", 3500 * 3500),
        ("Qwen/Qwen3-VL-8B-Instruct", 3500 * 3500),
    ],
)
def test_image_budget_by_model_name(model, budget):
    assert api_image_max_pixels(model) == budget
    assert evaluate.parse_args(["--benchmark", "vstar", "--model", model]).img_max_pixels == budget


def test_original_layout_is_the_default_and_the_renamed_one_an_alias(tmp_path, monkeypatch):
    assert {n: (b.ann_file, b.img_dir) for n, b in BENCHMARKS.items()} == {
        "o3_bench": ("data/O3-Bench/test/metadata.jsonl", "data/O3-Bench/test"),
        "vstar": ("data/vstar_bench/vstar_bench.jsonl", "data/vstar_bench"),
        "hr_bench_4k": ("data/HR-Bench/hrbench_4k.jsonl", "data/HR-Bench/images_4k"),
        "treebench": ("data/TreeBench/treebench.jsonl", "data/TreeBench/images"),
        "visual_probe_hard": ("data/VisualProbe_Hard/visual_probe_hard.jsonl", "data"),
        "mme_realworld_lite": ("data/MME-RealWorld-Lite/MME_RealWorld_Lite.jsonl", "data/MME-RealWorld-Lite/imgs"),
    }
    assert BENCHMARKS["visual_probe_hard"].hub == "Mini-o3/VisualProbe_Hard"  # val.json + data/*.jpg
    monkeypatch.chdir(tmp_path)
    os.makedirs("data/VStar/images")
    open("data/VStar/vstar_bench.jsonl", "w").close()
    a = evaluate.parse_args(["--benchmark", "vstar", "--model", "m"])
    assert (a.ann_file, a.img_dir) == ("data/VStar/vstar_bench.jsonl", "data/VStar/images")  # the alias
    os.makedirs("data/vstar_bench")
    open("data/vstar_bench/vstar_bench.jsonl", "w").close()
    assert resolve_layout("vstar") == BENCHMARKS["vstar"].layouts[0]  # the original wins


def test_searcher_messages_use_the_forks_layout(img, store):
    s = SearcherSession(img, "the red car", store, 200 * 28 * 28)
    user = s.messages[1]["content"]
    assert user[0]["type"] == "image" and user[1]["text"].startswith(
        "\nLocate the red car.\nThink first, call **image_zoom_in_tool** if needed"
    )
    assert s.resize.jpeg_quality == 90 and s.resize.resample == Resample.BICUBIC
