"""Is a difference between runs real? The paired test, the intervals and the smallest p a design allows.

Every function takes per-sample values on the last axis (each run's trials averaged per sample,
:mod:`.outcomes`) and a :class:`~.clusters.Design` saying which samples form one independent cluster (by
default the samples sharing an image); leading axes are independent sets (simulation replicates).

* **Accuracy** = the mean of ``x_i``. Its interval is Wilson's score interval at the *effective sample size*
  ``n_eff = p(1 − p) / var̂(p̂)`` (the design effect, with the cluster-robust variance of :mod:`.clusters`;
  between the effective number of clusters and the number of judged trials; the effective number of clusters
  when ``p̂`` is 0 or 1, since then the correlation cannot be estimated), with Korn and Graubard's
  degrees-of-freedom correction ``n_eff · (z / t_{G−1})²`` (Korn & Graubard 1998, *Survey Methodology*
  24:193; Dean & Pagano 2015, *J. Survey Stat. Methodol.* 3:484). It is never degenerate.
* **The test** of two runs — the one that decides — is the **paired sign-flip (randomization) test over
  clusters** (Fisher 1935, *The Design of Experiments* §21; Good 2005, §3.1): under the null the two runs'
  labels are exchangeable within a cluster, so the cluster totals ``D_g`` of the differences
  ``d_i = x_B,i − x_A,i`` are flipped in sign together and ``|Σ D_g|`` compared with its sign-flip
  distribution — exact (every one of the ``2^G`` sign vectors, enumerated in batches) when
  ``2^G ≤ n_resamples``, else Monte Carlo with ``(1 + hits) / (1 + n_resamples)`` (Phipson & Smyth 2010). With
  one sample per cluster it equals ``scipy.stats.permutation_test(..., permutation_type="samples")`` (a test
  checks it); it is the cluster-level analogue of McNemar's test (Obuchowski 1998, *Stat. Med.* 17:1495).
  Its **smallest attainable p** is ``2 / 2^{G'}`` with ``G'`` the clusters on which the runs differ at all:
  with five such clusters no p below 0.0625 exists, and the outputs say so.
* **The interval of the difference** is Bonett and Price's adjusted Wald interval for paired proportions
  (Bonett & Price 2012, *J. Educ. Behav. Stat.* 37:479: two pseudo-pairs, one for each run, added before the
  Wald interval) on the same statistic as the test — the mean paired difference over clusters — with the
  cluster-robust variance: ``d̃ ± t_{G−1}·√V`` over the clusters plus a pseudo-cluster of difference +1 and one
  of −1. With one trial and one sample per cluster it is Bonett and Price's interval with a t quantile for their
  z (a test checks it). Unlike
  the plain paired-t or Newcombe's interval it is never degenerate and keeps its coverage when one run adds to
  the other (``scripts/stats_audit.py``; the README gives the figures). It is an interval, not the decision:
  near the boundary it can exclude 0 while the test does not reject, or the reverse; the outputs say which
  decides and flag a pair where they disagree.
* **The cluster bootstrap** (clusters resampled, ``scipy.stats.bootstrap``, percentile, a fixed seed) is given
  beside it; it is too narrow with few clusters, which the outputs say.
* **McNemar's counts** (``b`` = (sample, trial) pairs only A got right, ``c`` = only B; trial ``k`` against
  trial ``k``) are *descriptive*: treating the pairs of one sample as independent makes its p-value
  anti-conservative when each question favours one system, so it decides nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from ..base.json_types import JSONObject
from .clusters import Design
from .outcomes import PairingError
from .settings import DEFAULT_CONFIDENCE as DEFAULT_CONFIDENCE
from .settings import DEFAULT_RESAMPLES as DEFAULT_RESAMPLES
from .settings import DEFAULT_SEED as DEFAULT_SEED

#: Resamples drawn at a time (memory: this many x clusters numbers).
_BATCH = 1000
#: Numbers held at a time by the exact test's enumeration (sign vectors x clusters, and x sets for the sums).
_EXACT_BUDGET = 1 << 22
#: How the intervals and the test are made (written into the JSON outputs).
METHODS = {
    "unit": "clusters of samples (--cluster: the samples sharing an image, or each sample); trials averaged",
    "accuracy_ci": "Wilson score at the effective sample size (cluster design effect, Korn-Graubard df)",
    "difference_ci": "Bonett-Price adjusted Wald interval of the mean paired difference, cluster-robust variance",
    "bootstrap_ci": "paired cluster bootstrap, percentile",
    "test": "paired sign-flip randomization test over clusters on per-sample accuracy; the test decides",
    "mcnemar": "descriptive: discordant (sample, trial) pairs, trial k against trial k",
    "multiplicity": "Holm over the categories of a pair, and over the pairs against the reference",
}

#: An interval's ``(low, high)``: floats for one run, arrays over the leading axes for many (so: either).
Bounds: TypeAlias = tuple[Any, Any]


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(0.5 + confidence / 2))


def _design(x: np.ndarray, design: Design | None) -> Design:
    return design if design is not None else Design.single(np.shape(x)[-1])


def _bounds(lo: np.ndarray, hi: np.ndarray) -> Bounds:
    return (float(lo), float(hi)) if np.ndim(lo) == 0 else (lo, hi)


# ----------------------------------------------------------------------------- accuracy
def wilson(
    p: np.ndarray | float, n: np.ndarray | float, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval of a proportion ``p`` observed on ``n`` (possibly effective, non-integer)
    trials: ``statsmodels.stats.proportion.proportion_confint(method="wilson")``, which takes a
    non-integer count and size; clipped to [0, 1] against float rounding."""
    p, n = np.asarray(p, float), np.asarray(n, float)
    lo, hi = proportion_confint(p * n, n, alpha=1 - confidence, method="wilson")
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def effective_n(
    x: np.ndarray, m: np.ndarray, design: Design | None = None, confidence: float = DEFAULT_CONFIDENCE
) -> np.ndarray:
    """The effective sample size of the mean of per-sample accuracies ``x`` (``m`` trials each; the last axis
    is the samples): the design effect's ``p(1 − p) / var̂`` (cluster-robust ``var̂``) within
    ``[effective clusters, Σm]`` (the effective clusters at ``p̂`` 0 or 1), times Korn and Graubard's
    degrees-of-freedom factor ``(z / t_{G−1})²``."""
    x, m = np.asarray(x, float), np.asarray(m, float)
    d = _design(x, design)
    p = x.mean(axis=-1)
    floor = d.effective_clusters()
    if d.count < 2:
        return np.full(p.shape, floor)
    total = m.sum(axis=-1)
    v = d.variance_of_mean(x)
    with np.errstate(divide="ignore", invalid="ignore"):
        deff = np.where(v > 0, p * (1 - p) / v, total)
    ne = np.where((p <= 0) | (p >= 1), floor, np.clip(deff, floor, np.maximum(total, floor)))
    return ne * (_z(confidence) / float(stats.t.ppf(0.5 + confidence / 2, d.count - 1))) ** 2


