"""The sans-IO protocol sessions, driven directly (no server): every decision of F.1/F.2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from insight_o3 import prompts
from insight_o3.agents import ReasonerSession, SearcherSession
from insight_o3.agents.records import compact_messages, expand_messages
from insight_o3.agents.searcher_session import failed_locate
from insight_o3.geometry import Frame, pixel_box, smart_resize
from insight_o3.images import ImageStore
from insight_o3.trajectory import message_text

W, H = 700, 500
BUDGET = 200 * 28 * 28  # smaller than the image: the model frame is a real resize


@pytest.fixture
def img(tmp_path):
    rng = np.random.default_rng(0)
    p = tmp_path / "noise.png"
    Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8)).save(p)
    return str(p)


@pytest.fixture
def store():
    s = ImageStore(fmt="PNG")
    yield s
    s.close()


def call(b, name="image_zoom_in_tool"):
    return (
        f'<think>look</think> <tool_call>{{"name": "{name}", "arguments": {{"bbox_2d": {json.dumps(b)}}}}}</tool_call>'
    )


def ans(b):
    return f"<think>done</think> <answer>{json.dumps(b)}</answer>"


def test_searcher_first_turn_layout_and_frame(img, store):
    s = SearcherSession(img, "the red car", store, BUDGET)
    mh, mw = smart_resize(H, W, max_pixels=BUDGET)
    assert s.frame == Frame((0.0, 0.0, float(W), float(H)), (mw, mh))
    assert s.messages[0]["content"][0]["text"] == prompts.VSEARCHER_SYSTEM_PROMPT
    user = s.messages[1]["content"]
    assert user[0]["type"] == "image" and user[0]["image"]["size"] == [mw, mh]
    assert user[1]["text"] == prompts.fill(prompts.VSEARCHER_FIRST_USER_PROMPT, target="the red car")


def test_searcher_tool_call_crop_and_answer(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(call([10, 20, 200, 150]))
    assert not st.done and st.action == "tool_call"
    expected = pixel_box(s.frame.to_original((10, 20, 200, 150)))
    assert tuple(st.crop.region) == tuple(float(v) for v in expected)
    ch, cw = smart_resize(expected[3] - expected[1], expected[2] - expected[0], max_pixels=BUDGET)
    assert tuple(st.crop.size) == (cw, ch)
    resp = s.messages[-1]
    assert resp["role"] == "user"
    assert [p.get("text") for p in resp["content"]] == [
        "<tool_response>",
        None,
        "</tool_response>\n",
        prompts.VSEARCHER_TOOL_RESPONSE_PROMPT,
    ]
    assert s.pil(st.crop).size == (cw, ch)
    st = s.step(ans([10, 20, 200, 150]))
    r = s.result()
    assert st.done and r.status == "found" and r.format_ok and r.n_tool_calls == 1
    assert r.box_original == pytest.approx(s.frame.to_original((10, 20, 200, 150)))


def test_searcher_limit_text_then_tool_call_is_invalid(img, store):
    s = SearcherSession(img, "x", store, BUDGET, max_tool_calls=6)
    for i in range(6):
        st = s.step(call([0, 0, 100 + i, 100]))
        assert st.action == "tool_call"
    assert s.messages[-1]["content"][-1]["text"] == prompts.VSEARCHER_LIMIT_PROMPT
    assert all(m["content"][-1]["text"] == prompts.VSEARCHER_TOOL_RESPONSE_PROMPT for m in s.messages[3:-1:2])
    st = s.step(call([0, 0, 50, 50]))
    r = s.result()
    assert st.done and r.status == "invalid" and "limit" in r.error and not r.format_ok and r.n_tool_calls == 6
    assert r.n_turns == 7


@pytest.mark.parametrize(
    "reply,why",
    [
        ("<think>a</think><tool_call>{not json</tool_call>", "JSON"),
        (call([1, 2, 3, 4], name="other_tool"), "unknown tool"),
        (call([300, 300, 10, 10]), "inverted"),
        (call([10, 10, 10, 90]), "inverted"),
        (call([10, 10, 10.5, 90]), "degenerate"),
        (
            '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [NaN, 1, 5, 9]}}</tool_call>',
            "non-finite",
        ),
        (call([1, 2, 3]), "4 numbers"),
        (call(["a", 2, 3, 4]), "non-numeric"),
        (call([5000, 5000, 6000, 6000]), "outside"),
        ("I think it is somewhere", "neither"),
        (ans([40, 40, 20, 60]), "inverted"),
    ],
)
def test_searcher_bad_turns_end_invalid(img, store, reply, why):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(reply)
    r = s.result()
    assert st.done and r.status == "invalid" and why in r.error and not r.format_ok and r.box_original is None


def test_searcher_out_of_range_box_is_clamped_and_tiny_box_grown(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(call([-50, -50, 10000, 10000]))
    assert tuple(st.crop.region) == (0.0, 0.0, float(W), float(H))
    st = s.step(call([100, 100, 103, 300]))  # 3 px wide in the model frame
    x1, y1, x2, y2 = st.crop.region
    assert (
        x2 - x1 >= 28
        and y2 - y1 >= 28
        and (x1 + x2) / 2 == pytest.approx(s.frame.to_original((101.5, 0, 0, 0))[0], abs=1)
    )
    s.step(ans([-5, -5, 5000, 5000]))
    r = s.result()
    assert r.status == "found" and r.box_original == (0.0, 0.0, W, H)


def test_searcher_not_found_and_simple_prompt(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([0, 0, 0, 0]))
    assert s.result().status == "not_found" and s.result().format_ok
    s = SearcherSession(img, "the sign", store, BUDGET, prompt="simple")
    assert s.messages[0]["content"][0]["text"] == prompts.VSEARCHER_SIMPLE_SYSTEM_PROMPT
    assert s.messages[1]["content"][1]["type"] == "image"
    s.step("The box is [10, 10, 50, 60].")
    assert s.result().status == "found" and s.result().format_ok
    s = SearcherSession(img, "the sign", store, BUDGET, prompt="simple")
    s.step("cannot find it")
    assert s.result().status == "invalid"


def test_searcher_format_ok_needs_think_and_no_truncation(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step("<answer>[1, 1, 50, 50]</answer>")
    assert s.result().status == "found" and not s.result().format_ok
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([1, 1, 50, 50]), finish_reason="length")
    assert not s.result().format_ok
    with pytest.raises(RuntimeError):
        s.step(ans([1, 1, 50, 50]))


def _not_found(store, img):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([0, 0, 0, 0]))
    return s.result()


def test_reasoner_vsearcher_failure_loses_the_episode(img, store):
    r = ReasonerSession(img, "Q", store, None)
    r.step("<tool_call>region_description={a}</tool_call>")
    r.provide_search_result(failed_locate("a", "boom"))
    assert r.status == "failed" and "boom" in r.error and not r.has_answer


def _found(store, img, box):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans(list(s.frame.from_original(box))))
    return s.result()


def test_reasoner_search_answer_and_feedback_train_mode(img, store):
    r = ReasonerSession(img, "What color?", store, None, mode="train")
    assert message_text(r.messages[0]) == prompts.VREASONER_TRAIN_SYSTEM_PROMPT
    assert r.messages[1]["content"][1]["text"] == "What color?" and r.messages[1]["content"][0]["type"] == "image"
    st = r.step("<think>a</think><tool_feedback>NA</tool_feedback><tool_call>region_description={the car}</tool_call>")
    assert st.action == "search" and st.description == "the car"
    crop = r.provide_search_result(_found(store, img, (100, 100, 300, 200)))
    assert tuple(crop.region) == (100.0, 100.0, 300.0, 200.0) and tuple(crop.size) == (200, 100)
    assert r.messages[-1]["content"][0]["type"] == "image"
    assert message_text(r.messages[-1]) == prompts.VREASONER_TRAIN_CONTINUE_PROMPT
    # missing feedback in train mode -> format retry
    st = r.step("<think>b</think>\\boxed{red}")
    assert st.action == "retry" and message_text(r.messages[-1]) == prompts.VREASONER_TRAIN_FORMAT_RETRY_PROMPT
    st = r.step("<think>b</think><tool_feedback>helpful</tool_feedback>Answer: \\boxed{red}")
    assert st.action == "answer" and st.answer == "red" and r.feedback == ["helpful"] and r.n_format_retries == 1


def test_reasoner_not_found_limit_and_stop(img, store):
    r = ReasonerSession(img, "Q", store, None, mode="infer", max_search_calls=2)
    r.step("<tool_call>region_description={a}</tool_call>")
    r.provide_search_result(_not_found(store, img))
    assert message_text(r.messages[-1]) == prompts.VREASONER_INFER_NOT_FOUND_PROMPT
    r.step("<tool_call>region_description={b}</tool_call>")
    r.provide_search_result(_found(store, img, (0, 0, 50, 50)))
    assert r.messages[-1]["content"][0]["type"] == "image"
    assert message_text(r.messages[-1]) == prompts.VREASONER_INFER_LIMIT_PROMPT
    st = r.step("<tool_call>region_description={c}</tool_call>")
    assert st.action == "stop" and r.status == "search_after_limit" and r.n_search_calls == 2
    assert r.n_search_not_found == 1


def test_reasoner_format_retries_are_bounded(img, store):
    r = ReasonerSession(img, "Q", store, None, max_format_retries=2)  # 3 replies per round
    assert r.step("hmm").action == "retry"
    assert message_text(r.messages[-1]) == prompts.VREASONER_INFER_FORMAT_RETRY_PROMPT
    assert r.step("hmm").action == "retry"
    st = r.step("hmm")
    assert st.action == "stop" and r.status == "format_failed" and r.n_turns == 3


def test_records_compact_and_expand_round_trip(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(call([10, 20, 200, 150]))
    s.step(ans([10, 20, 200, 150]))
    rec = s.result().to_record()
    dumped = json.dumps(rec)
    assert prompts.VSEARCHER_SYSTEM_PROMPT[:80] not in dumped and "VSEARCHER_SYSTEM_PROMPT" in dumped
    assert expand_messages(rec["trajectory"]) == expand_messages(compact_messages(s.messages))
    assert message_text(expand_messages(rec["trajectory"])[0]) == prompts.VSEARCHER_SYSTEM_PROMPT
