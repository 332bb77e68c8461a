"""Failure attribution from the records alone: one planted record per bucket (InSight-o3 and single
model), the D.3 crop levels and the D.4 split, the evidence annotations of O3-Bench and TreeBench, and
the numbers in ``eval_metrics.json``."""

from __future__ import annotations

import pytest

from insight_o3.evaluation.attribution import BUCKETS, attribute, attribution_metrics, crop_quality
from insight_o3.evaluation.metrics import compute_metrics, summarize
from insight_o3.protocol.evidence import EvidenceError, evidence_boxes
from tests.support.planted import T1, T2, episode, single, two_agent

HIT_BOTH = [T1, (550.0, 450.0, 750.0, 650.0)]  # T1 exactly; T2 inside a crop 4x its area
HALF_T2 = (650.0, 500.0, 900.0, 700.0)  # covers half of T2 only (a truncated target)
FAR = (800.0, 0.0, 1000.0, 100.0)

#: (record, expected bucket, expected D.4 blame)
PLANTED = [
    (episode("s0", "correct", [T1]), "correct", None),
    (episode("s1", "failed"), "lost", None),
    (episode("s2", "invalid", [T1], episode_status="format_failed"), "format_failure", "vreasoner"),
    (episode("s3", "invalid", [], episode_status="search_after_limit"), "format_failure", "vreasoner"),
    (episode("s4", "wrong", [None, None]), "not_found", "vsearcher"),
    (episode("s5", "invalid", [T1], episode_status="search_invalid"), "not_found", "vsearcher"),
    (episode("s6", "wrong", []), "no_search", "vreasoner"),
    (episode("s7", "wrong", [T1, FAR]), "crop_missed", "vsearcher"),  # T2 never seen
    (episode("s8", "wrong", [T1, HALF_T2]), "crop_missed", "vsearcher"),  # T2 truncated
    (episode("s9", "wrong", HIT_BOTH), "crop_hit_wrong", "vreasoner"),
    (episode("s10", "wrong", [T1], targets=None), "crops_unannotated", "unattributed"),
    (episode("s11", "wrong", [T1, None], has_answer=False), "format_failure", "vreasoner"),
    (single("s12", "wrong"), "wrong_answer", None),
    (single("s13", "incomplete", finish_reason="length"), "format_failure", None),
    (single("s14", "wrong", has_answer=False), "format_failure", None),
    (single("s15", "wrong", crops=[T1, T2]), "crop_hit_wrong", None),  # the Table 6 oracle: evidence given
    (single("s16", "correct", crops=[T1, T2]), "correct", None),
    (single("s17", "failed"), "lost", None),
    # Insight-V: the chain's own verdict against the summary's
    (two_agent("s18", "correct", "wrong"), "summary_rescued", None),
    (two_agent("s19", "wrong", "correct"), "summary_overruled", None),
    (two_agent("s20", "correct", "wrong", chain_has_answer=False), "correct", None),  # a chain without an answer
    (two_agent("s21", "wrong", "incomplete", chain_has_answer=False, category="map"), "wrong_answer", None),
    (two_agent("s22", "correct", "correct"), "correct", None),
]


@pytest.mark.parametrize("rec,bucket,blame", PLANTED, ids=[r.sample_key for r, _, _ in PLANTED])
def test_each_planted_record_lands_in_its_bucket(rec, bucket, blame):
    a = attribute(rec)
    assert (a.bucket, a.blame) == (bucket, blame)
    assert a.insight_o3 == (rec.sample_key in {f"s{i}" for i in range(12)})


def test_every_bucket_is_planted():
    assert {b for _, b, _ in PLANTED} == set(BUCKETS)


