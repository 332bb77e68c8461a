"""The fatal-aware GRPO rule (:mod:`insight_o3.protocol.fatal`) against OpenSearch-VL's equations: the fatal step,
the token mask, the one-sided clamp over group statistics every episode enters."""

from __future__ import annotations

import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from insight_o3.protocol.fatal import (
    FatalMode,
    clamped,
    fatal_mask,
    fatal_step,
    group_advantages,
    mask_start,
)

E, OK = True, False  # a step answered with a tool error / a step whose tool ran


# ----------------------------------------------------------------------------- f_i
@pytest.mark.parametrize(
    ("errors", "k", "want"),
    [
        ([], 3, None),  # no step
        ([OK, OK, OK], 3, None),  # no error: f = L + 1
        ([E, E, E], 3, 0),  # the cascade from the first step: nothing valid
        ([OK, E, E, E], 3, 1),  # K = 3 from step 1
        ([OK, E, E, E, E, E], 3, 1),  # the earliest start of a run, not the run's end
        ([E, OK, E, OK, E, OK], 3, None),  # errors that are not consecutive
        ([E, E, OK, E, E, OK, E, E], 3, None),  # runs of K - 1
        ([E, E, OK, E, E, E], 3, 3),  # a shorter run first, the fatal one later
        ([OK, E], 1, 1),  # K = 1: the first error is fatal
        ([E], 1, 0),
        ([OK, OK, E], 1, 2),
        ([E, E, E, E, E, E], 7, None),  # K > L: never fatal
        ([E, E, E, E, E, E], 6, 0),  # K = L
    ],
)
def test_fatal_step(errors, k, want):
    assert fatal_step(errors, k) == want


def test_k_must_be_positive():
    with pytest.raises(ValueError, match="at least 1"):
        fatal_step([E], 0)


@given(st.lists(st.booleans(), max_size=12), st.integers(1, 5))
def test_fatal_step_is_the_earliest_start_of_k_consecutive_errors(errors, k):
    starts = [i for i in range(len(errors) - k + 1) if all(errors[i : i + k])]
    assert fatal_step(errors, k) == (starts[0] if starts else None)


# ----------------------------------------------------------------------------- M(y_t) = M_gen(y_t) * 1[s(t) < f]
def test_fatal_mask_zeroes_the_fatal_step_and_every_later_token_and_keeps_observations_masked():
    # steps start at 0, 4, 9 (3 generated + 1 observation, 3 + 2, 3 + 1); fatal at step 1
    gen = [1, 1, 1, 0, 1, 1, 1, 0, 0, 1, 1, 1, 0]
    start = mask_start([0, 4, 9], 1)
    assert start == 4
    assert fatal_mask(gen, start) == [1, 1, 1, 0] + [0] * 9
    assert fatal_mask(gen, None) == gen  # not fatal: the generation mask
    assert fatal_mask(gen, mask_start([0, 4, 9], 0)) == [0] * 13  # fatal at the first step: nothing trains
    assert mask_start([0, 4, 9], None) is None
    with pytest.raises(ValueError):
        mask_start([0, 4], 2)


# ----------------------------------------------------------------------------- Â = r~ (non-fatal), max(r~, 0) (fatal)
def _normalised(rewards, eps=1e-6):
    mean, std = statistics.fmean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + eps) for r in rewards]


def test_no_fatal_episode_is_vanilla_grpo_in_every_mode():
    rewards = [0.2, 1.0, 0.0, 0.56, 0.2]
    for mode in FatalMode:
        assert group_advantages(rewards, [False] * 5, mode) == _normalised(rewards)


def test_fatal_episodes_enter_the_statistics_and_only_their_negative_advantages_are_clamped():
    rewards = [0.2, 1.0, 0.0, 0.56, 0.2]
    fatal = [True, True, False, False, False]  # one fatal above the mean (1.0), one below (0.2)
    base = _normalised(rewards)  # the statistics of all five: the fatal ones included
    got = group_advantages(rewards, fatal, FatalMode.FATAL_MASK_CLAMP)
    assert base[0] < 0 and got[0] == 0.0  # below the mean: no penalty for its valid prefix
    assert base[1] > 0 and got[1] == base[1]  # above the mean: reinforced as it is
    assert got[2:] == base[2:]  # the non-fatal episodes keep the unbiased statistics' advantages
    # the masks alone leave the advantage as it is
    assert group_advantages(rewards, fatal, FatalMode.FATAL_MASK) == base
    assert group_advantages(rewards, fatal, FatalMode.HARD_MASK) == base


def test_all_fatal():
    rewards = [0.2, 0.0, 0.2, 0.1]
    got = group_advantages(rewards, [True] * 4, FatalMode.FATAL_MASK_CLAMP)
    assert got == [max(a, 0.0) for a in _normalised(rewards)] and min(got) == 0.0 and max(got) > 0


def test_a_group_of_one_and_equal_rewards():
    assert group_advantages([0.7], [True], FatalMode.FATAL_MASK_CLAMP) == [0.0]
    assert group_advantages([0.2, 0.2], [True, False], FatalMode.FATAL_MASK_CLAMP) == [0.0, 0.0]


@given(
    st.lists(st.tuples(st.floats(0, 1, allow_nan=False), st.booleans()), min_size=2, max_size=10),
)
def test_clamp_properties(group):
    rewards, fatal = [r for r, _ in group], [f for _, f in group]
    base = group_advantages(rewards, fatal, FatalMode.OFF)
    got = group_advantages(rewards, fatal, FatalMode.FATAL_MASK_CLAMP)
    for a, g, f in zip(base, got, fatal):
        assert g == clamped(a, f) and g >= a
        assert (g >= 0) if f else (g == a)
