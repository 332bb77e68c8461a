"""Cohen's and Fleiss' κ against hand counts, and the coverage of their cluster-bootstrap intervals by
simulation (fixed seeds: three judges with known error rates on responses grouped by sample; two judges whose
disagreements come together on some images, where resampling images — the default clusters — covers and
resampling samples does not)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from insight_o3.analysis.kappa import cohen_kappa, fleiss_kappa, kappa_interval


def test_cohen_kappa_against_a_hand_count():
    # 10 items: both "correct" on 4, both "wrong" on 3, judge 1 only on 2, judge 2 only on 1
    x = ["correct"] * 4 + ["wrong"] * 3 + ["correct"] * 2 + ["wrong"]
    y = ["correct"] * 4 + ["wrong"] * 3 + ["wrong"] * 2 + ["correct"]
    po = 7 / 10
    pe = (6 / 10) * (5 / 10) + (4 / 10) * (5 / 10)
    assert cohen_kappa(x, y) == pytest.approx((po - pe) / (1 - pe))
    assert cohen_kappa(x, x) == 1.0
    assert math.isnan(cohen_kappa(["correct"] * 3, ["correct"] * 3))  # no variation: undefined


def test_fleiss_kappa_against_a_hand_count():
    # 5 items, 3 judges; k = number of "correct" labels per item
    labels = np.array([[1, 1, 1], [1, 1, 0], [0, 0, 0], [1, 0, 0], [1, 1, 1]], bool)
    k = labels.sum(axis=1)
    p_i = (k * (k - 1) + (3 - k) * (2 - k)) / 6  # agreeing pairs of the 3 judges
    p = k.sum() / 15
    pe = p**2 + (1 - p) ** 2
    assert fleiss_kappa(labels) == pytest.approx((p_i.mean() - pe) / (1 - pe))
    assert fleiss_kappa(np.ones((4, 3), bool)) != fleiss_kappa(np.ones((4, 3), bool))  # undefined: NaN


def _judged(rng, samples: int, trials: int, errors=(0.1, 0.15, 0.2)):
    """Labels of judges with the given error rates; a sample's trials mostly share their true verdict."""
    truth = np.repeat(rng.random(samples) < 0.6, trials) ^ (rng.random(samples * trials) < 0.1)
    labels = np.stack([truth ^ (rng.random(samples * trials) < e) for e in errors], axis=1)
    return labels, np.repeat(np.arange(samples), trials)


def test_kappa_intervals_cover_by_simulation():
    rng = np.random.default_rng(3)
    population, _ = _judged(rng, 100_000, 3)
    true_fleiss = fleiss_kappa(population)
    true_cohen = cohen_kappa(population[:, 0], population[:, 1])
    reps, hits_f, hits_c = 400, 0, 0
    for r in range(reps):
        labels, groups = _judged(rng, 50, 3)
        lo, hi = kappa_interval(labels, groups, n_resamples=499, seed=r)
        hits_f += lo <= true_fleiss <= hi
        lo, hi = kappa_interval(labels[:, :2], groups, n_resamples=499, seed=r)
        hits_c += lo <= true_cohen <= hi
    assert 0.91 <= hits_f / reps <= 0.98 and 0.91 <= hits_c / reps <= 0.98, (hits_f / reps, hits_c / reps)


def _judged_on_images(rng, images: int, per_image: int = 3, trials: int = 2):
    """Two judges' labels; on a quarter of the images (hard ones) the second judge contradicts the first on 70 %
    of the items. Returns the labels and each item's image and sample."""
    n = images * per_image
    image = np.repeat(np.arange(images), per_image)
    truth = np.repeat(rng.random(n) < 0.6, trials)
    hard = np.repeat((rng.random(images) < 0.25)[image], trials) & (rng.random(n * trials) < 0.7)
    first = truth ^ (rng.random(n * trials) < 0.1)
    second = np.where(hard, ~first, truth ^ (rng.random(n * trials) < 0.1))
    return np.stack([first, second], axis=1), np.repeat(image, trials), np.repeat(np.arange(n), trials)


def test_kappa_interval_over_images_covers_where_one_over_samples_does_not():
    rng = np.random.default_rng(1)
    population, _, _ = _judged_on_images(rng, 100_000, 3, 1)
    true = cohen_kappa(population[:, 0], population[:, 1])
    reps, by_image, by_sample = 200, 0, 0
    for r in range(reps):
        labels, images, samples = _judged_on_images(rng, 60)
        lo, hi = kappa_interval(labels, images, n_resamples=499, seed=r)
        by_image += lo <= true <= hi
        lo, hi = kappa_interval(labels, samples, n_resamples=499, seed=r)
        by_sample += lo <= true <= hi
    assert by_image / reps >= 0.92 and by_sample / reps < 0.88, (by_image / reps, by_sample / reps)


def test_kappa_interval_is_none_when_undefined_or_too_few_samples():
    assert kappa_interval(np.ones((6, 3), bool), [0, 0, 1, 1, 2, 2]) is None
    assert kappa_interval(np.array([[1, 0], [0, 0]], bool), ["s", "s"]) is None


def test_bootstrap_kappa_pass_equals_statsmodels_on_random_tables():
    """The interval's vectorised κ (additive per-item statistics, summed) equals statsmodels' Cohen's and
    Fleiss' κ on random label tables: 2–6 judges, 1–200 items, balanced to nearly unanimous labels."""
    from statsmodels.stats.inter_rater import cohens_kappa
    from statsmodels.stats.inter_rater import fleiss_kappa as sm_fleiss

    from insight_o3.analysis.kappa import _kappa, _per_item

    rng = np.random.default_rng(11)
    checked = 0
    for _ in range(3000):
        m, n = int(rng.integers(2, 7)), int(rng.integers(1, 201))
        rates = rng.choice([0.02, 0.2, 0.5, 0.8, 0.98], m)
        labels = rng.random((n, m)) < rates
        ours = float(_kappa(_per_item(labels).sum(axis=0), m))
        k = labels.sum(axis=1)
        if not 0 < k.sum() < labels.size:  # one label for everything: undefined on both sides
            assert math.isnan(ours)
            continue
        if m == 2:
            table = np.array(
                [
                    [np.sum(labels[:, 0] & labels[:, 1]), np.sum(labels[:, 0] & ~labels[:, 1])],
                    [np.sum(~labels[:, 0] & labels[:, 1]), np.sum(~labels[:, 0] & ~labels[:, 1])],
                ]
            )
            ref = cohens_kappa(table, return_results=False)
            assert ours == pytest.approx(ref, abs=1e-12) and cohen_kappa(labels[:, 0], labels[:, 1]) == pytest.approx(
                ours, abs=1e-12
            )
        else:
            ref = sm_fleiss(np.stack([k, m - k], axis=1))
            assert ours == pytest.approx(ref, abs=1e-12) and fleiss_kappa(labels) == pytest.approx(ours, abs=1e-12)
        checked += 1
    assert checked > 2500
