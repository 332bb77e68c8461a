"""The view pipeline: each operation's planned size is the size it renders, the record form round-trips, and the
named pipelines render what the harnesses' rules say."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from insight_o3.imaging.geometry import fit_max_pixels, smart_resize, upscale_small
from insight_o3.imaging.view_ops import (
    Crop,
    EnlargeCrop,
    FitPixels,
    QwenGrid,
    Resample,
    Resize,
    ResizeTo,
    ViewOp,
)

sides = st.integers(1, 300)
resamples = st.sampled_from(list(Resample))
ops = st.one_of(
    st.builds(lambda w, h, r: ResizeTo((w, h), r), sides, sides, resamples),
    st.builds(FitPixels, st.integers(1, 40_000), resamples),
    st.builds(QwenGrid, st.integers(4 * 28 * 28, 200 * 28 * 28), st.just(4 * 28 * 28)),
    st.builds(EnlargeCrop, st.integers(0, 60), st.integers(0, 80 * 80), resamples),
    st.builds(lambda x, y, w, h: Crop((x, y, x + w, y + h)), st.integers(-5, 50), st.integers(-5, 50), sides, sides),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(ops, max_size=4), sides, sides, st.booleans())
def test_the_planned_size_is_the_rendered_size(pipeline: list[ViewOp], w: int, h: int, crop: bool) -> None:
    resize = Resize(tuple(pipeline))
    try:
        planned = resize.target((w, h), crop)
    except ValueError:  # smart_resize refuses an aspect ratio past 200
        return
    assert resize.apply(Image.new("RGB", (w, h)), crop).size == planned


@settings(max_examples=60, deadline=None)
@given(st.lists(ops, max_size=4), st.one_of(st.none(), st.integers(1, 100)), st.booleans())
def test_the_record_form_round_trips(pipeline: list[ViewOp], quality: int | None, as_file: bool) -> None:
    resize = Resize(tuple(pipeline), quality, as_file)
    stored = json.loads(json.dumps(resize.to_json()))
    assert Resize.from_json(stored) == resize
    assert hash(Resize.from_json(stored)) == hash(resize)


def test_a_bad_operation_is_named() -> None:
    with pytest.raises(ValueError, match="unknown view operation 'rotate'"):
        Resize.from_json({"ops": [{"op": "rotate", "degrees": 90}]})
    with pytest.raises(ValueError, match="bad view operation"):
        Resize.from_json({"ops": [{"op": "resize", "size": [4, 4], "resample": "box"}]})


def test_the_named_pipelines_follow_the_rules() -> None:
    assert Resize.fit(None) == Resize.fit(0) == Resize()
    assert Resize.fit(5000).target((400, 300)) == fit_max_pixels((400, 300), 5000)
    nh, nw = smart_resize(300, 400, max_pixels=50_000)
    assert Resize.qwen(50_000).target((400, 300)) == (nw, nh) and Resize.qwen(50_000).resample == Resample.BICUBIC
    enlarge = Resize((EnlargeCrop(56, 112 * 112), FitPixels(10**6)))
    assert enlarge.target((20, 50), crop=True) == upscale_small((20, 50), 56, 112 * 112)[-1]
    assert enlarge.target((20, 50)) == (20, 50)  # a whole image is not enlarged
    fixed = Resize.qwen(50_000, jpeg_quality=90).at_size((30, 40))
    assert fixed == Resize((ResizeTo((30, 40), Resample.BICUBIC),), 90)
    assert Resize().resample == Resample.LANCZOS


def test_each_filter_is_the_pil_filter_of_its_name() -> None:
    for r in Resample:
        assert r.pil == Image.Resampling[r.name]
