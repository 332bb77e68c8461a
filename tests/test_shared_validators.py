"""One validator per concept, shared by its users: input boxes (geometry.check_box), image sizes
(images.image_size), question+options text (questions.question_text), annotation errors and statuses."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from insight_o3.data.source_pool import PoolError, load_pool
from insight_o3.evaluation import vsearch_eval
from insight_o3.imaging.geometry import check_box
from insight_o3.imaging.images import ImageError, ImageStore, image_size
from insight_o3.protocol.questions import question_text
from insight_o3.protocol.sample import AnnotationError, Sample


def test_check_box_is_the_one_annotation_box_validator(tmp_path):
    assert check_box([1, 2, 3, 4], "f:1", "bbox") == (1.0, 2.0, 3.0, 4.0)
    assert check_box(np.array([0, 0, 10, 10]), "f:1", "bbox", (10, 10)) == (0.0, 0.0, 10.0, 10.0)
    for bad, what in (
        ([1, 2, 3], r"must be \[x1, y1, x2, y2\]"),
        ([1, 2, "3", 4], "must hold 4 finite numbers"),
        ([1, 2, True, 4], "must hold 4 finite numbers"),
        ([0, 0, float("nan"), 1], "must hold 4 finite"),
        ([5, 0, 1, 1], r"\[5, 0, 1, 1\] is inverted or empty"),
        ([0, 0, 20, 5], r"\[0, 0, 20, 5\] lies outside the 10x10 image"),
    ):
        with pytest.raises(AnnotationError, match=rf"^f:7: field 'box' {what}"):
            check_box(bad, "f:7", "box", (10, 10), error=AnnotationError)
    # the source pool uses it (a string coordinate is no longer taken as a number)
    pool = tmp_path / "pool.jsonl"
    pool.write_text(
        '{"id": "a", "image": "x.png", "width": 10, "height": 10, "bbox": [0, 0, 3, "4"], '
        '"question": "q", "answer": "a"}\n'
    )
    with pytest.raises(PoolError, match=r"pool.jsonl:1: field 'bbox' must hold 4 finite numbers"):
        load_pool(str(pool), check_images=False)
    # and the vSearcher evaluation (raising the evaluation's one AnnotationError)
    Image.new("RGB", (8, 8)).save(tmp_path / "one.png")
    ann = tmp_path / "ann.jsonl"
    ann.write_text('{"image": "one.png", "description": "x", "bbox": [4, 0, 2, 2]}\n')
    assert vsearch_eval.AnnotationError is AnnotationError
    with pytest.raises(AnnotationError, match=r"ann.jsonl:1: field 'bbox' \[4, 0, 2, 2\] is inverted"):
        vsearch_eval.load_regions(str(ann), str(tmp_path))


def test_image_size_reads_headers_with_one_error_style(tmp_path):
    Image.new("RGB", (30, 20)).save(tmp_path / "a.png")
    (tmp_path / "bad.png").write_bytes(b"not an image")
    assert image_size(tmp_path / "a.png") == (30, 20) == ImageStore().size(str(tmp_path / "a.png"))
    with pytest.raises(ImageError, match="image file not found: .*gone.png"):
        image_size(tmp_path / "gone.png")
    with pytest.raises(ImageError, match="cannot decode image .*bad.png"):
        image_size(tmp_path / "bad.png")


def test_question_text_is_the_one_question_options_formatter():
    from insight_o3.protocol.questions import insight_o3_question

    s = Sample(
        index=0,
        question_id=1,
        image="a.png",
        image_path="a.png",
        question="Which\\nnow?",
        options="A. x\\nB. y",
        answer="A",
    )
    assert s.prompt() == question_text(s.question, s.options) == "Which\\nnow?\nA. x\\nB. y"
    assert (
        insight_o3_question(s)
        == question_text(s.question, s.options, unescape_newlines=True)
        == "Which\nnow?\nA. x\nB. y"
    )
    open_q = Sample(
        index=0, question_id=1, image="a.png", image_path="a.png", question="Why\\n?", options=None, answer="x"
    )
    assert open_q.prompt() == insight_o3_question(open_q) == "Why\\n?"


def test_rewards_use_the_same_box_validator():
    from insight_o3.protocol.rewards import best_iou

    assert best_iou(np.array([5.0, 5.0, 1.0, 1.0], dtype=np.float32), [(0, 0, 2, 2)])[0] == 0.0  # inverted pred: IoU 0
    with pytest.raises(ValueError, match=r"^predicted bbox must hold 4 finite numbers"):
        best_iou((0, 0, 1, "x"), [(0, 0, 2, 2)])
    with pytest.raises(ValueError, match=r"^ground-truth bbox #1 must be \[x1, y1, x2, y2\]"):
        best_iou((0, 0, 1, 1), [(0, 0, 2, 2), (1, 2)])
