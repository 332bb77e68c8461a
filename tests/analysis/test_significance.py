"""Paired statistics on planted outcomes: the sign-flip test against scipy's permutation test, McNemar's
(descriptive) counts against their closed forms, the Wilson interval against scipy's, the paired score
interval's degenerate cases, and compare_pair's treatment of unequal trial counts and failed items."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from insight_o3.analysis.significance import (
    PairingError,
    accuracy_interval,
    compare_pair,
    difference_interval,
    mcnemar,
    mcnemar_pvalue,
    outcomes,
    run_accuracy,
    sign_flip_pvalue,
    wilson,
)
from insight_o3.evaluation.schema import EvalRecord


def _trials(correct: np.ndarray, categories: list[str], failed=()) -> list[list[EvalRecord]]:
    """Records of a run whose (sample, trial) correctness is ``correct[i, k]``; ``failed``: (i, k) lost."""
    n, t = correct.shape
    return [
        [
            EvalRecord.from_dict(
                {
                    "sample_key": f"q{i}",
                    "index": i,
                    "category": categories[i],
                    "trial": k,
                    "eval_result": {
                        "status": "failed" if (i, k) in failed else ("correct" if correct[i, k] else "wrong")
                    },
                }
            )
            for i in range(n)
        ]
        for k in range(t)
    ]


def _planted(n=400, b=20, c=44):
    """One trial: A right/B wrong on ``b`` samples, A wrong/B right on ``c``, the rest concordant."""
    a = np.zeros((n, 1), bool)
    bb = np.zeros((n, 1), bool)
    a[:b] = True  # A right, B wrong
    bb[b : b + c] = True  # A wrong, B right
    a[b + c : b + c + 150] = bb[b + c : b + c + 150] = True  # both right
    cats = ["chart" if i % 2 else "map" for i in range(n)]
    return a, bb, cats


def test_mcnemar_counts_and_pvalue_match_their_closed_form():
    a, b, _ = _planted()
    m = mcnemar(a, b)
    assert (m.n, m.b, m.c) == (400, 20, 44)
    assert m.statistic == pytest.approx((abs(20 - 44) - 1) ** 2 / 64)
    exact = 2 * sum(math.comb(64, k) for k in range(0, 21)) / 2**64  # two-sided binomial, b < c
    assert m.pvalue == pytest.approx(exact, rel=1e-9)
    assert m.pvalue_chi2 == pytest.approx(math.erfc(math.sqrt(m.statistic / 2)), rel=1e-9)  # chi2(1) tail
    assert m.to_dict()["descriptive"] is True
    none = mcnemar(a, a)
    assert (none.b, none.c, none.statistic, none.pvalue) == (0, 0, 0.0, 1.0)
    for x, y in [(3, 9), (0, 5), (7, 7), (1, 0)]:
        assert mcnemar_pvalue(x, y) == pytest.approx(stats.binomtest(x, x + y, 0.5).pvalue, rel=1e-12)


def test_sign_flip_test_equals_scipys_permutation_test():
    rng = np.random.default_rng(4)
    for n in (6, 11):
        d = rng.choice([-1, -2 / 3, -1 / 3, 0, 1 / 3, 2 / 3, 1], n)
        ref = stats.permutation_test(
            (np.zeros(n), d),
            lambda x, y, axis: np.mean(y - x, axis=axis),
            permutation_type="samples",
            vectorized=True,
            n_resamples=10**5,  # more than 2^n: scipy enumerates every sign vector too
        )
        assert float(sign_flip_pvalue(d)) == pytest.approx(ref.pvalue, rel=1e-9)
    d = rng.normal(0.1, 0.5, 60)  # Monte Carlo: close to the exact value's normal approximation
    assert float(sign_flip_pvalue(d, 20_000, seed=1)) == pytest.approx(
        2 * stats.norm.sf(abs(d.mean()) / math.sqrt((d**2).mean() / 60)), abs=0.01
    )
    assert float(sign_flip_pvalue(np.zeros(30))) == 1.0  # no difference at all


def test_wilson_interval_against_scipy_and_at_the_extremes():
    x = np.r_[np.ones(130), np.zeros(270)]
    ref = stats.binomtest(130, 400).proportion_ci(0.95, method="wilson")
    lo, hi = accuracy_interval(x, np.ones(400))  # one trial: effective n = n (times the df factor ~1.005)
    assert (lo, hi) == (pytest.approx(ref.low, abs=0.002), pytest.approx(ref.high, abs=0.002))
    lo, hi = accuracy_interval(np.ones(40), np.full(40, 3))  # all correct: not [1, 1]
    assert hi == 1.0 and 0.89 < lo < 0.92
    lo, hi = accuracy_interval(np.zeros(5), np.full(5, 3))
    assert lo == 0.0 and hi > 0.4


def test_wilson_takes_a_non_integer_effective_size():
    """The accuracy interval uses a non-integer effective n; statsmodels' Wilson interval (what ``wilson``
    calls) must then be the score interval's closed form, not a rounded or refused count."""
    z = stats.norm.ppf(0.975)
    p, n = np.array([0.0, 0.3, 0.55, 1.0]), np.array([5.0, 12.7, 3.3, 40.25])
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    lo, hi = wilson(p, n)
    np.testing.assert_allclose(lo, np.clip(centre - half, 0, 1), atol=1e-12)
    np.testing.assert_allclose(hi, np.clip(centre + half, 0, 1), atol=1e-12)


