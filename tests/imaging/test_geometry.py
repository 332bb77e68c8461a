"""Property tests: coordinates survive original -> model frame -> original, and model-produced
boxes never crash the protocol."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from insight_o3.agents import SearcherSession
from insight_o3.agents.views import MAX_CROP_RATIO, crop_box
from insight_o3.imaging.geometry import QWEN_IMAGE_FACTOR, Frame, pixel_box, smart_resize, validate_box
from insight_o3.imaging.images import ImageStore, Resize

budgets = st.sampled_from([256 * 28 * 28, 1024 * 28 * 28, 4096 * 28 * 28, 16384 * 28 * 28]) | st.integers(
    4 * 28 * 28, 20000 * 28 * 28
)


@st.composite
def image_sizes(draw, max_ratio=150):
    w = draw(st.integers(28, 16000))
    h = draw(st.integers(max(28, math.ceil(w / max_ratio)), min(16000, w * max_ratio)))
    return w, h


@st.composite
def boxes_in(draw, size):
    w, h = size
    x1 = draw(st.floats(0, w - 1))
    y1 = draw(st.floats(0, h - 1))
    x2 = draw(st.floats(x1 + 1, w))
    y2 = draw(st.floats(y1 + 1, h))
    return (x1, y1, x2, y2)


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=image_sizes(), budget=budgets)
def test_round_trip_original_model_original(data, size, budget):
    w, h = size
    mh, mw = smart_resize(h, w, max_pixels=budget)
    assert mh % QWEN_IMAGE_FACTOR == 0 and mw % QWEN_IMAGE_FACTOR == 0
    assert Resize.qwen(budget).target(size) == (mw, mh)
    frame = Frame((0.0, 0.0, float(w), float(h)), (mw, mh))
    box = data.draw(boxes_in(size))
    model = frame.from_original(box)
    back = frame.to_original(model)
    assert back == pytest.approx(box, rel=1e-9, abs=1e-6)
    # a model-frame box the vSearcher predicts (integers) maps inside the image and back exactly
    mbox = data.draw(boxes_in((mw, mh)))
    mbox = tuple(float(round(v)) for v in mbox)
    orig = frame.to_original(mbox)
    assert all(-1e-6 <= v <= lim + 1e-6 for v, lim in zip(orig, (w, h, w, h)))
    assert frame.from_original(orig) == pytest.approx(mbox, abs=1e-6)
    # the integer crop covers the box and is at most one pixel larger per side
    px = pixel_box(orig)
    assert px[0] <= orig[0] < px[0] + 1 and px[2] - 1 < orig[2] <= px[2]


@settings(max_examples=300, deadline=None)
@given(data=st.data(), size=image_sizes(max_ratio=100))
def test_crop_box_is_always_showable(data, size):
    box = data.draw(boxes_in(size))
    c = crop_box(box, size)
    w, h = size
    assert 0 <= c[0] < c[2] <= w + 1e-6 and 0 <= c[1] < c[3] <= h + 1e-6
    assert c[2] - c[0] >= min(QWEN_IMAGE_FACTOR, w) - 1e-6 and c[3] - c[1] >= min(QWEN_IMAGE_FACTOR, h) - 1e-6
    cw, ch = c[2] - c[0], c[3] - c[1]
    assert max(cw, ch) / min(cw, ch) <= MAX_CROP_RATIO + 1e-6
    px = pixel_box(c)
    smart_resize(px[3] - px[1], px[2] - px[0])  # never raises


anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=500, deadline=None)
@given(
    values=anything | st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(), min_size=4, max_size=4),
    size=st.tuples(st.integers(1, 10000), st.integers(1, 10000)),
)
def test_validate_box_never_raises(values, size):
    box, why = validate_box(values, size)
    assert (box is None) != (why is None)
    if box is not None:
        x1, y1, x2, y2 = box
        assert 0 <= x1 < x2 <= size[0] and 0 <= y1 < y2 <= size[1] and x2 - x1 >= 1 and y2 - y1 >= 1


@pytest.fixture(scope="module")
def small_image(tmp_path_factory):
    p = tmp_path_factory.mktemp("img") / "im.png"
    Image.new("RGB", (300, 200), (10, 200, 30)).save(p)
    store = ImageStore(fmt="PNG")
    yield str(p), store
    store.close()


tool_bodies = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda b, n: json.dumps({"name": n, "arguments": {"bbox_2d": b}}),
        anything,
        st.sampled_from(["image_zoom_in_tool", "zoom", ""]),
    ),
    st.builds(
        lambda b: json.dumps({"name": "image_zoom_in_tool", "arguments": {"bbox_2d": b}}),
        st.lists(st.floats(-1e6, 1e6) | st.just(float("nan")) | st.integers(-(10**6), 10**6), min_size=4, max_size=4),
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(turns=st.lists(st.tuples(st.sampled_from(["tool", "answer", "raw"]), tool_bodies), min_size=1, max_size=9))
def test_searcher_session_never_raises_on_model_output(small_image, turns):
    path, store = small_image
    s = SearcherSession(path, "x", store, 64 * 28 * 28, max_tool_calls=6)
    for kind, body in turns:
        if s.done:
            break
        text = {
            "tool": f"<think>t</think><tool_call>{body}</tool_call>",
            "answer": f"<think>t</think><answer>{body}</answer>",
            "raw": body,
        }[kind]
        st_ = s.step(text)
        if st_.crop is not None:
            x1, y1, x2, y2 = st_.crop.region
            assert 0 <= x1 < x2 <= 300 and 0 <= y1 < y2 <= 200
    if s.done:
        r = s.result()
        assert r.status in ("found", "not_found", "invalid")
        assert r.n_turns <= 7 and r.n_tool_calls <= 6
        if r.status == "found":
            x1, y1, x2, y2 = r.box_original
            assert 0 <= x1 < x2 <= 300 and 0 <= y1 < y2 <= 200
