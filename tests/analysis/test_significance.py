"""Paired statistics on planted outcomes: the sign-flip test against scipy's permutation test (over samples and
over image clusters), its exact enumeration in bounded memory and its smallest attainable p, McNemar's
(descriptive) counts against their closed forms, the Wilson interval against scipy's, the difference's interval
against Bonett and Price's closed form and in its degenerate cases, and compare_pair's clusters, categories
(Holm), unequal trial counts and failed items (both rules side by side)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from insight_o3.analysis.clusters import Cluster, Design
from insight_o3.analysis.outcomes import PairingError, outcomes
from insight_o3.analysis.paired import compare_pair, run_accuracy
from insight_o3.analysis.significance import (
    accuracy_interval,
    difference_interval,
    mcnemar,
    mcnemar_pvalue,
    sign_flip_pvalue,
    smallest_pvalue,
    wilson,
)
from tests.support.planted import outcome_trials


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


def test_difference_interval_is_bonett_and_prices_with_a_t_quantile():
    """One trial, one sample per cluster: the interval is Bonett and Price's (2012) adjusted Wald interval —
    one pseudo-pair each way — from the discordant counts alone, with t_{n−1} for their z."""
    for n, n12, n21 in [(30, 0, 4), (30, 3, 9), (12, 0, 0), (200, 17, 31), (5, 5, 0)]:
        a = np.r_[np.ones(n12), np.zeros(n21), np.ones(n - n12 - n21)]  # A right on the first n12
        b = np.r_[np.zeros(n12), np.ones(n21), np.ones(n - n12 - n21)]  # B right on the next n21
        p12, p21 = (n12 + 1) / (n + 2), (n21 + 1) / (n + 2)
        half = stats.t.ppf(0.975, n - 1) * math.sqrt((p12 + p21 - (p21 - p12) ** 2) / (n + 2))
        lo, hi = difference_interval(b - a)
        assert (lo, hi) == (
            pytest.approx(max(p21 - p12 - half, -1), abs=1e-12),
            pytest.approx(min(p21 - p12 + half, 1), abs=1e-12),
        )


def test_difference_interval_is_never_degenerate():
    for d in [np.zeros(2), np.zeros(10), np.ones(50), np.full(8, 0.5) - 0.5]:
        lo, hi = difference_interval(d)
        assert lo < hi and -1 <= lo and hi <= 1
    assert difference_interval(np.ones(50))[0] > 0.8


def test_two_identical_runs_of_two_samples_get_a_wide_interval():
    """One right and one wrong in both runs: the correlation of the runs is 1, and Newcombe's interval with
    Pearson's r was [+0.0, +0.0]."""
    o = outcomes(outcome_trials(np.array([[True], [False]]), ["x", "x"]))
    res = compare_pair("A", o, "B", o).overall
    assert res.low < -0.3 and res.high > 0.3 and res.pvalue == 1.0


def test_questions_on_one_image_are_one_cluster():
    """By default the samples sharing an image are flipped, resampled and counted together."""
    rng = np.random.default_rng(3)
    images = ["a", "a", "a", "b", "b", "c", "d", "d", "e", "f", "f", "f"]
    a, b = rng.random((12, 2)) < 0.4, rng.random((12, 2)) < 0.7
    oa, ob = (
        outcomes(outcome_trials(a, ["x"] * 12, images=images)),
        outcomes(outcome_trials(b, ["x"] * 12, images=images)),
    )
    res = compare_pair("A", oa, "B", ob)
    d = b.mean(axis=1) - a.mean(axis=1)
    totals = np.array([d[[0, 1, 2]].sum(), d[[3, 4]].sum(), d[5], d[[6, 7]].sum(), d[8], d[[9, 10, 11]].sum()])
    assert (res.cluster, res.overall.clusters, res.overall.n) == (Cluster.IMAGE, 6, 12)
    ref = stats.permutation_test(
        (np.zeros(6), totals), lambda x, y, axis: np.mean(y - x, axis=axis), permutation_type="samples"
    )
    assert res.overall.pvalue == pytest.approx(ref.pvalue, rel=1e-9) and res.overall.exact
    by_sample = compare_pair("A", oa, "B", ob, cluster=Cluster.SAMPLE)
    assert by_sample.overall.clusters == 12
    assert by_sample.overall.pvalue == pytest.approx(float(sign_flip_pvalue(d)), rel=1e-12)
    assert run_accuracy(oa)[0].clusters == 6 and run_accuracy(oa, cluster=Cluster.SAMPLE)[0].clusters == 12
    # a sample without a recorded image is its own cluster
    assert Design.of(["x", "x", "y"]).count == 2


