"""The fork's batch rule on the pseudo IoU (``recipe.vsearch.episodes.withhold_pseudo_iou``, ``original`` only).

The fork sets every sub-agent's pseudo IoU in a pass over the whole reward batch, guarded by
``"caller_feedback" in pseudo_iou_reward_type and any(ei.get("caller_feedback") for ei in extra_infos)``
(``verl/utils/reward_score/vsearch_batch.py:694-696`` at 926d137). The expected numbers below were obtained by
running that ``compute_score_batch`` unchanged (extracted as ``tests/golden/record_training_goldens.py`` does) on a
batch of one out-of-loop row, two sub-agent rows of one well-formed crop each and their vReasoner root, judged
correct: with no caller feedback in the batch (None, absent or ``""``) every sub-agent keeps ``iou_reward`` 0
under each of the three ``pseudo_iou_reward_type`` (score 0.2 conditioned, 1.2 with ``basic_weighted_addition``);
with one ``unhelpful`` rating the ``outcome_no_caller_feedback`` pseudo IoU is 1 for both rows (1.0 / 2.0).
"""

from __future__ import annotations

import pytest

from tests.support.stacks import require_recipe

require_recipe()

import torch  # noqa: E402

from insight_o3.protocol.rewards import PSEUDO_IOU_TYPES, REWARD_TYPES, batch_withholds_pseudo_iou  # noqa: E402
from recipe.vsearch.episodes import ROLE_INLOOP, ROLE_KEY, ROLE_OUTLOOP, withhold_pseudo_iou  # noqa: E402
from recipe.vsearch.reward_fn import compute_score, rules_from_kwargs  # noqa: E402
from tests.support.reward_batch import reward_loop_batch  # noqa: E402
from verl import DataProto  # noqa: E402

FRAME = [100, 100]
#: the fork's score of a sub-agent row (one crop, format 1, tool 1) by (reward_type, pseudo IoU)
FORK_SCORE = {("conditioned_on_tool_reward", 0.0): 0.2, ("conditioned_on_tool_reward", 1.0): 1.0}
FORK_SCORE |= {("basic_weighted_addition", 0.0): 1.2, ("basic_weighted_addition", 1.0): 2.0}


def _sample(in_loop: bool, helpful: bool | None) -> dict:
    s = {
        "n_tool": 1,
        "format_ok": True,
        "format_error": None,
        "crop_boxes": [[10, 10, 50, 50]],
        "frame_size": FRAME,
        "image_size": FRAME,
        "is_in_loop": in_loop,
        "feedback_helpful": helpful,
        "answer_correct": True if in_loop else None,
        ROLE_KEY: ROLE_INLOOP if in_loop else ROLE_OUTLOOP,
    }
    if not in_loop:
        s.update(pred_box=[10.0, 10.0, 50.0, 50.0], bboxes=[[10.0, 10.0, 50.0, 50.0]])
    return s


def _batch(ratings: list[bool | None], **kwargs) -> DataProto:
    """An out-of-loop sample and one in-loop sample per rating, scored by the recipe's ``compute_score`` one by one
    (as verl's reward loop does), laid out as the reward loop returns them."""
    samples = [_sample(False, None)] + [_sample(True, r) for r in ratings]
    scores = [compute_score("vsearch", "", "", s, **kwargs) for s in samples]
    return reward_loop_batch(samples, scores, columns=("feedback_helpful", ROLE_KEY))


@pytest.mark.parametrize("reward_type", REWARD_TYPES)
@pytest.mark.parametrize("pseudo", PSEUDO_IOU_TYPES)
def test_no_rating_in_the_batch_leaves_every_pseudo_iou_at_zero_as_the_fork(reward_type, pseudo):
    kwargs = dict(variant="original", reward_type=reward_type, pseudo_iou_reward_type=pseudo)
    batch = _batch([None, None], **kwargs)
    before = batch.batch["rm_scores"].clone()
    changed = withhold_pseudo_iou(batch, rules_from_kwargs(**kwargs))
    # outcome_no_caller_feedback scored 1[c = 1] = 1 per sample; the other two types already gave 0
    assert changed == (2 if pseudo == "outcome_no_caller_feedback" else 0)
    nt = batch.non_tensor_batch
    assert list(nt["r_iou"][1:]) == [0.0, 0.0]
    for i in (1, 2):
        assert nt["score"][i] == pytest.approx(FORK_SCORE[(reward_type, 0.0)])
        row = batch.batch["rm_scores"][i]
        assert row.sum().item() == pytest.approx(FORK_SCORE[(reward_type, 0.0)])
        assert torch.count_nonzero(row) == 1 and row.nonzero().item() == int(before[i].nonzero().item())
    assert torch.equal(batch.batch["rm_scores"][0], before[0])  # out-of-loop sample untouched


@pytest.mark.parametrize("reward_type", REWARD_TYPES)
def test_one_rating_in_the_batch_keeps_the_pseudo_iou_and_paper_has_no_batch_rule(reward_type):
    pseudo = "outcome_no_caller_feedback"
    for variant, ratings in (("original", [None, False]), ("paper", [None, None])):
        kwargs = dict(variant=variant, reward_type=reward_type, pseudo_iou_reward_type=pseudo)
        batch = _batch(ratings, **kwargs)
        before = batch.batch["rm_scores"].clone()
        assert withhold_pseudo_iou(batch, rules_from_kwargs(**kwargs)) == 0
        assert torch.equal(batch.batch["rm_scores"], before)
        assert list(batch.non_tensor_batch["r_iou"][1:]) == [1.0, 1.0]
        if variant == "original":  # the fork's numbers for this batch
            assert list(batch.non_tensor_batch["score"][1:]) == pytest.approx([FORK_SCORE[(reward_type, 1.0)]] * 2)


def test_batch_withholds_pseudo_iou():
    original, paper = rules_from_kwargs(variant="original"), rules_from_kwargs(variant="paper")
    assert batch_withholds_pseudo_iou(original, [None, None])
    assert batch_withholds_pseudo_iou(original, [])
    assert not batch_withholds_pseudo_iou(original, [None, False])
    assert not batch_withholds_pseudo_iou(original, [True])
    assert not batch_withholds_pseudo_iou(paper, [None, None])
