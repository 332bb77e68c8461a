"""The typed stats of an attempt (insight_o3.protocol.attempt_stats): each family's stored shape reads as its record
and writes back byte for byte; unknown keys are kept; a malformed value names its field."""

from __future__ import annotations

import json

import pytest

from insight_o3.evaluation.schema import EvalResult, RecordError
from insight_o3.protocol.attempt_stats import (
    AttemptStats,
    InSightO3Stats,
    InsightVStats,
    OtherText,
    TextVerdict,
    ToolLoopStats,
)
from insight_o3.protocol.statuses import EpisodeStatus, InsightVAgent, ThoughtsForm, VerdictStatus

#: The shapes each writer produces (key order included), as stored.
STORED = [
    (
        InSightO3Stats,
        {
            "n_search_calls": 2,
            "n_search_not_found": 1,
            "n_format_retries": 0,
            "feedback": [None, "ok"],
            "status": "answered",
            "protocol_error": None,
        },
    ),
    (InSightO3Stats, {"n_search_calls": 3, "n_search_not_found": 1}),  # a partial one (tests' planted records)
    (
        InsightVStats,
        {
            "chain": "<thoughts>\nc</thoughts>\n",
            "reasoner_finish_reason": "stop",
            "thoughts": "closed",
            "judge_also": {"chain": {"text": "c", "finish_reason": "stop"}},
            "requests": 2,
            "judged": {"chain": {"status": "correct", "extracted_answer": "B", "has_answer": True}},
        },
    ),
    (InsightVStats, {"chain": "c", "reasoner_finish_reason": "length", "thoughts": "unclosed", "lost": "summary"}),
    (InsightVStats, {"lost": "reasoner"}),
    (ToolLoopStats, {"requests": 2, "zooms": 1, "tool_calls": [{"name": "zoom", "turn": 0}], "stop_reason": "x"}),
    (ToolLoopStats, {"requests": 1, "zooms": 0}),
    (ToolLoopStats, {"requests": 0, "zooms": 0, "status": "image_refused", "protocol_error": "aspect 8000x30"}),
    (AttemptStats, {}),
    (AttemptStats, {"from_a_later_version": [1]}),  # no family: kept whole
    (InSightO3Stats, {"n_search_calls": 1, "later_key": {"a": 1}}),  # a family's unknown key: kept, written after
]


def _read(stats: object) -> EvalResult:
    return EvalResult.from_dict({"status": "wrong", "stats": stats}, "f:1")


@pytest.mark.parametrize(("family", "stored"), STORED)
def test_each_stored_shape_reads_as_its_family_and_writes_back_unchanged(family, stored):
    er = _read(stored)
    assert type(er.stats) is family
    on_disk = er.to_dict()["stats"]
    assert json.dumps(on_disk) == json.dumps(stored)
    assert _read(on_disk).stats == er.stats


def test_readers_get_typed_values():
    o3 = _read(STORED[0][1]).stats
    assert isinstance(o3, InSightO3Stats) and o3.status is EpisodeStatus.ANSWERED and o3.feedback == [None, "ok"]
    assert o3.episode_status is EpisodeStatus.ANSWERED and o3.no_answer_reason() is None
    v = _read(STORED[2][1]).stats
    assert isinstance(v, InsightVStats) and v.thoughts is ThoughtsForm.CLOSED
    assert v.judged["chain"] == TextVerdict(status=VerdictStatus.CORRECT, extracted_answer="B", has_answer=True)
    assert v.texts_to_judge() == {"chain": OtherText(text="c", finish_reason="stop")}
    assert _read({"lost": "reasoner"}).stats == InsightVStats(lost=InsightVAgent.REASONER)
    refused = _read(STORED[7][1]).stats
    assert refused.no_answer_reason() == "aspect 8000x30"
    assert InSightO3Stats(status=EpisodeStatus.FORMAT_FAILED).no_answer_reason() == "format_failed"


def test_null_stats_are_empty_and_unknown_keys_are_kept():
    assert _read(None).stats == AttemptStats() and _read(None).to_dict()["stats"] == {}
    odd = _read({"from_a_later_version": [1]}).stats
    assert odd.model_extra == {"from_a_later_version": [1]}
    assert odd.texts_to_judge() == {} and odd.no_answer_reason() is None


def test_only_the_keys_given_are_written():
    assert InSightO3Stats(n_search_calls=1).to_dict() == {"n_search_calls": 1}
    assert InSightO3Stats(n_search_calls=1, protocol_error=None).to_dict() == {
        "n_search_calls": 1,
        "protocol_error": None,
    }
    judged = {"chain": TextVerdict(status=VerdictStatus.WRONG, extracted_answer=None, has_answer=False)}
    v = InsightVStats(chain="c", requests=2).with_verdicts(judged)
    assert list(v.to_dict()) == ["chain", "requests", "judged"]
    with pytest.raises(TypeError, match="no other texts"):
        ToolLoopStats(requests=1).with_verdicts(judged)


@pytest.mark.parametrize(
    ("stats", "field"),
    [
        ([1], "eval_result.stats' must be dict or null"),
        ({"n_search_calls": "2"}, "eval_result.stats.insight_o3.n_search_calls"),
        ({"n_search_calls": True}, "eval_result.stats.insight_o3.n_search_calls"),
        ({"n_search_calls": 1, "status": "bogus"}, "eval_result.stats.insight_o3.status"),
        ({"lost": "nobody"}, "eval_result.stats.insight_v.lost"),
        ({"judged": {"chain": {"status": "correct"}}}, "eval_result.stats.insight_v.judged.chain.extracted_answer"),
        ({"zooms": "1"}, "eval_result.stats.tool_loop.zooms"),
    ],
)
def test_a_malformed_value_names_its_field(stats, field):
    with pytest.raises(RecordError, match="f:1: field '" + field.replace(".", r"\.")):
        _read(stats)