def test_evidence_coverage_and_d3_crop_levels():
    hit = attribute(PLANTED[9][0])
    assert hit.evidence_coverage == 1.0 and hit.target_coverage == {"1": 1.0, "3": 1.0}
    assert hit.crop_quality == ["high", "high"]  # T2 fills 1/4 of its crop: just "high"
    half = attribute(PLANTED[8][0])
    assert half.evidence_coverage == 0.5 and half.target_coverage["3"] == pytest.approx(0.5)
    assert half.crop_quality == ["high", "low"]  # a truncated target is D.3 "low"
    # a crop holding a target with too much context is "medium"; one holding none is "low"
    assert crop_quality((0, 0, 1000, 800), [T1]) == "medium"
    assert crop_quality((50, 50, 350, 250), [T1]) == "high"
    assert crop_quality(FAR, [T1, T2]) == "low"
    # a lower coverage threshold lets half the evidence count as hit
    assert attribute(PLANTED[8][0], coverage_threshold=0.5).bucket == "crop_hit_wrong"
    # the whole image shown again is not a crop; a repeated crop counts once
    assert attribute(episode("r", "wrong", [(0, 0, 1000, 800)])).n_crops == 0
    assert attribute(episode("r", "wrong", [T1, T1])).n_crops == 1


def test_evidence_of_o3_bench_and_treebench_annotations():
    o3 = {"target_layouts": [3, "1"], "layout_infos": {"1": {"bbox": [1, 2, 3, 4]}, "3": {"bbox": [5, 6, 7, 8]}}}
    assert [(e.id, e.box) for e in evidence_boxes(o3)] == [("3", (5, 6, 7, 8)), ("1", (1, 2, 3, 4))]
    listed = {"target_layouts": [7], "layout_infos": [{"layout_id": 7, "bbox": [0, 0, 5, 5]}]}
    assert evidence_boxes(listed)[0].box == (0, 0, 5, 5)
    inline = {"target_layouts": [{"bbox": [0, 0, 2, 2]}]}
    assert evidence_boxes(inline)[0].id == "#0"
    tree = {"target_instances": "[[11.0, 1849.0, 1499.0, 2249.0], [710.0, 1786.0, 895.0, 1970.0]]"}
    assert [e.box for e in evidence_boxes(tree)] == [(11.0, 1849.0, 1499.0, 2249.0), (710.0, 1786.0, 895.0, 1970.0)]
    assert evidence_boxes({"question": "q"}) is None
    bad = {"target_layouts": [9, 1], "layout_infos": {"1": {"bbox": [3, 3, 1, 1]}}}
    assert evidence_boxes(bad) == []  # lenient for attribution
    with pytest.raises(EvidenceError, match=r"m.jsonl:4: field 'layout_infos' has no layout '9'"):
        evidence_boxes(bad, "m.jsonl:4", strict=True)
    with pytest.raises(EvidenceError, match=r"field 'layout_infos.1.bbox' must be"):
        evidence_boxes({**bad, "target_layouts": [1]}, "m.jsonl:4", strict=True)


def test_trial_metrics_count_buckets_per_category_and_the_d4_split():
    recs = [r for r, _, _ in PLANTED]
    m = compute_metrics(recs)
    expected: dict[str, int] = {b: 0 for b in BUCKETS}
    for _, b, _ in PLANTED:
        expected[b] += 1
    assert m["attribution"] == expected
    assert m["attribution_ratio"]["crop_missed"] == pytest.approx(2 / len(PLANTED))
    assert m["category_attribution"]["chart"]["wrong_answer"] == 1
    assert m["category_attribution"]["map"]["crop_missed"] == 2
    # D.4 split over the InSight-o3 episodes' 10 errors (s2..s11): vReasoner s2 s3 s6 s9 s11, vSearcher s4 s5 s7 s8
    assert m["error_split"] == {"vreasoner": 5, "vsearcher": 4, "unattributed": 1, "errors": 10}
    assert m["error_split_ratio"]["vsearcher"] == pytest.approx(0.4)
    assert m["crop_quality"]["low"] >= 2 and m["evidence_coverage"]["n"] > 0
    # single-model trials have no D.4 split; the summary averages buckets over trials
    m1 = attribution_metrics([r for r, _, _ in PLANTED[12:]])
    assert "error_split" not in m1
    s = summarize([m, m])
    assert s["attribution"]["crop_missed"] == {"mean": 2.0, "std": 0.0}
