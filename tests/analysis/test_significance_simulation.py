"""The statistics of ``compare`` checked by simulation (fixed seeds, a few thousand replicates, seconds).

* Type-I error of the primary test — the paired sign-flip test over samples on per-sample accuracy — when
  the two systems have the same average accuracy but each question favours one of them (the realistic
  null: ``p_A = q + s``, ``p_B = q − s`` with ``s = ±0.3`` at random per question, ``T`` trials each):
  within [3 %, 7 %] at a nominal 5 % for n = 40 and 200 samples, T = 3 and 5. McNemar's test on the
  pooled (sample, trial) pairs fails the same check (its trials of one question point the same way).
* Coverage of the intervals at n = 5, 10 and 40 samples (T = 1 and 3, accuracies from 50 % to 95 %,
  questions of different difficulty): the accuracy's Wilson interval at the effective sample size and
  the difference's paired score interval stay within [93 %, 100 %] at a nominal 95 %; the paired
  percentile bootstrap over samples they replace does not at small n.
"""

from __future__ import annotations

import numpy as np
import pytest

from insight_o3.analysis.significance import (
    accuracy_interval,
    difference_interval,
    mcnemar_pvalue,
    sign_flip_pvalue,
)

REPLICATES = 2000
ALPHA = 0.05


def _null_runs(rng, n: int, t: int, favour: float = 0.3):
    """``(A, B)`` correctness of shape (replicates, n, t): equal average accuracy, each question favouring one."""
    q = rng.uniform(0.35, 0.65, (REPLICATES, n))
    s = rng.choice([-favour, favour], (REPLICATES, n))
    a = rng.random((REPLICATES, n, t)) < (q + s)[..., None]
    b = rng.random((REPLICATES, n, t)) < (q - s)[..., None]
    return a, b


@pytest.mark.parametrize("n", [40, 200])
@pytest.mark.parametrize("t", [3, 5])
def test_sign_flip_test_holds_its_level_and_pooled_mcnemar_does_not(n, t):
    rng = np.random.default_rng(1000 * n + t)
    a, b = _null_runs(rng, n, t)
    p = sign_flip_pvalue(b.mean(axis=-1) - a.mean(axis=-1), n_resamples=999, seed=1)
    level = float((p < ALPHA).mean())
    assert 0.03 <= level <= 0.07, level
    pooled = mcnemar_pvalue((a & ~b).sum(axis=(1, 2)), (~a & b).sum(axis=(1, 2)))
    assert float((pooled < ALPHA).mean()) > 0.07  # anti-conservative: what the primary test replaces


def _runs(rng, n: int, t: int, lo: float, hi: float, favour: float, shift: float, reps: int = 4000):
    """Per-sample accuracies of two runs: question difficulty ``U(lo, hi)``, each question favouring one
    run by ``favour``, B better by ``shift`` on average (the true difference)."""
    q = rng.uniform(lo, hi, (reps, n))
    s = rng.choice([-favour, favour], (reps, n))
    a = (rng.random((reps, n, t)) < (q + s)[..., None]).mean(axis=-1)
    b = (rng.random((reps, n, t)) < (q - s + shift)[..., None]).mean(axis=-1)
    return a, b


def _percentile_bootstrap(x: np.ndarray, rng, resamples: int = 499):
    idx = rng.integers(0, x.shape[-1], (resamples, x.shape[-1]))
    means = x[:, idx].mean(axis=-1)
    return np.percentile(means, 2.5, axis=1), np.percentile(means, 97.5, axis=1)


CASES = [(0.3, 0.7, 0.2, 0.1), (0.8, 0.85, 0.1, 0.05), (0.9, 0.9, 0.05, 0.0)]


@pytest.mark.parametrize("n", [5, 10, 40])
@pytest.mark.parametrize("t", [1, 3])
def test_intervals_cover_at_small_n(n, t):
    rng = np.random.default_rng(7 * n + t)
    boot_worst = 1.0
    for lo, hi, favour, shift in CASES:
        a, b = _runs(rng, n, t, lo, hi, favour, shift)
        m = np.full(a.shape, t)
        low, high = difference_interval(a, m, b, m)
        covered = float(((low <= shift) & (shift <= high)).mean())
        assert 0.93 <= covered <= 1.0, (lo, hi, favour, shift, covered)
        assert (high > low).all()  # never degenerate
        p = (lo + hi) / 2 + shift  # B's true accuracy: the mean of q − s + shift
        low, high = accuracy_interval(b, m)
        covered = float(((low <= p) & (p <= high)).mean())
        assert 0.93 <= covered <= 1.0, (lo, hi, favour, shift, covered)
        assert (high > low).all()
        if n <= 10:
            bl, bh = _percentile_bootstrap(b[:1000], rng)
            boot_worst = min(boot_worst, float(((bl <= p) & (p <= bh))[:1000].mean()))
    if n <= 10:
        assert boot_worst < 0.90  # the percentile bootstrap these intervals replace is too narrow here


def test_an_all_correct_run_gets_a_wilson_width_interval():
    lo, hi = accuracy_interval(np.ones(40), np.full(40, 3))
    assert hi == 1.0 and 0.89 < lo < 0.92  # Wilson over 40 samples: [91.2, 100] before the df correction
    lo, hi = accuracy_interval(np.ones(1), np.ones(1))
    assert 0.0 < lo < 0.3 and hi == 1.0  # one sample: wide, not [1, 1]
