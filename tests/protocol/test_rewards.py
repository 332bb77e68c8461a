"""Eq. (1) of the paper on hand-computed cases (insight_o3.protocol.rewards, torch-free)."""

from __future__ import annotations

import pytest

from insight_o3.protocol.rewards import (
    RewardRules,
    RewardWeights,
    best_iou,
    covered_iou,
    in_loop_reward,
    iou_reward,
    original_in_loop_reward,
    original_out_of_loop_reward,
    out_of_loop_reward,
    pseudo_iou_reward,
    repeated_view,
    reward_from_locate,
    trajectory_reward,
)
from tests.support.stacks import add_recipe_path

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


@pytest.mark.parametrize(
    "s,c,expected", [(True, True, 1.0), (True, False, 0.2), (False, True, 0.2), (False, False, 0.2), (None, True, 0.2)]
)
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
    add_recipe_path()  # the reward adapter needs no verl
    from recipe.vsearch.reward_fn import compute_score

    # variant="paper": Eq. (1) literally (the adapter's default is "original", tested below)
    out = compute_score(
        "info_vqa_region_localization",
        "",
        None,
        {"bboxes": [[0, 0, 100, 100]], "n_tool": 1, "format_ok": True, "pred_box": [0, 0, 100, 50]},
        variant="paper",
    )
    assert out["score"] == pytest.approx(0.2 + 0.8 / 3) and out["iou"] == pytest.approx(0.5)
    out = compute_score(
        "visual_cot_vstar_collage",
        "",
        "C",
        {"n_tool": 2, "format_ok": True, "is_in_loop": True, "feedback_helpful": True, "answer_correct": False},
        variant="paper",
    )
    assert out["score"] == pytest.approx(0.2) and out["iou"] == -1.0
    with pytest.raises(KeyError, match="n_tool"):
        compute_score("x", "", None, {"bboxes": [[0, 0, 1, 1]]})
    with pytest.raises(KeyError, match="bboxes"):
        compute_score("x", "", None, {"n_tool": 1, "format_ok": True})


# ----------------------------------------------------------------------------- variant "original"
FRAME = (1000, 800)  # model frame of the crop boxes
IMAGE = (1000, 1000)  # original image
G = [(100, 100, 200, 200)]
A, A_NEAR, A_HALF = (100, 100, 300, 300), (110, 110, 310, 310), (100, 100, 300, 200)


def _orig(pred, gts=G, crops=(A,), fmt=True, n_tool=None, rules=RewardRules()):
    n = len(crops) if n_tool is None else n_tool
    return original_out_of_loop_reward(
        n_tool=n,
        format_ok=fmt,
        pred_box=pred,
        gt_boxes=gts,
        image_size=IMAGE,
        crop_boxes=crops,
        frame_size=FRAME,
        rules=rules,
    )


def test_original_failed_format_gives_zero_where_the_paper_keeps_the_iou_part():
    assert _orig((100, 100, 200, 200), fmt=False).score == 0.0
    paper = out_of_loop_reward(n_tool=1, format_ok=False, pred_box=(100, 100, 200, 200), gt_boxes=G)
    assert paper.score == pytest.approx(0.8)
    b = original_in_loop_reward(n_tool=1, format_ok=False, helpful=True, correct=True, crop_boxes=[A], frame_size=FRAME)
    assert b.score == 0.0 and b.tool_gate == 0.0 and b.r_iou == 1.0
    assert in_loop_reward(n_tool=1, format_ok=False, helpful=True, correct=True).score == pytest.approx(0.8)


def test_original_repeated_view_voids_the_tool_gate():
    # first crop ~ the whole frame: IoU((0,0,1000,800), (0,0,950,800)) = 0.95 > 0.6
    assert repeated_view([(0, 0, 950, 800)], FRAME)
    b = _orig((100, 100, 200, 200), crops=[(0, 0, 950, 800)])
    assert b.score == 0.0 and b.repeated_view is True and b.r_iou == 1.0
    # consecutive crops A, A_NEAR: IoU = 190*190 / (2*200*200 - 190*190) = 36100/43900 = 0.8223 > 0.6
    assert _orig((100, 100, 200, 200), crops=[A, A_NEAR]).score == 0.0
    # A, A_HALF: IoU 0.5 <= 0.6; A, A_HALF, A again: only consecutive pairs count (0.5, 0.5)
    assert _orig((100, 100, 200, 200), crops=[A, A_HALF]).score == pytest.approx(1.0)
    assert not repeated_view([A, A_HALF, A], FRAME)
    assert repeated_view([A, A_HALF, A], FRAME, max_iou=0.4)
    # the paper has no such rule
    assert out_of_loop_reward(n_tool=2, format_ok=True, pred_box=(100, 100, 200, 200), gt_boxes=G).score == 1.0
    b = original_in_loop_reward(
        n_tool=2, format_ok=True, helpful=True, correct=True, crop_boxes=[A, A_NEAR], frame_size=FRAME
    )
    assert b.score == 0.0 and b.repeated_view


