"""Paired statistics on a planted flip set: McNemar's statistic and p-values against their closed forms,
the paired cluster-bootstrap interval against the normal approximation (and exact degenerate cases),
Cohen's kappa against a hand count, and the flipped samples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from insight_o3.evaluation.schema import EvalRecord
from insight_o3.evaluation.significance import (
    PairingError,
    accuracy_ci,
    cohen_kappa,
    compare_pair,
    difference_ci,
    mcnemar,
    outcomes,
)


def _trials(correct: np.ndarray, categories: list[str]) -> list[list[EvalRecord]]:
    """Records of a run whose (sample, trial) correctness is ``correct[i, k]``."""
    n, t = correct.shape
    return [
        [
            EvalRecord.from_dict(
                {
                    "sample_key": f"q{i}",
                    "index": i,
                    "category": categories[i],
                    "trial": k,
                    "eval_result": {"status": "correct" if correct[i, k] else "wrong"},
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


def test_mcnemar_matches_its_closed_form():
    a, b, _ = _planted()
    m = mcnemar(a, b)
    assert (m.n, m.b, m.c) == (400, 20, 44)
    assert m.statistic == pytest.approx((abs(20 - 44) - 1) ** 2 / 64)
    exact = 2 * sum(math.comb(64, k) for k in range(0, 21)) / 2**64  # two-sided binomial, b < c
    assert m.pvalue == pytest.approx(exact, rel=1e-9)
    assert m.pvalue_chi2 == pytest.approx(math.erfc(math.sqrt(m.statistic / 2)), rel=1e-9)  # chi2(1) tail
    none = mcnemar(a, a)
    assert (none.b, none.c, none.statistic, none.pvalue) == (0, 0, 0.0, 1.0)


def test_paired_bootstrap_interval_matches_the_normal_approximation():
    a, b, _ = _planted()
    xa, xb = a.mean(axis=1), b.mean(axis=1)
    lo, hi = difference_ci(xa, xb, n_resamples=20_000, seed=1)
    d = xb - xa
    se = d.std() / math.sqrt(len(d))  # plug-in standard error of a mean of paired differences
    assert d.mean() == pytest.approx((44 - 20) / 400)
    assert lo == pytest.approx(d.mean() - 1.959964 * se, abs=0.006)
    assert hi == pytest.approx(d.mean() + 1.959964 * se, abs=0.006)
    # one run's accuracy interval: the binomial normal approximation
    p = xb.mean()
    lo, hi = accuracy_ci(xb, n_resamples=20_000, seed=1)
    se = math.sqrt(p * (1 - p) / len(xb))
    assert (lo, hi) == (pytest.approx(p - 1.959964 * se, abs=0.006), pytest.approx(p + 1.959964 * se, abs=0.006))
    # degenerate cases are exact: identical runs, and B right wherever A is wrong and vice versa
    assert difference_ci(xa, xa) == (0.0, 0.0)
    assert difference_ci(np.zeros(50), np.ones(50)) == (1.0, 1.0)
    # the same seed gives the same interval
    assert difference_ci(xa, xb, seed=3) == difference_ci(xa, xb, seed=3)


def test_compare_pair_on_samples_times_trials_and_its_flips():
    rng = np.random.default_rng(7)
    n, t = 120, 3
    a = rng.random((n, t)) < 0.5
    b = a.copy()
    fixed, broken = [3, 10, 50], [7]
    b[fixed, :] = True
    a[fixed, :] = False
    a[broken, :2] = True
    b[broken, :2] = False
    cats = ["map" if i < 60 else "chart" for i in range(n)]
    oa = outcomes(_trials(a, cats))
    ob = outcomes(_trials(b, cats))
    res = compare_pair("A", oa, "B", ob, n_resamples=2000)
    assert res.trials == 3
    # McNemar over all samples x trials pairs
    assert (res.mcnemar.b, res.mcnemar.c) == (int((a & ~b).sum()), int((~a & b).sum()))
    assert res.mcnemar.n == n * t
    assert res.difference == pytest.approx(b.mean() - a.mean())
    assert res.low <= res.difference <= res.high
    # flips: the planted samples, biggest change first
    assert {f.key for f in res.flips} == {f"q{i}" for i in fixed + broken}
    assert [f.change for f in res.flips[:3]] == ["fixed"] * 3 and res.flips[-1].key == "q7"
    assert res.flips[-1].statuses_a == ["correct", "correct", a[7, 2] and "correct" or "wrong"]
    # per category: the same statistics on the category's rows
    assert res.categories["map"]["n"] == 60
    assert res.categories["map"]["mcnemar"]["c"] == int((~a[:60] & b[:60]).sum())
    # runs on other samples cannot be paired
    with pytest.raises(PairingError):
        compare_pair("A", oa, "C", outcomes(_trials(a[:10], cats[:10])))


def test_outcomes_need_a_record_per_sample_and_trial():
    trials = _trials(np.ones((3, 2), bool), ["x"] * 3)
    trials[1] = trials[1][:2]
    with pytest.raises(PairingError, match="trial 1 has no record for 1 sample"):
        outcomes(trials)


def test_cohen_kappa_against_a_hand_count():
    # 10 items: both "correct" on 4, both "wrong" on 3, judge 1 only on 2, judge 2 only on 1
    x = ["correct"] * 4 + ["wrong"] * 3 + ["correct"] * 2 + ["wrong"]
    y = ["correct"] * 4 + ["wrong"] * 3 + ["wrong"] * 2 + ["correct"]
    po = 7 / 10
    pe = (6 / 10) * (5 / 10) + (4 / 10) * (5 / 10)
    assert cohen_kappa(x, y) == pytest.approx((po - pe) / (1 - pe))
    assert cohen_kappa(x, x) == 1.0
    assert math.isnan(cohen_kappa(["correct"] * 3, ["correct"] * 3))  # no variation: undefined
