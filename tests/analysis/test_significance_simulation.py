"""The statistics ``compare`` prints, checked by simulation (fixed seeds, a few thousand replicates, seconds).

Two generative models (``tests/support/stat_models.py``): questions on shared images whose per-question
differences between the systems correlate within an image (345 questions on 204 images, as O3-Bench), and one
run adding a share of the other's misses (every discordant pair one way). Checked, at a nominal 95 %:

* the sign-flip test over images (the default clusters) holds its level, 3–7 %, where the same test over
  questions — what ``compare`` did before it clustered — does not (above 7 %); McNemar's test on pooled
  (sample, trial) pairs fails in the unclustered model too;
* the difference's interval (Bonett–Price, cluster-robust) covers ≥ 93 % at 10 samples and more in both models,
  and at 5, 10 and 40 samples with questions of different difficulty; the same interval over questions does not
  with correlated images; the accuracy's interval covers too;
* the minimum detectable effect is found about 80 % of the time; the standard error the variance components
  predict for more trials is the one measured with them; the percentile bootstrap is too narrow with few
  clusters, as the outputs say.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.optimize import brentq

from insight_o3.analysis.clusters import Cluster, Design, cluster_labels
from insight_o3.analysis.paired import MIN_CLUSTERS_FOR_BOOTSTRAP
from insight_o3.analysis.power import detectable_effect, variance_components
from insight_o3.analysis.significance import (
    accuracy_interval,
    bootstrap_difference,
    difference_interval,
    mcnemar_pvalue,
    sign_flip_pvalue,
)
from tests.support.stat_models import added_misses_runs, clustered_runs, images_of, population

REPLICATES = 2000
ALPHA = 0.05


def _default_design(images: np.ndarray) -> Design:
    """The clusters ``compare`` uses by default (``--cluster image``) for samples on these images."""
    keys = [f"q{i}" for i in range(len(images))]
    return Design.of(cluster_labels(keys, list(images), Cluster.IMAGE))


def _covered(bounds, truth: float) -> float:
    lo, hi = bounds
    return float(((lo <= truth) & (truth <= hi)).mean())


# ----------------------------------------------------------------------------- level
@pytest.mark.parametrize("trials", [1, 3])
def test_sign_flip_over_images_holds_its_level_where_the_test_over_questions_does_not(trials):
    images = images_of()
    design = _default_design(images)
    assert (design.n, design.count) == (345, 204)
    xa, xb = clustered_runs(np.random.default_rng(5 + trials), images, REPLICATES, trials)
    d = xb - xa
    level = float((sign_flip_pvalue(design.totals(d), 999, seed=1) < ALPHA).mean())
    assert 0.03 <= level <= 0.07, level
    if trials == 3:
        questions = float((sign_flip_pvalue(d, 999, seed=1) < ALPHA).mean())
        assert questions > 0.07, questions  # each question its own unit: too many rejections


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


# ----------------------------------------------------------------------------- coverage
@pytest.mark.parametrize("n_images", [10, 20, 204])
@pytest.mark.parametrize("trials", [1, 3])
def test_intervals_cover_when_images_correlate(n_images, trials):
    images = images_of(n_images=n_images)
    design = _default_design(images)
    shift = 0.6
    p_a, p_b = population(shift)
    xa, xb = clustered_runs(np.random.default_rng(n_images + trials), images, REPLICATES, trials, shift=shift)
    covered = _covered(difference_interval(xb - xa, design), p_b - p_a)
    assert 0.93 <= covered <= 0.995, covered
    m = np.full(xb.shape, trials)
    assert 0.93 <= _covered(accuracy_interval(xb, m, design), p_b) <= 0.995
    if n_images == 204 and trials == 3:  # the same interval with each question its own unit: too narrow
        assert _covered(difference_interval(xb - xa), p_b - p_a) < 0.92


def test_difference_interval_covers_when_one_run_adds_to_the_other():
    """B = A plus 20 % of A's misses (+10 points, one trial): every discordant pair is one way and at 10 samples a
    third of the runs have none. The interval's exact coverage (every count of added samples, weighted by its
    binomial probability) stays ≥ 93 % from 10 to 200 samples, and simulated runs agree."""
    for n in range(10, 201):
        k = np.arange(n + 1)
        d = (np.arange(n) < k[:, None]).astype(float)  # k samples that only B got right
        lo, hi = difference_interval(d)
        assert stats.binom.pmf(k, n, 0.1)[(lo <= 0.1) & (0.1 <= hi)].sum() >= 0.93, n
    for n in (10, 20, 40):
        xa, xb = added_misses_runs(np.random.default_rng(n), n, 4000)
        assert _covered(difference_interval(xb - xa), 0.1) >= 0.93


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
        low, high = difference_interval(b - a)
        assert 0.93 <= _covered((low, high), shift) <= 1.0, (lo, hi, favour, shift)
        assert (high > low).all()  # never degenerate
        p = (lo + hi) / 2 + shift  # B's true accuracy: the mean of q − s + shift
        low, high = accuracy_interval(b, m)
        assert 0.93 <= _covered((low, high), p) <= 1.0, (lo, hi, favour, shift)
        assert (high > low).all()
        if n <= 10:
            bl, bh = _percentile_bootstrap(b[:1000], rng)
            boot_worst = min(boot_worst, _covered((bl, bh), p))
    if n <= 10:
        assert boot_worst < 0.90  # the percentile bootstrap these intervals replace is too narrow here


def test_cluster_bootstrap_is_too_narrow_with_few_clusters():
    """The outputs flag the bootstrap below MIN_CLUSTERS_FOR_BOOTSTRAP clusters; at 10 it covers under 90 %."""
    images = images_of(n_images=10)
    design = _default_design(images)
    assert design.count < MIN_CLUSTERS_FOR_BOOTSTRAP
    p_a, p_b = population(0.6)
    xa, xb = clustered_runs(np.random.default_rng(21), images, 400, 1, shift=0.6)
    hits = [
        lo <= p_b - p_a <= hi
        for lo, hi in (bootstrap_difference(d, design, 999, seed=i) for i, d in enumerate(xb - xa))
    ]
    assert np.mean(hits) < 0.90


def test_an_all_correct_run_gets_a_wilson_width_interval():
    lo, hi = accuracy_interval(np.ones(40), np.full(40, 3))
    assert hi == 1.0 and 0.89 < lo < 0.92  # Wilson over 40 samples: [91.2, 100] before the df correction
    lo, hi = accuracy_interval(np.ones(1), np.ones(1))
    assert 0.0 < lo < 0.3 and hi == 1.0  # one sample: wide, not [1, 1]


# ----------------------------------------------------------------------------- power and trials
def test_the_minimum_detectable_effect_is_found_80_percent_of_the_time():
    images = images_of()
    design = _default_design(images)
    rng = np.random.default_rng(3)
    xa, xb = clustered_runs(rng, images, 300, 3)
    se = np.sqrt(design.variance_of_mean(xb - xa))
    mde = float(np.median([detectable_effect(s, design.count, ALPHA) for s in se]))
    shift = brentq(lambda s: np.subtract(*population(s)[::-1]) - mde, 0.0, 5.0)
    xa, xb = clustered_runs(rng, images, REPLICATES, 3, shift=shift)
    power = float((sign_flip_pvalue(design.totals(xb - xa), 999, seed=2) < ALPHA).mean())
    assert 0.74 <= power <= 0.86, (mde, power)


def test_variance_components_predict_the_error_with_more_trials():
    """Run with 2 trials, predict the standard error with 3 times as many; measure it with 6 trials."""
    images = images_of()
    design = _default_design(images)
    rng = np.random.default_rng(9)
    xa, xb = clustered_runs(rng, images, 300, 2)
    m = np.full(xa.shape[-1], 2.0)
    comps = [variance_components(a, m, b, m, design, ALPHA) for a, b in zip(xa, xb)]
    predicted = float(np.mean([c.se(3) for c in comps if c is not None]))
    xa6, xb6 = clustered_runs(rng, images, REPLICATES, 6)
    measured = float((xb6 - xa6).mean(axis=-1).std())
    assert predicted == pytest.approx(measured, rel=0.06)
    assert float(np.mean([c.se() for c in comps if c])) == pytest.approx(float((xb - xa).mean(axis=-1).std()), rel=0.06)
