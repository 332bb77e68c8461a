"""Eq. (1) of the paper on hand-computed cases (insight_o3.rewards, torch-free)."""
from __future__ import annotations

import pytest

from insight_o3.rewards import (RewardWeights, best_iou, in_loop_reward, iou_reward, out_of_loop_reward,
                                pseudo_iou_reward, reward_from_locate)

GT = [(0, 0, 100, 100)]


def test_no_tool_call_gives_zero_even_for_perfect_box():
    b = out_of_loop_reward(n_tool=0, format_ok=True, pred_box=(0, 0, 100, 100), gt_boxes=GT)
    assert b.score == 0.0 and b.tool_gate == 0.0 and b.r_iou == 1.0 and b.r_format == 1.0


def test_perfect_box_gives_one():
    b = out_of_loop_reward(n_tool=2, format_ok=True, pred_box=(0, 0, 100, 100), gt_boxes=GT)
    assert b.score == pytest.approx(1.0) and b.iou == pytest.approx(1.0) and b.matched_gt == 0


def test_iou_below_alpha_gives_format_part_only():
    # IoU = 2000/10000 = 0.2 < 0.25
    b = out_of_loop_reward(n_tool=1, format_ok=True, pred_box=(0, 0, 100, 20), gt_boxes=GT)
    assert b.iou == pytest.approx(0.2) and b.r_iou == 0.0 and b.score == pytest.approx(0.2)


def test_iou_reward_is_linear_above_alpha():
    # IoU 0.5 -> (0.5 - 0.25) / 0.75 = 1/3; score = 0.2 + 0.8/3
    b = out_of_loop_reward(n_tool=1, format_ok=True, pred_box=(0, 0, 100, 50), gt_boxes=GT)
    assert b.r_iou == pytest.approx(1 / 3) and b.score == pytest.approx(0.2 + 0.8 / 3)
    assert iou_reward(0.25) == 0.0 and iou_reward(1.0) == 1.0


def test_bad_format_keeps_iou_part():
    b = out_of_loop_reward(n_tool=1, format_ok=False, pred_box=(0, 0, 100, 100), gt_boxes=GT, format_error="x")
    assert b.score == pytest.approx(0.8) and b.format_error == "x"


def test_best_matching_gt_box_counts():
    gts = [(500, 500, 600, 600), (0, 0, 100, 100)]
    assert best_iou((0, 0, 100, 100), gts) == (pytest.approx(1.0), 1)
    assert best_iou([0, 0, 0, 0], gts) == (0.0, None)  # "not found"
    assert best_iou(None, gts) == (0.0, None)


def test_not_found_answer_is_format_only():
    b = out_of_loop_reward(n_tool=1, format_ok=True, pred_box=[0, 0, 0, 0], gt_boxes=GT)
    assert b.score == pytest.approx(0.2) and b.iou == 0.0


@pytest.mark.parametrize("s,c,expected", [(True, True, 1.0), (True, False, 0.2), (False, True, 0.2),
                                          (False, False, 0.2), (None, True, 0.2)])
def test_in_loop_pseudo_reward(s, c, expected):
    b = in_loop_reward(n_tool=1, format_ok=True, helpful=s, correct=c)
    assert b.score == pytest.approx(expected) and b.in_loop and b.iou is None
    assert pseudo_iou_reward(s, c) == (1.0 if expected == 1.0 else 0.0)


def test_in_loop_without_tool_call_is_zero():
    assert in_loop_reward(n_tool=0, format_ok=True, helpful=True, correct=True).score == 0.0


def test_custom_weights_and_validation():
    w = RewardWeights(format=0.5, iou=0.5, alpha=0.0)
    b = out_of_loop_reward(n_tool=1, format_ok=True, pred_box=(0, 0, 100, 50), gt_boxes=GT, weights=w)
    assert b.score == pytest.approx(0.5 + 0.5 * 0.5)
    with pytest.raises(ValueError, match="alpha"):
        RewardWeights(alpha=1.0)
    with pytest.raises(ValueError, match="n_tool"):
        out_of_loop_reward(n_tool=-1, format_ok=True, pred_box=None, gt_boxes=GT)
    with pytest.raises(ValueError, match="at least one ground-truth"):
        out_of_loop_reward(n_tool=1, format_ok=True, pred_box=None, gt_boxes=[])
    with pytest.raises(ValueError, match="ground-truth bbox #0 .*inverted"):
        best_iou((0, 0, 1, 1), [(10, 10, 5, 5)])


def test_reward_from_locate_result_like_object():
    from types import SimpleNamespace
    found = SimpleNamespace(n_tool_calls=1, format_ok=True, box_original=(0, 0, 100, 100), error=None)
    assert reward_from_locate(found, gt_boxes=GT).score == pytest.approx(1.0)
    invalid = SimpleNamespace(n_tool_calls=2, format_ok=False, box_original=None, error="turn 1: no <think>")
    b = reward_from_locate(invalid, gt_boxes=GT)
    assert b.score == 0.0 and b.format_error == "turn 1: no <think>"
    assert reward_from_locate(found, in_loop=True, helpful=True, correct=False).score == pytest.approx(0.2)
    with pytest.raises(ValueError, match="gt_boxes"):
        reward_from_locate(found)


def test_recipe_reward_function_adapter():
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "verl"))
    from recipe.vsearch.reward_fn import compute_score
    out = compute_score("info_vqa_region_localization", "", None,
                        {"bboxes": [[0, 0, 100, 100]], "n_tool": 1, "format_ok": True, "pred_box": [0, 0, 100, 50]})
    assert out["score"] == pytest.approx(0.2 + 0.8 / 3) and out["iou"] == pytest.approx(0.5)
    out = compute_score("visual_cot_vstar_collage", "", "C",
                        {"n_tool": 2, "format_ok": True, "is_in_loop": True, "feedback_helpful": True,
                         "answer_correct": False})
    assert out["score"] == pytest.approx(0.2) and out["iou"] == -1.0
    with pytest.raises(KeyError, match="n_tool"):
        compute_score("x", "", None, {"bboxes": [[0, 0, 1, 1]]})
    with pytest.raises(KeyError, match="bboxes"):
        compute_score("x", "", None, {"n_tool": 1, "format_ok": True})
