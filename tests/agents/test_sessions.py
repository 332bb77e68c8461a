"""The sans-IO protocol sessions, driven directly (no server): every decision of F.1/F.2."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from insight_o3.agents import ReasonerSession, SearcherSession
from insight_o3.agents.records import compact_messages, expand_messages
from insight_o3.agents.searcher_session import SimpleSearcherSession, failed_locate
from insight_o3.imaging.geometry import Frame, pixel_box, smart_resize
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol import prompts
from insight_o3.protocol.trajectory import message_text

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


def _fork_crop(s, box):
    """The zoom-in tool's crop (the fork's image_zoom_in_tool.py, worked by hand): the model-frame box scaled to
    the tool's image (the original smart_resize-d with qwen's defaults), PIL-rounded, shown smart_resize-d with
    min_pixels 28*28; returned as (region in original pixels, shown size)."""
    th, tw = smart_resize(H, W)  # qwen_vl_utils.fetch_image defaults
    fw, fh = s.frame.size
    x0, y0, x1, y1 = (round(v * t / f) for v, t, f in zip(box, (tw, th, tw, th), (fw, fh, fw, fh)))
    nh, nw = smart_resize(y1 - y0, x1 - x0, min_pixels=28 * 28, max_pixels=BUDGET)
    region = pixel_box((x0 * W / tw, y0 * H / th, x1 * W / tw, y1 * H / th))
    return tuple(float(v) for v in region), (nw, nh)


def test_searcher_tool_call_crop_and_answer(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(call([10, 20, 200, 150]))
    assert not st.done and st.action == "tool_call"
    region, shown = _fork_crop(s, (10, 20, 200, 150))
    assert tuple(st.crop.region) == region and tuple(st.crop.size) == shown
    resp = s.messages[-1]
    assert resp["role"] == "user"
    assert [p.get("text") for p in resp["content"]] == [
        "<tool_response>",
        None,
        "</tool_response>\n",
        prompts.VSEARCHER_TOOL_RESPONSE_PROMPT,
    ]
    assert s.pil(st.crop).size == shown
    st = s.step(ans([10, 20, 200, 150]))
    r = s.result()
    assert st.done and r.status == "found" and r.format_ok and r.n_tool_calls == 1 == r.n_valid_tool_calls
    # resize_bbox: round(v * W / w) per coordinate, then clamped
    fw, fh = s.frame.size
    want = tuple(float(round(v * t / f)) for v, t, f in zip((10, 20, 200, 150), (W, H, W, H), (fw, fh, fw, fh)))
    assert r.box_original == want and r.box_model == (10.0, 20.0, 200.0, 150.0) and r.tool_boxes == [[10, 20, 200, 150]]


def test_searcher_limit_text_then_last_turn(img, store):
    s = SearcherSession(img, "x", store, BUDGET, max_tool_calls=6)
    for i in range(6):
        st = s.step(call([0, 0, 100 + i, 100]))
        assert st.action == "tool_call"
    assert s.messages[-1]["content"][-1]["text"] == prompts.VSEARCHER_LIMIT_PROMPT
    assert all(m["content"][-1]["text"] == prompts.VSEARCHER_TOOL_RESPONSE_PROMPT for m in s.messages[3:-1:2])
    # after 6 tool responses the 7th turn is the last (max_user_turns 6): a tool call there is not run
    st = s.step(call([0, 0, 50, 50]))
    r = s.result()
    assert st.done and r.status == "invalid" and "no answer" in r.error and not r.format_ok and r.n_tool_calls == 6
    assert r.n_turns == 7 and len(s.messages) == 2 + 13


def test_searcher_tool_errors_count_as_tool_turns(img, store):
    s = SearcherSession(img, "x", store, BUDGET, max_tool_calls=2)
    assert s.step(call([300, 300, 10, 10])).action == "tool_error"
    # an error response adds no image: the reminder stays, the limit text waits for a 2nd crop that never comes
    assert message_text(s.messages[-1]).endswith(prompts.VSEARCHER_TOOL_RESPONSE_PROMPT)
    assert s.step(call([10, 10, 200, 200])).action == "tool_call"
    st = s.step(ans([10, 10, 200, 200]))  # 2 tool responses: this is the last turn anyway
    r = s.result()
    assert st.done and r.status == "found" and r.n_tool_calls == 1 and not r.format_ok  # the inverted box


@pytest.mark.parametrize(
    "reply,text",
    [
        (
            call([1, 2, 3, 4], name="other_tool"),
            "Error when executing tool: 'other_tool'",
        ),
        (
            call([300, 300, 10, 10]),
            "Error: The specified bounding box [300, 300, 10, 10] is invalid or results in a crop smaller than the "
            "minimum size of 28x28.",
        ),
        (call([10, 10, 10, 90]), "Error: The specified bounding box [10, 10, 10, 90] is invalid"),
        (call([1, 2, 3]), "Error: bbox_2d parameter is missing or not a list of 4 numbers."),
        (call([]), "Error: bbox_2d parameter is missing or not a list of 4 numbers."),
        (call(["a", 2, 3, 4]), "Error processing image zoom-in: can't multiply sequence by non-int of type 'float'"),
        (call([5000, 5000, 6000, 6000]), "Error: The specified bounding box [5000, 5000, 6000, 6000] is invalid"),
        (
            '<think>a</think><tool_call>{"name": "image_zoom_in_tool", "arguments": [1, 2]}</tool_call>',
            "Error when executing tool: 'list' object has no attribute 'get'",
        ),
    ],
)
def test_searcher_unusable_box_gets_the_tools_error_text_and_goes_on(img, store, reply, text):
    """The fork's zoom-in tool answers an unusable call with its error text; the model goes on."""
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(reply)
    assert not st.done and st.action == "tool_error" and st.crop is None and text in st.error
    assert message_text(s.messages[-1]) == (
        "<tool_response>" + st.error + "</tool_response>\n" + prompts.VSEARCHER_TOOL_RESPONSE_PROMPT
    )
    s.step(ans([10, 10, 50, 50]))
    r = s.result()
    assert r.status == "found" and not r.format_ok and r.n_tool_calls == 0  # the tool call broke the format