def test_paired_score_interval_is_never_degenerate():
    for xa, xb in [(np.ones(10), np.ones(10)), (np.zeros(50), np.ones(50)), (np.full(8, 0.5), np.full(8, 0.5))]:
        m = np.ones(len(xa))
        lo, hi = difference_interval(xa, m, xb, m)
        d = xb.mean() - xa.mean()
        assert lo < hi and lo <= d <= hi and -1 <= lo and hi <= 1
    assert difference_interval(np.zeros(50), np.ones(50), np.ones(50), np.ones(50))[0] > 0.8


def test_compare_pair_uses_every_trial_of_each_run_and_lists_flips():
    rng = np.random.default_rng(7)
    n = 120
    a = rng.random((n, 1)) < 0.5  # A: one trial
    b = np.repeat(a, 3, axis=1)  # B: three trials
    fixed, broken = [3, 10, 50], [7]
    b[fixed, :] = True
    a[fixed, :] = False
    a[broken] = True
    b[broken, :2], b[broken, 2] = False, True
    cats = ["map" if i < 60 else "chart" for i in range(n)]
    res = compare_pair("A", outcomes(_trials(a, cats)), "B", outcomes(_trials(b, cats)), n_resamples=2000)
    assert (res.trials_a, res.trials_b, res.excluded) == (1, 3, 0)
    # the difference uses all three of B's trials, not B's trial 0 only
    assert res.overall.difference == pytest.approx(b.mean(axis=1).mean() - a.mean())
    assert res.overall.low <= res.overall.difference <= res.overall.high
    assert res.overall.pvalue == pytest.approx(float(sign_flip_pvalue(b.mean(axis=1) - a[:, 0], 2000)))
    assert res.overall.mcnemar.n == n  # descriptive pairs: trial 0 against trial 0
    assert {f.key for f in res.flips} == {f"q{i}" for i in fixed + broken}
    assert [f.change for f in res.flips[:3]] == ["fixed"] * 3 and res.flips[-1].key == "q7"
    assert res.flips[-1].statuses_b == ["wrong", "wrong", "correct"]
    assert res.categories["map"].n == 60
    with pytest.raises(PairingError):
        compare_pair("A", outcomes(_trials(a, cats)), "C", outcomes(_trials(a[:10], cats[:10])))


def test_failed_items_are_left_out_and_counted_unless_counted_as_wrong():
    a = np.ones((6, 2), bool)
    b = np.ones((6, 2), bool)
    cats = ["x"] * 6
    oa = outcomes(_trials(a, cats))
    ob = outcomes(_trials(b, cats, failed={(0, 0), (0, 1), (1, 0)}))  # q0 lost entirely, q1 in one trial
    assert (ob.failed_items(), ob.failed_samples()) == (3, 1)
    acc, _ = run_accuracy(ob)
    assert (acc.mean, acc.n) == (1.0, 5)  # q1 keeps its judged trial; q0 leaves
    res = compare_pair("A", oa, "B", ob)
    assert res.excluded == 1 and res.overall.n == 5 and res.flips == [] and res.overall.difference == 0.0
    wrong = compare_pair("A", oa, "B", ob, failed_as_wrong=True)
    assert wrong.excluded == 0 and [f.key for f in wrong.flips] == ["q0", "q1"]
    assert run_accuracy(ob, failed_as_wrong=True)[0].mean == pytest.approx(9 / 12)
    with pytest.raises(PairingError, match="every item was lost"):
        run_accuracy(outcomes(_trials(a, cats, failed={(i, k) for i in range(6) for k in range(2)})))


def test_outcomes_need_a_record_per_sample_and_trial_and_a_sample():
    trials = _trials(np.ones((3, 2), bool), ["x"] * 3)
    trials[1] = trials[1][:2]
    with pytest.raises(PairingError, match="trial 1 has no record for 1 sample"):
        outcomes(trials)
    with pytest.raises(PairingError, match="holds no samples"):
        outcomes([[], []], name="empty-run")


def test_relabelling_a_runs_trials_changes_nothing():
    """Which trial of A is called trial k is arbitrary; the test, intervals and flips must not depend on it."""
    rng = np.random.default_rng(11)
    a, b = rng.random((40, 3)) < 0.5, rng.random((40, 3)) < 0.6
    cats = ["x"] * 40
    ob = outcomes(_trials(b, cats))
    ref = compare_pair("A", outcomes(_trials(a, cats)), "B", ob, n_resamples=2000)
    for order in ([2, 0, 1], [1, 2, 0]):
        res = compare_pair("A", outcomes(_trials(a[:, order], cats)), "B", ob, n_resamples=2000)
        o, r = res.overall, ref.overall
        assert (o.pvalue, o.low, o.high, o.bootstrap) == (r.pvalue, r.low, r.high, r.bootstrap)
        assert [f.key for f in res.flips] == [f.key for f in ref.flips]