def test_smallest_attainable_pvalue_is_reported():
    """With five samples the exact test cannot go below 2/2^5 = 0.0625, whatever the data."""
    d = np.ones(5)
    assert float(sign_flip_pvalue(d)) == smallest_pvalue(d) == 0.0625
    assert smallest_pvalue(np.r_[np.ones(7), np.zeros(20)]) == 2 / 2**7  # clusters without a difference cannot help
    assert smallest_pvalue(np.zeros(4)) == 1.0
    assert smallest_pvalue(np.ones(40), n_resamples=999) == 1 / 1000  # Monte Carlo: its resolution
    o = compare_pair(
        "A",
        outcomes(outcome_trials(np.zeros((5, 1), bool), ["x"] * 5)),
        "B",
        outcomes(outcome_trials(np.ones((5, 1), bool), ["x"] * 5)),
    )
    assert o.overall.min_pvalue == 0.0625 and not o.overall.can_be_significant and not o.overall.significant
    assert o.overall.to_dict()["smallest_attainable_pvalue"] == 0.0625


_ENUMERATE = """
import resource, sys
import numpy as np
resource.setrlimit(resource.RLIMIT_AS, (int(sys.argv[1]), int(sys.argv[1])))
from insight_o3.analysis.significance import sign_flip_pvalue
d = np.r_[np.ones(16), -np.ones(6)]
print(float(sign_flip_pvalue(d, n_resamples=2**22)))
"""


def test_exact_enumeration_runs_in_bounded_memory():
    """2^22 sign vectors of 22 samples enumerated under a 1.5 GB address-space cap (one array of them all is
    0.7 GB of ints and as much of floats); the p-value equals the binomial closed form."""
    import subprocess
    import sys

    resource = pytest.importorskip("resource")
    assert resource.RLIMIT_AS
    env = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PATH": "/usr/bin:/bin"}
    cap = str(int(1.5e9))
    out = subprocess.run([sys.executable, "-c", _ENUMERATE, cap], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    # |sum| >= 10 over 22 random signs: sum = 2k - 22 with k ~ Bin(22, 1/2)
    expected = 2 * stats.binom.sf(15, 22, 0.5)
    assert float(out.stdout) == pytest.approx(expected, rel=1e-12)


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
    res = compare_pair("A", outcomes(outcome_trials(a, cats)), "B", outcomes(outcome_trials(b, cats)), n_resamples=2000)
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
        compare_pair("A", outcomes(outcome_trials(a, cats)), "C", outcomes(outcome_trials(a[:10], cats[:10])))


def test_failed_items_are_left_out_and_counted_unless_counted_as_wrong():
    a = np.ones((6, 2), bool)
    b = np.ones((6, 2), bool)
    cats = ["x"] * 6
    oa = outcomes(outcome_trials(a, cats))
    ob = outcomes(outcome_trials(b, cats, failed={(0, 0), (0, 1), (1, 0)}))  # q0 lost entirely, q1 in one trial
    assert (ob.failed_items(), ob.failed_samples()) == (3, 1)
    acc, _ = run_accuracy(ob)
    assert (acc.mean, acc.n) == (1.0, 5)  # q1 keeps its judged trial; q0 leaves
    res = compare_pair("A", oa, "B", ob)
    assert res.excluded == 1 and res.overall.n == 5 and res.flips == [] and res.overall.difference == 0.0
    wrong = compare_pair("A", oa, "B", ob, failed_as_wrong=True)
    assert wrong.excluded == 0 and [f.key for f in wrong.flips] == ["q0", "q1"]
    assert run_accuracy(ob, failed_as_wrong=True)[0].mean == pytest.approx(9 / 12)
    with pytest.raises(PairingError, match="every item was lost"):
        run_accuracy(outcomes(outcome_trials(a, cats, failed={(i, k) for i in range(6) for k in range(2)})))


def test_outcomes_need_a_record_per_sample_and_trial_and_a_sample():
    trials = outcome_trials(np.ones((3, 2), bool), ["x"] * 3)
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
    ob = outcomes(outcome_trials(b, cats))
    ref = compare_pair("A", outcomes(outcome_trials(a, cats)), "B", ob, n_resamples=2000)
    for order in ([2, 0, 1], [1, 2, 0]):
        res = compare_pair("A", outcomes(outcome_trials(a[:, order], cats)), "B", ob, n_resamples=2000)
        o, r = res.overall, ref.overall
        assert (o.pvalue, o.low, o.high, o.bootstrap) == (r.pvalue, r.low, r.high, r.bootstrap)
        assert [f.key for f in res.flips] == [f.key for f in ref.flips]