@pytest.mark.parametrize(
    "reply,why",
    [
        ("<think>a</think><tool_call>{not json</tool_call>", "not JSON"),
        ("I think it is somewhere", "no answer"),
        (ans([40, 40, 20, 60]), "not [x1, y1, x2, y2]"),
        (ans([-5, 1, 20, 60]), "not [x1, y1, x2, y2]"),
        (ans([1.5, 1, 20, 60]), "not [x1, y1, x2, y2]"),
    ],
)
def test_searcher_turns_without_a_call_or_box_end_invalid(img, store, reply, why):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(reply)
    r = s.result()
    assert st.done and r.status == "invalid" and why in r.error and not r.format_ok and r.box_original is None


def test_searcher_out_of_range_box_is_clamped_and_tiny_box_grown_keeping_its_aspect(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    st = s.step(call([-50, -50, 10000, 10000]))  # the tool clamps it (r_format does not accept it)
    assert tuple(st.crop.region) == (0.0, 0.0, float(W), float(H))
    st = s.step(call([100, 100, 110, 105]))  # 10 x 5 in the model frame: grown to a 2:1 box, short side >= 28
    x1, y1, x2, y2 = st.crop.region
    assert y2 - y1 >= 28 and (x2 - x1) / (y2 - y1) == pytest.approx(2.0, rel=0.1)
    s.step(ans([5, 5, 5000, 5000]))
    r = s.result()
    assert r.status == "found" and r.box_original[2:] == (W, H) and not r.format_ok


def test_searcher_not_found_and_simple_prompt(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([0, 0, 0, 0]))
    assert s.result().status == "not_found" and s.result().format_ok
    s = SimpleSearcherSession(img, "the sign", store, BUDGET)
    assert s.messages[0]["content"][0]["text"] == prompts.VSEARCHER_SIMPLE_SYSTEM_PROMPT
    assert s.messages[1]["content"][1]["type"] == "image"
    s.step("The box is [10, 10, 50, 60].")
    assert s.result().status == "found" and s.result().format_ok
    s = SimpleSearcherSession(img, "the sign", store, BUDGET)
    s.step("cannot find it")
    assert s.result().status == "invalid"


def test_searcher_format_verdict_is_the_forks(img, store):
    s = SearcherSession(img, "x", store, BUDGET)
    s.step("<answer>[1, 1, 50, 50]</answer>")  # no <think>: found (the box parses), r_format 0
    assert s.result().status == "found" and not s.result().format_ok
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([1, 1, 50, 50]) + " Done.")  # text after the answer
    assert s.result().status == "found" and not s.result().format_ok
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([1, 1, 50, 50]), finish_reason="length")  # judged by its text, as the fork does
    assert s.result().format_ok
    with pytest.raises(RuntimeError):
        s.step(ans([1, 1, 50, 50]))
    # a sub-agent (in-loop call) passes r_format with any answer text
    s = SearcherSession(img, "x", store, BUDGET)
    s.step("<think>t</think><answer>top left</answer>")
    r = s.result()
    assert r.status == "invalid" and not r.format_ok and r.format_ok_inloop


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
    """A found result whose answer maps back to ``box`` (original pixels) as closely as whole model pixels allow;
    returns the result (its ``box_original`` is what the vReasoner's crop is cut from)."""
    s = SearcherSession(img, "x", store, BUDGET)
    s.step(ans([round(v) for v in s.frame.from_original(box)]))
    return s.result()


def test_reasoner_search_answer_and_feedback_train_mode(img, store):
    r = ReasonerSession(img, "What color?", store, None, mode="train")
    assert message_text(r.messages[0]) == prompts.VREASONER_TRAIN_SYSTEM_PROMPT
    assert r.messages[1]["content"][1]["text"] == "What color?" and r.messages[1]["content"][0]["type"] == "image"
    st = r.step("<think>a</think><tool_feedback>NA</tool_feedback><tool_call>region_description={the car}</tool_call>")
    assert st.action == "search" and st.description == "the car"
    found = _found(store, img, (100, 100, 300, 200))
    crop = r.provide_search_result(found)
    x1, y1, x2, y2 = found.box_original  # resize_bbox of the whole-pixel answer
    assert tuple(crop.region) == found.box_original and tuple(crop.size) == (x2 - x1, y2 - y1)
    assert found.box_original == pytest.approx((100, 100, 300, 200), abs=2)
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
