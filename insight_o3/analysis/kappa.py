"""How much judges agree beyond chance: Cohen's κ for two, Fleiss' κ for three or more, with intervals.

* **Cohen's κ** (two judges): ``(p_o − p_e) / (1 − p_e)`` with each judge's own label shares in ``p_e``
  (``statsmodels.stats.inter_rater.cohens_kappa`` of the ``scipy.stats.contingency.crosstab`` table).
* **Fleiss' κ** (``m ≥ 3`` judges; Fleiss 1971, *Psychol. Bull.* 76:378): per item the share of agreeing
  judge pairs ``P_i = Σ_j k_ij (k_ij − 1) / (m (m − 1))``, ``P̄`` their mean, ``P_e = Σ_j p_j²`` from the
  pooled label shares, ``κ = (P̄ − P_e) / (1 − P_e)`` (``statsmodels.stats.inter_rater.fleiss_kappa``).
* **Intervals**: a sample's trials are judged on related responses, and a judge that misreads an image
  misreads its questions alike, so items are resampled by cluster (cluster bootstrap, percentile, a fixed seed;
  the clusters of :mod:`.clusters`: by default the samples sharing an image). The resamples are computed in one
  vectorised pass from additive per-item statistics (statsmodels takes one table at a time, too slow for
  thousands of resamples); ``tests/analysis/test_kappa.py`` checks that pass against statsmodels on random tables, and
  the intervals' coverage by simulation: about 94 % at a nominal 95 % with 50 clusters × 3 trials, and over
  images where resampling samples alone is too narrow (disagreements that come together on some images); with
  fewer than about 20 clusters it is too narrow (91 %), which the outputs say.

κ is undefined (NaN here, ``null`` in JSON) when chance agreement is 1: every judge gave the same label to
everything.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .outcomes import PairingError
from .settings import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED

_BATCH = 500  # bootstrap resamples drawn at a time
#: Below this many samples the bootstrap interval of κ is known to undercover (see the module docstring).
MIN_SAMPLES_FOR_INTERVAL = 20


def cohen_kappa(x: Sequence, y: Sequence) -> float:
    """Cohen's κ of two raters' labels on the same items (NaN when chance agreement is 1)."""
    if len(x) != len(y):
        raise PairingError(f"kappa needs the same items, got {len(x)} and {len(y)}")
    if not len(x):
        return float("nan")
    xs, ys = np.asarray(x, dtype=object).astype(str), np.asarray(y, dtype=object).astype(str)
    labels = sorted(set(xs) | set(ys))
    if len(labels) < 2:  # one label for everything: chance agreement is 1
        return float("nan")
    from scipy.stats.contingency import crosstab  # scipy.stats and statsmodels: ~0.7 CPU s, only when judges agree
    from statsmodels.stats import inter_rater

    table = crosstab(xs, ys, levels=(labels, labels)).count
    return float(inter_rater.cohens_kappa(table, return_results=False))


def _cohen_from_cells(cells: np.ndarray) -> np.ndarray:
    """Cohen's κ of binary labels from summed cells ``(both 1, only first, only second, both 0)`` (last axis)."""
    n11, n10, n01, n00 = np.moveaxis(cells, -1, 0)
    n = n11 + n10 + n01 + n00
    with np.errstate(invalid="ignore", divide="ignore"):
        po = (n11 + n00) / n
        pe = ((n11 + n10) * (n11 + n01) + (n01 + n00) * (n10 + n00)) / (n * n)
        return np.where(pe < 1, (po - pe) / (1 - pe), np.nan)


def _fleiss_from_sums(sums: np.ndarray, m: int) -> np.ndarray:
    """Fleiss' κ of binary labels from summed ``(Σ P_i, Σ k_i, items)`` (last axis), ``m`` judges."""
    sum_p, sum_k, items = np.moveaxis(sums, -1, 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        p_bar = sum_p / items
        p = sum_k / (items * m)
        pe = p * p + (1 - p) ** 2
        return np.where(pe < 1, (p_bar - pe) / (1 - pe), np.nan)


def _per_item(labels: np.ndarray) -> np.ndarray:
    """Each item's additive statistics: Cohen's cells for two judges, Fleiss' sums for more."""
    m = labels.shape[1]
    if m == 2:
        a, b = labels[:, 0], labels[:, 1]
        return np.stack([a & b, a & ~b, ~a & b, ~a & ~b], axis=1).astype(float)
    k = labels.sum(axis=1).astype(float)
    p = (k * (k - 1) + (m - k) * (m - k - 1)) / (m * (m - 1))
    return np.stack([p, k, np.ones_like(k)], axis=1)


def _kappa(sums: np.ndarray, m: int) -> np.ndarray:
    return _cohen_from_cells(sums) if m == 2 else _fleiss_from_sums(sums, m)


def fleiss_kappa(labels: np.ndarray) -> float:
    """Fleiss' κ of binary labels ``labels[item, judge]`` (three or more judges)."""
    labels = np.asarray(labels, bool)
    if labels.ndim != 2 or labels.shape[1] < 3:
        raise PairingError("Fleiss' kappa needs three or more judges")
    k = labels.sum(axis=1)
    if not 0 < k.sum() < labels.size:  # no items, or one label for everything: chance agreement is 1
        return float("nan")
    from statsmodels.stats import inter_rater

    return float(inter_rater.fleiss_kappa(np.stack([k, labels.shape[1] - k], axis=1)))


def kappa_interval(
    labels: np.ndarray,
    groups: Sequence,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """Cluster-bootstrap interval of κ (Cohen's for two judges, Fleiss' for more) of binary labels
    ``labels[item, judge]``, resampling the items' ``groups`` (their clusters); None when fewer than two
    groups or κ is undefined."""
    labels = np.asarray(labels, bool)
    _, g = np.unique(np.asarray(groups, dtype=object).astype(str), return_inverse=True)
    n_groups = int(g.max()) + 1 if len(g) else 0
    m = labels.shape[1]
    if n_groups < 2:
        return None
    per_item = _per_item(labels)
    per_group = np.stack([np.bincount(g, per_item[:, j], n_groups) for j in range(per_item.shape[1])], axis=1)
    if np.isnan(_kappa(per_group.sum(axis=0), m)):
        return None
    rng, parts = np.random.default_rng(seed), []
    for start in range(0, n_resamples, _BATCH):  # memory bounded by _BATCH x groups draws
        idx = rng.integers(0, n_groups, (min(_BATCH, n_resamples - start), n_groups))
        parts.append(_kappa(per_group[idx].sum(axis=1), m))
    boot = np.concatenate(parts)
    boot = boot[~np.isnan(boot)]
    if not len(boot):
        return None
    tail = 50 * (1 - confidence)
    lo, hi = np.percentile(boot, [tail, 100 - tail])
    return float(lo), float(hi)
