"""The recipe's rollout contract (``recipe.vsearch.rollout_fields``): the keys each kind of sample carries, the round
trip through verl's ``extra_fields`` / ``extra_info`` / batch columns, and the one validation. Needs no verl."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from tests.support.stacks import add_recipe_path

add_recipe_path()

from recipe.vsearch.rollout_fields import (  # noqa: E402
    ALL_KEYS,
    OPTIONAL_KEYS,
    ROLE_INLOOP,
    ROLE_OUTLOOP,
    ROLE_PADDING,
    ROLE_PLACEHOLDER,
    EpisodeStats,
    SampleFields,
    SampleFieldsError,
    fill_optional,
    with_row_identity,
)

CORE = {"n_tool", "format_ok", "format_error", "pred_box", "search_status", "search_truncated"}
SAMPLE = {"is_in_loop", "feedback_helpful", "answer_correct", "vsearch_role", "critical_failure"}
TRAJECTORY = {"crop_boxes", "frame_size", "image_size"}
EPISODE = {
    "call_index",
    "feedback",
    "episode_id",
    "episode_n_calls",
    "episode_has_answer",
    "episode_correct",
    "episode_critical_failure",
    "episode_status",
    "episode_n_feedback",
}
#: a vSearcher row stopped at its fatal step (vsearch.fatal) carries these; the worker fills them for the others
FATAL = {"fatal_step", "fatal_from"}
STATS = EpisodeStats.of(
    "u-0", n_calls=2, has_answer=True, correct=True, critical_failure=False, status="answered", n_feedback=1
)
TRAJ = dict(
    n_tool=1,
    format_ok=True,
    pred_box=[1.0, 2.0, 30.0, 40.0],
    search_status="found",
    crop_boxes=[[0.0, 0.0, 10.0, 10.0]],
    frame_size=[640, 480],
    image_size=[1280, 960],
)
OUTLOOP = SampleFields(**TRAJ, bboxes=[[1, 2, 30, 40]], role=ROLE_OUTLOOP)
INLOOP = SampleFields(
    **TRAJ,
    is_in_loop=True,
    feedback_helpful=True,
    answer_correct=True,
    call_index=1,
    feedback="helpful",
    role=ROLE_INLOOP,
    episode=STATS,
)
PLACEHOLDER = SampleFields(
    format_error="no vSearcher call",
    search_status="none",
    is_in_loop=True,
    answer_correct=False,
    call_index=-1,
    role=ROLE_PLACEHOLDER,
    episode=STATS,
)


def test_each_kind_of_sample_carries_the_keys_the_loops_always_wrote():
    assert set(OUTLOOP.to_extra_fields()) == CORE | SAMPLE | TRAJECTORY | {"bboxes"}
    assert set(INLOOP.to_extra_fields()) == CORE | SAMPLE | TRAJECTORY | EPISODE
    assert set(PLACEHOLDER.to_extra_fields()) == CORE | SAMPLE | EPISODE
    fatal = replace(OUTLOOP, fatal_step=1, fatal_from=7).to_extra_fields()
    assert set(fatal) == CORE | SAMPLE | TRAJECTORY | {"bboxes"} | FATAL and (
        fatal["fatal_step"],
        fatal["fatal_from"],
    ) == (1, 7)
    f = INLOOP.to_extra_fields()
    assert f["vsearch_role"] == "inloop" and f["episode_id"] == "u-0" and f["episode_n_calls"] == 2
    # the worker fills what a sample lacks: every row then has the same columns
    every = CORE | SAMPLE | TRAJECTORY | EPISODE | {"bboxes"} | FATAL
    for sample in (OUTLOOP, INLOOP, PLACEHOLDER):
        row = sample.to_extra_fields()
        fill_optional(row)
        assert set(row) == every
    assert set(OPTIONAL_KEYS) == every - CORE - SAMPLE and set(ALL_KEYS) == every


@pytest.mark.parametrize("sample", [OUTLOOP, INLOOP, PLACEHOLDER], ids=["outloop", "inloop", "placeholder"])
def test_round_trip_through_extra_info_and_batch_columns(sample):
    gt = [[1, 2, 30, 40]]
    row = {"description": "the band", "bboxes": gt, **sample.to_extra_fields()}  # verl's merge into extra_info
    assert SampleFields.from_extra_info(row, variant="original") == replace(sample, bboxes=gt)
    cols = {k: _column([v, v]) for k, v in sample.to_extra_fields().items()}  # the worker's rows as columns
    assert SampleFields.from_batch(cols, 2) == [sample, sample]


def _column(values: list) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def test_missing_or_bad_keys_are_named():
    with pytest.raises(SampleFieldsError, match=r"lacks \['n_tool'\]"):
        SampleFields.from_extra_info({"format_ok": True, "bboxes": [[0, 0, 1, 1]]})
    with pytest.raises(KeyError, match="has no extra_info.bboxes"):  # a KeyError, as verl's reward loop reports
        SampleFields.from_extra_info({"n_tool": 0, "format_ok": False}, data_source="ds")
    with pytest.raises(SampleFieldsError, match=r"lacks \['image_size'\]"):
        SampleFields.from_extra_info({**OUTLOOP.to_extra_fields(), "image_size": None}, variant="original")
    SampleFields.from_extra_info({**OUTLOOP.to_extra_fields(), "image_size": None}, variant="paper")
    base = INLOOP.to_extra_fields()
    for key, bad, message in [
        ("n_tool", "two", "n_tool: expected int"),
        ("pred_box", [1, 2, 3], "pred_box: expected 4 numbers"),
        ("frame_size", [640.5, 480], "frame_size: expected \\[width, height\\] in whole pixels"),
        ("crop_boxes", 7, "crop_boxes: expected a list of boxes"),
        ("episode_n_calls", None, "episode_n_calls: required"),
    ]:
        with pytest.raises(SampleFieldsError, match=message):
            SampleFields.from_extra_info({**base, key: bad})


def test_writers_cannot_produce_an_inconsistent_sample():
    with pytest.raises(SampleFieldsError, match="episode statistics"):
        SampleFields(**TRAJ, role=ROLE_OUTLOOP, episode=STATS).to_extra_fields()
    with pytest.raises(SampleFieldsError, match="episode statistics"):
        SampleFields(**TRAJ, role=ROLE_INLOOP).to_extra_fields()
    with pytest.raises(SampleFieldsError, match="crop_boxes and frame_size"):
        SampleFields(role=ROLE_OUTLOOP).to_extra_fields()
    with pytest.raises(SampleFieldsError, match="not 'padding'"):
        SampleFields(role=ROLE_PADDING).to_extra_fields()


def test_batch_views_read_absent_columns_as_defaults():
    rows = SampleFields.from_batch({"vsearch_role": np.array([ROLE_PADDING, None], dtype=object)}, 2)
    assert [r.role for r in rows] == [ROLE_PADDING, ROLE_OUTLOOP] and rows[1].episode is None
    assert SampleFields.from_batch({}, 1) == [SampleFields()]


def test_row_identity_and_inloop_uids():
    row = {"uid": "u", "data_source": "ds", "extra_info": {"a": 1}, "raw_prompt": "not copied"}
    out, inloop = OUTLOOP.to_extra_fields(), INLOOP.to_extra_fields()
    with_row_identity(out, row)
    with_row_identity(inloop, row)
    assert out["uid"] == "u" and out["data_source"] == "ds" and "raw_prompt" not in out
    assert inloop["uid"] == "inloop-u-0-1" and inloop["extra_info"] == {"a": 1}
