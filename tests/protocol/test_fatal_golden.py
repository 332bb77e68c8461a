"""The fatal rule and the fatal mask against OpenSearch-VL's released code, run on generated cases
(``tests/golden/opensearch_vl/fatal.json``, recorded by ``tests/golden/record_fatal_goldens.py``).

The release flags two episodes our rule does not (``docs/fidelity.md`` FG8): one that ends without an answer and
without a cascade (fatal at ``L``, every step kept: its mask is unchanged, only the clamp applies) and one with no step
at all (a vSearcher episode always has a turn). Both are asserted here as the recorded deviation, so a change on
either side fails."""

from __future__ import annotations

import json

import pytest

from insight_o3.protocol.fatal import DEFAULT_K, fatal_mask, fatal_step, mask_start
from tests.support.golden import GOLDEN_DIR

GOLDEN = json.loads((GOLDEN_DIR / "opensearch_vl" / "fatal.json").read_text())


def test_k_is_the_released_threshold():
    assert GOLDEN["threshold"] == DEFAULT_K == 3


@pytest.mark.parametrize("case", GOLDEN["fatal_step"], ids=lambda c: f"{c['termination']}-{c['errors']}")
def test_fatal_step_matches_the_release(case):
    index, reason = case["released"]
    ours = fatal_step(case["errors"], DEFAULT_K)
    if reason == "no_steps":  # the release: an episode without a step is fatal at 0
        assert case["errors"] == [] and ours is None
    elif reason in ("", "consecutive_errors"):  # an answer without a cascade, or a cascade: the same step
        assert ours == index
    else:  # no answer, no cascade: the release marks it fatal after its last step (FG8); the paper's rule does not
        assert case["termination"] != "answer" and index == len(case["errors"]) and ours is None


def test_the_fatal_step_cases_cover_both_error_markings_and_every_outcome():
    reasons = {(c["termination"], c["released"][1]) for c in GOLDEN["fatal_step"]}
    assert {("answer", ""), ("answer", "consecutive_errors"), ("max_turns", "consecutive_errors")} <= reasons
    assert {c["marked_by"] for c in GOLDEN["fatal_step"] if any(c["errors"])} == {"flag", "observation"}


def test_fatal_mask_matches_the_release():
    checked = 0
    for case in GOLDEN["mask"]:
        starts, fatal = case["step_starts"], case["fatal"]
        start = mask_start(starts, fatal) if fatal < len(starts) else None  # one past the last step: nothing masked
        assert fatal_mask(case["mask"], start) == case["released"], case
        checked += 1
    assert checked == len(GOLDEN["mask"]) > 1000
