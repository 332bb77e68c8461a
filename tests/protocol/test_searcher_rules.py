"""``insight_o3.protocol.searcher_rules`` against the authors' verl fork (926d137): each rule on cases whose expected values
were recorded by running the fork's own functions (``tests/golden/searcher_rules.json``, recorded by
``tests/golden/record_searcher_rules.py``), plus properties the fork's code implies. Whole episodes through the
session and the reward are compared in ``tests/recipe/test_training_goldens.py``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from insight_o3.imaging.geometry import smart_resize
from insight_o3.protocol import searcher_rules as R

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "searcher_rules.json").read_text())


def _pid(x) -> str:
    return json.dumps(x)[:60]


@pytest.mark.parametrize("case", GOLDEN["parse_response"], ids=_pid)
def test_parse_response(case):
    text, want = case
    try:
        got = R.parse_response(text, ["think", "tool_call"], ["answer"])
    except R.FormatError:
        got = None
    assert got == want


@pytest.mark.parametrize("case", GOLDEN["parse_bbox"], ids=_pid)
def test_parse_answer_box(case):
    text, want = case
    got = R.parse_answer_box(text)
    assert (list(got) if got is not None else None) == want


@pytest.mark.parametrize("case", GOLDEN["resize_bbox"], ids=_pid)
def test_resize_bbox_rounds_like_the_fork(case):
    box, source, target, want = case
    got = R.resize_bbox(box, source, target)
    if want is None:  # the fork's validate_bbox raises: rounding collapsed a side; here the box is empty
        o = R.to_original_box(box, source, target)
        assert not (o[0] < o[2] and o[1] < o[3])
    else:
        assert list(got) == want


def test_to_original_box_clamps_after_rounding():
    assert R.to_original_box((5, 5, 500, 60), (100, 80), (200, 160)) == (10, 10, 200, 120)
    assert R.resize_bbox((1, 1, 3, 3), (4, 4), (6, 6)) == (2, 2, 4, 4)  # round(1.5) = 2, round(4.5) = 4 (to even)


@pytest.mark.parametrize("case", GOLDEN["zoom_box"], ids=_pid)
def test_zoom_box_is_the_tools(case):
    box, iw, ih, rw, rh, want = case
    assert R.zoom_box(list(box), iw, ih, rw, rh) == want


@pytest.mark.parametrize("case", GOLDEN["format_verdict"]["cases"], ids=_pid)
def test_format_verdict_is_compute_format_reward(case):
    solution, *fork = case
    frame = GOLDEN["format_verdict"]["frame_wh"]
    for inloop, (fmt, boxes, answer, n_valid) in zip((False, True), fork):
        v = R.format_verdict(R.split_responses(solution), frame, answer_must_parse=not inloop)
        assert v.ok == bool(fmt), (inloop, v.error)
        assert [list(b) for b in v.boxes] == boxes
        if v.ok:
            assert (list(v.answer) if isinstance(v.answer, tuple) else v.answer) == answer
        assert R.n_valid_tool_calls(v, solution) == n_valid


def test_final_answer_box_is_the_agent_loops():
    assert R.final_answer_box("<think>t</think><answer>[1, 2, 3, 4]</answer>") == (1, 2, 3, 4)
    assert R.final_answer_box("text <answer>[0, 0, 0, 0]</answer> more") == (0, 0, 0, 0)  # format aside
    assert R.final_answer_box("[5, 6, 7, 8]") == (5, 6, 7, 8)  # no tag: the whole turn
    assert R.final_answer_box("<answer>[1, 2, 3, 4]</answer><answer>[5, 6, 7, 9]</answer>") == (5, 6, 7, 9)
    assert R.final_answer_box("<answer>[1.5, 2, 3, 4]</answer>") is None


def test_hermes_tool_calls():
    t = '<tool_call>{"name": "a", "arguments": {"x": 1}}</tool_call> <tool_call>{bad}</tool_call>'
    assert R.hermes_tool_calls(t) == [R.ToolCall("a", {"x": 1})]
    assert R.hermes_tool_calls('<tool_call>{"name": "a"}</tool_call>') == []  # no arguments: skipped
    assert R.hermes_tool_calls("<tool_call>unclosed") == []


def test_run_tool_call_crop_and_error_texts():
    ok = R.run_tool_call(R.ToolCall(R.TOOL_NAME, {"bbox_2d": [10, 20, 200, 150]}), (700, 504), (462, 336), 160000)
    assert ok.ok and ok.box == (15, 30, 303, 225)  # PIL rounds the tool's float box
    nh, nw = smart_resize(225 - 30, 303 - 15, min_pixels=28 * 28, max_pixels=160000)
    assert ok.shown_wh == (nw, nh)
    bad = R.run_tool_call(R.ToolCall(R.TOOL_NAME, {"bbox_2d": [300, 300, 10, 10]}), (700, 504), (462, 336), 160000)
    assert bad.error == (
        "Error: The specified bounding box [300, 300, 10, 10] is invalid or results in a crop smaller than the minimum "
        "size of 28x28."
    )
    long = R.run_tool_call(
        R.ToolCall(R.TOOL_NAME, {"bbox_2d": [10**40, 10**40, 10**41, 10**41]}), (700, 504), (462, 336), 1
    )
    assert long.error is not None and len(long.error) == 128 + len("...(truncated)...") + 128
    assert (
        R.run_tool_call(R.ToolCall(["x"], {}), (7, 5), (7, 5), 1).error
        == "Error when executing tool: unhashable type: 'list'"
    )


def test_tool_frame_is_qwen_fetch_image_default():
    assert R.tool_frame_size((700, 500)) == (700, 504)
    w, h = R.tool_frame_size((8000, 6000))  # over 16384 * 28 * 28 pixels: scaled down
    assert w * h <= 16384 * 28 * 28 and w % 28 == h % 28 == 0