def accuracy_interval(
    x: np.ndarray, m: np.ndarray, design: Design | None = None, confidence: float = DEFAULT_CONFIDENCE
) -> Bounds:
    """Wilson's interval of the accuracy ``mean(x)`` at the effective sample size (module docstring);
    ``(low, high)``, each of the shape of the leading axes (floats for one run)."""
    lo, hi = wilson(np.mean(x, axis=-1), effective_n(x, m, design, confidence), confidence)
    return _bounds(lo, hi)


# ----------------------------------------------------------------------------- the difference
def difference_interval(d: np.ndarray, design: Design | None = None, confidence: float = DEFAULT_CONFIDENCE) -> Bounds:
    """Bonett and Price's adjusted Wald interval of ``mean(d)`` (``d`` = per-sample differences B − A, last
    axis) with the cluster-robust variance: the clusters' totals plus a pseudo-cluster of one sample with
    difference +1 and one with −1, ``d̃ = Σ D / (n + 2)``, ``V = Σ (D_g − d̃ n_g)² / (n + 2)²``, and
    ``d̃ ± t_{G−1}·√V`` over ``G`` clusters (the t quantile, usual for a cluster-robust variance, where Bonett and
    Price use z: with z the exact coverage of ``scripts/stats_audit.py``'s added-misses case dips to 92.98 % at
    57 samples, with t it stays ≥ 93.4 % from 10 to 400), clipped to [−1, 1]."""
    d = np.asarray(d, float)
    des = _design(d, design)
    lead = d.shape[:-1]
    totals = np.concatenate([des.totals(d), np.ones((*lead, 1)), -np.ones((*lead, 1))], axis=-1)
    sizes = np.r_[des.sizes, 1.0, 1.0]
    n = des.n + 2
    centre = totals.sum(axis=-1) / n
    resid = totals - centre[..., None] * sizes
    q = float(stats.t.ppf(0.5 + confidence / 2, max(des.count - 1, 1)))
    half = q * np.sqrt((resid * resid).sum(axis=-1)) / n
    return _bounds(np.maximum(centre - half, -1.0), np.minimum(centre + half, 1.0))


