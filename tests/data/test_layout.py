"""C.2 layout rules on hand-made detections: one case per rule."""

from __future__ import annotations

import pytest

from insight_o3.data.layout import LayoutError, LayoutRules, merge_effort, parse_layout, process_layout

SIZE = (1000, 1000)  # image area 1e6: 1/4 = 250_000, 0.001 = 1_000


def run(boxes, rules=LayoutRules()):
    doc = parse_layout(
        {"input_path": "x.png", "boxes": [{"label": lab, "score": 0.9, "coordinate": list(c)} for lab, c in boxes]},
        "t.json",
        SIZE,
    )
    return [(b.label, tuple(round(v) for v in b.box), b.merged) for b in process_layout(doc, SIZE, rules)]


CHART = ("chart", (100, 100, 400, 400))


def test_keep_only_listed_classes():
    assert run([("header", (100, 100, 400, 400)), ("footer", (100, 500, 400, 800)), CHART]) == [
        ("chart", (100, 100, 400, 400), False)
    ]


def test_drop_too_large_boxes_with_chart_exception():
    big = (0, 0, 600, 600)  # 0.36 of the image
    assert run([("table", big)]) == []
    assert run([("chart", big)]) == [("chart", big, False)]
    assert run([("chart", (0, 0, 950, 950))]) == []  # 0.9025 > 0.8


def test_merge_text_with_title_least_effort_first():
    title = ("paragraph_title", (100, 100, 300, 130))
    text = ("text", (100, 135, 300, 300))
    # effort = 1 - (6000 + 33000) / (200 * 200) = 0.025 <= 0.1 -> merged; the label of the larger member
    assert merge_effort(title[1], text[1]) == pytest.approx(0.025)
    assert run([title, text]) == [("text", (100, 100, 300, 300), True)]


def test_title_threshold_is_larger_than_text_threshold():
    # two texts with a gap: effort = 1 - 2*(200*80) / (200*200) = 0.2 -> not merged (> 0.1) -> both dropped (4)
    assert run([("text", (100, 100, 300, 180)), ("text", (100, 220, 300, 300))]) == []
    # title + text whose effort is 0.125: merged only because a title is involved (0.15)
    title, text = ("figure_title", (100, 100, 300, 140)), ("text", (100, 165, 300, 300))
    e = merge_effort(title[1], text[1])
    assert 0.1 < e <= 0.15
    assert run([title, text]) == [("text", (100, 100, 300, 300), True)]
    t2, x2 = ("text", (100, 100, 300, 140)), ("text", (100, 165, 300, 300))
    assert run([t2, x2]) == []


def test_skip_merge_that_is_too_large_or_too_elongated():
    # enclosing box 600x500 = 0.3 of the image > 0.25: not merged (then dropped as unmerged texts)
    assert run([("text", (0, 0, 600, 240)), ("text", (0, 250, 600, 500))]) == []
    # merged box would be 600x100 (6:1): not merged
    assert run([("text", (0, 0, 295, 100)), ("text", (300, 0, 600, 100))]) == []
    # same pair 5:1 is fine
    assert run([("text", (0, 0, 245, 100)), ("text", (250, 0, 500, 100))]) == [("text", (0, 0, 500, 100), True)]


def test_never_merge_charts_or_tables():
    # a title right above a chart is not merged into it; the lone title is then dropped (3)
    assert run([("figure_title", (100, 80, 400, 98)), CHART]) == [("chart", (100, 100, 400, 400), False)]


def test_drop_chart_enclosing_chart():
    inner = ("table", (150, 150, 300, 300))
    assert run([CHART, inner]) == [("table", (150, 150, 300, 300), False)]


def test_drop_unmerged_images_without_text():
    img = ("image", (100, 100, 400, 400))
    assert run([img]) == []
    # an image containing a text box: the text merges into it (effort < 0), label stays image
    assert run([img, ("text", (150, 150, 250, 200))]) == [("image", (100, 100, 400, 400), True)]
    # unmerged image (text inside it cannot merge: merged box would be too large) is kept since it holds text
    rules = LayoutRules(merge_max_area_ratio=0.01)
    assert run([img, ("text", (150, 150, 250, 200))], rules) == [("image", (100, 100, 400, 400), False)]


def test_drop_unmerged_titles_and_texts():
    assert run([("paragraph_title", (100, 100, 400, 150))]) == []
    assert run([("text", (100, 100, 400, 300))]) == []


def test_drop_tiny_boxes():
    assert run([("chart", (0, 0, 30, 30))]) == []  # 900 / 1e6 < 0.001
    assert run([("chart", (0, 0, 40, 40))]) == [("chart", (0, 0, 40, 40), False)]


def test_drop_extreme_aspect():
    assert run([("table", (0, 0, 600, 100))]) == []  # 6:1
    assert run([("table", (0, 0, 100, 600))]) == []  # 1:6
    assert run([("table", (0, 0, 500, 100))]) == [("table", (0, 0, 500, 100), False)]


def test_bad_input_is_named():
    with pytest.raises(LayoutError, match=r"t.json: boxes\[0\].*outside the 1000x1000 image"):
        parse_layout({"input_path": "x", "boxes": [{"label": "text", "coordinate": [0, 0, 1200, 10]}]}, "t.json", SIZE)
    with pytest.raises(LayoutError, match=r"t.json: boxes\[0\]: field 'coordinate'"):
        parse_layout({"input_path": "x", "boxes": [{"label": "text", "coordinate": [0, 0, "a", 10]}]}, "t.json", SIZE)
    with pytest.raises(LayoutError, match="missing field 'input_path'"):
        parse_layout({"boxes": []}, "t.json", SIZE)
    # PaddleOCR's {"res": {...}} wrapper
    doc = parse_layout(
        {"res": {"input_path": "x", "boxes": [{"label": "chart", "score": 0.5, "coordinate": [1, 2, 3, 4]}]}},
        "t.json",
        SIZE,
    )
    assert doc.boxes[0].box == (1, 2, 3, 4)