def test_original_counts_iou_only_for_boxes_covering_95_percent_of_the_gt():
    # covers 96 %: IoU 9600/10000 = 0.96 -> r = (0.96 - 0.25)/0.75; score 0.2 + 0.8 r
    b = _orig((100, 100, 200, 196))
    assert b.iou == pytest.approx(0.96) and b.r_iou == pytest.approx(0.71 / 0.75)
    assert b.score == pytest.approx(0.2 + 0.8 * 0.71 / 0.75)
    # covers 94 %: the box does not count; the whole image covers it, IoU 10^4/10^6 = 0.01 -> r = 0
    b = _orig((100, 100, 200, 194))
    assert b.iou == pytest.approx(0.01) and b.r_iou == 0.0 and b.score == pytest.approx(0.2)
    paper = out_of_loop_reward(n_tool=1, format_ok=True, pred_box=(100, 100, 200, 194), gt_boxes=G)
    assert paper.score == pytest.approx(0.2 + 0.8 * (0.94 - 0.25) / 0.75)
    # a box around the gt: IoU 10^4 / 140^2 = 0.5102 for both variants
    b = _orig((80, 80, 220, 220))
    assert b.iou == pytest.approx(10000 / 19600) and b.score == pytest.approx(0.2 + 0.8 * (10000 / 19600 - 0.25) / 0.75)


def test_original_needs_every_gt_box_covered():
    gts = [(100, 100, 200, 200), (600, 600, 700, 700)]
    b = _orig((100, 100, 200, 200), gts=gts)  # the second box is only "covered" by the whole image
    assert b.iou == pytest.approx(0.01) and b.matched_gt == 1 and b.score == pytest.approx(0.2)
    assert best_iou((100, 100, 200, 200), gts) == (pytest.approx(1.0), 0)  # paper: best match
    assert covered_iou((100, 100, 700, 700), gts, IMAGE) == (pytest.approx(10000 / 360000), 0)


def test_original_whole_image_candidate_scores_large_gt_boxes():
    # gt covers 90 % of a 200x100 image: a 50 % box does not count, the whole image does (IoU 0.9)
    assert covered_iou((0, 0, 200, 50), [(0, 0, 200, 90)], (200, 100)) == (pytest.approx(0.9), 0)
    assert covered_iou(None, [(0, 0, 200, 90)], (200, 100)) == (0.0, None)  # no answer: skipped
    assert covered_iou([0, 0, 0, 0], [(0, 0, 200, 90)], (200, 100)) == (0.0, None)  # "not found"


def test_original_not_found_and_no_tool_and_in_loop():
    assert _orig([0, 0, 0, 0]).score == pytest.approx(0.2)
    assert _orig((100, 100, 200, 200), crops=[], n_tool=0).score == 0.0
    for s, c, expected in [(True, True, 1.0), (True, False, 0.2), (None, True, 0.2)]:
        b = original_in_loop_reward(n_tool=1, format_ok=True, helpful=s, correct=c, crop_boxes=[A], frame_size=FRAME)
        assert b.score == pytest.approx(expected) and b.variant == "original" and b.repeated_view is False


def test_trajectory_reward_dispatch_and_rules_validation():
    common = dict(
        in_loop=False,
        n_tool=1,
        format_ok=False,
        pred_box=(100, 100, 200, 200),
        gt_boxes=G,
        image_size=IMAGE,
        crop_boxes=[A],
        frame_size=FRAME,
    )
    assert trajectory_reward(RewardRules("paper"), **common).score == pytest.approx(0.8)
    assert trajectory_reward(RewardRules("original"), **common).score == 0.0
    with pytest.raises(ValueError, match=r"needs \['frame_size', 'image_size'\]"):
        trajectory_reward(RewardRules(), **{**common, "frame_size": None, "image_size": None})
    # no crop: the repeat rule has nothing to read
    assert trajectory_reward(RewardRules(), **{**common, "n_tool": 0, "crop_boxes": [], "frame_size": None}).score == 0
    with pytest.raises(ValueError, match="variant must be one of"):
        RewardRules("eq1")
    with pytest.raises(ValueError, match="min_gt_coverage"):
        RewardRules(min_gt_coverage=1.5)


def test_recipe_reward_function_original_variant():
    add_recipe_path()  # the reward adapter needs no verl
    from recipe.vsearch.reward_fn import compute_score

    info = {
        "bboxes": [[100, 100, 200, 200]],
        "n_tool": 2,
        "format_ok": True,
        "pred_box": [100, 100, 200, 196],
        "crop_boxes": [list(A), list(A_HALF)],
        "frame_size": list(FRAME),
        "image_size": list(IMAGE),
    }
    out = compute_score("info_vqa_region_localization", "", None, info)  # default: original
    assert out["variant"] == "original" and out["score"] == pytest.approx(0.2 + 0.8 * 0.71 / 0.75)
    out = compute_score("info_vqa_region_localization", "", None, {**info, "crop_boxes": [list(A), list(A_NEAR)]})
    assert out["score"] == 0.0 and out["repeated_view"] == 1.0
    out = compute_score("x", "", None, {**info, "format_ok": False}, variant="original")
    assert out["score"] == 0.0
    with pytest.raises(KeyError, match="frame_size"):
        compute_score("x", "", None, {k: v for k, v in info.items() if k != "frame_size"})
    inloop = {
        "n_tool": 1,
        "format_ok": True,
        "is_in_loop": True,
        "feedback_helpful": True,
        "answer_correct": True,
        "crop_boxes": [list(A)],
        "frame_size": list(FRAME),
    }
    assert compute_score("c", "", "C", inloop)["score"] == pytest.approx(1.0)
    # placeholder rows (no vSearcher call) carry no frame: score 0, no error
    assert compute_score("c", "", "C", {"n_tool": 0, "format_ok": False, "is_in_loop": True})["score"] == 0.0
    w = compute_score("c", "", "C", inloop, format_weight=0.5, iou_weight=0.5, alpha=0.0)
    assert w["score"] == pytest.approx(1.0)