def bootstrap_difference(
    d: np.ndarray,
    design: Design | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """The paired cluster-bootstrap interval (percentile) of ``mean(d)`` for one set of differences: clusters
    resampled with their sizes (None below 2 clusters)."""
    des = _design(d, design)
    if des.count < 2:
        return None
    res = stats.bootstrap(
        (des.totals(np.asarray(d, float)), des.sizes),
        lambda t, s, axis=-1: np.sum(t, axis=axis) / np.sum(s, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=_BATCH,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


# ----------------------------------------------------------------------------- the test
def is_exact(clusters: int, n_resamples: int) -> bool:
    """Whether the sign-flip test enumerates every sign vector (``2^clusters ≤ n_resamples``)."""
    return clusters < 63 and 2**clusters <= n_resamples


def _all_signs(g: int, rows: int) -> Iterator[np.ndarray]:
    """Every ``±1`` vector of length ``g``, in blocks of ``rows`` vectors."""
    bits = np.arange(g)
    for start in range(0, 2**g, rows):
        codes = np.arange(start, min(start + rows, 2**g), dtype=np.int64)
        yield 1.0 - 2.0 * ((codes[:, None] >> bits) & 1)


def sign_flip_pvalue(totals: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Two-sided p-value of the paired sign-flip test of ``Σ totals = 0`` over the last axis (the clusters'
    totals of the per-sample differences; with one sample per cluster, the differences themselves). Leading
    axes: independent tests. Exact when :func:`is_exact`, enumerated in batches; else Monte Carlo."""
    t = np.asarray(totals, float)
    g = t.shape[-1]
    obs = np.abs(t.sum(axis=-1))[..., None] - 1e-9  # ties with the observed value count as extreme
    hits = np.zeros(obs.shape[:-1], np.int64)
    if is_exact(g, n_resamples):
        rows = max(16, _EXACT_BUDGET // max(g, int(np.prod(obs.shape[:-1], dtype=np.int64)), 1))
        for signs in _all_signs(g, rows):
            hits += (np.abs(t @ signs.T) >= obs).sum(axis=-1)
        return hits / 2.0**g
    rng = np.random.default_rng(seed)
    for start in range(0, n_resamples, _BATCH):  # memory bounded by _BATCH x clusters signs
        signs = rng.choice([-1.0, 1.0], (min(_BATCH, n_resamples - start), g))
        hits += (np.abs(t @ signs.T) >= obs).sum(axis=-1)
    return (1 + hits) / (n_resamples + 1)


def smallest_pvalue(totals: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES) -> float:
    """The smallest p the sign-flip test can give on these clusters, whatever their signs: ``2 / 2^{G'}`` over
    the ``G'`` clusters whose total is not 0 (1 when there is none), and at Monte Carlo at least
    ``1 / (1 + n_resamples)``."""
    t = np.asarray(totals, float)
    differ = int((np.abs(t) > 1e-9).sum())
    p = 2.0 ** (1 - differ) if differ else 1.0
    return p if is_exact(len(t), n_resamples) else max(p, 1 / (1 + n_resamples))


def mcnemar_pvalue(b: ArrayLike, c: ArrayLike) -> np.ndarray:
    """McNemar's exact p-value: the two-sided binomial test of ``b`` among ``b + c`` at 1/2 (vectorized;
    equals ``scipy.stats.binomtest(b, b + c).pvalue``)."""
    b, c = np.asarray(b), np.asarray(c)
    p = np.minimum(2 * stats.binom.cdf(np.minimum(b, c), b + c, 0.5), 1.0)
    return np.where(b + c > 0, p, 1.0)


@dataclass
class McNemar:
    """Descriptive McNemar counts on paired binary outcomes: ``b`` = A right / B wrong, ``c`` = A wrong /
    B right; ``pvalue`` treats the pairs as independent (not so with several trials per sample)."""

    n: int
    b: int
    c: int
    statistic: float  # (|b - c| - 1)^2 / (b + c), 0 without discordant pairs
    pvalue: float  # exact: two-sided binomial test of b among b + c at 1/2
    pvalue_chi2: float  # the statistic against chi-square with 1 degree of freedom

    def to_dict(self) -> JSONObject:
        return {
            "descriptive": True,
            "n": self.n,
            "b": self.b,
            "c": self.c,
            "statistic": self.statistic,
            "pvalue": self.pvalue,
            "pvalue_chi2": self.pvalue_chi2,
        }


def mcnemar(a: np.ndarray, b: np.ndarray) -> McNemar:
    """McNemar's counts of two runs' correctness on the same items (any shape, compared element-wise)."""
    a, b = np.asarray(a, bool).ravel(), np.asarray(b, bool).ravel()
    if a.shape != b.shape:
        raise PairingError(f"McNemar needs paired outcomes, got {a.size} and {b.size}")
    nb, nc = int((a & ~b).sum()), int((~a & b).sum())
    d = nb + nc
    if d == 0:
        return McNemar(int(a.size), nb, nc, 0.0, 1.0, 1.0)
    stat = (abs(nb - nc) - 1) ** 2 / d
    return McNemar(int(a.size), nb, nc, float(stat), float(mcnemar_pvalue(nb, nc)), float(stats.chi2.sf(stat, 1)))
