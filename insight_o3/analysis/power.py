"""How precise is a comparison, what could it have found, and would more trials help?

"Not significant" on a small or noisy benchmark often means "could not have been significant". For the paired
difference of two runs this module gives:

* the **standard error** of the mean paired difference: cluster-robust (:mod:`.clusters`);
* the **minimum detectable effect** at 80 % power: the difference the test finds 80 % of the time at the level
  used, ``es · √G · SE`` with ``es`` the standardised effect a one-sample t-test on ``G`` clusters detects
  (``statsmodels.stats.power.TTestPower``; about ``2.8 · SE`` for many clusters — Bloom 1995, *Evaluation
  Review* 19:547);
* its **variance components** (as in Miller 2024, "Adding error bars to evals", arXiv:2411.00640): the variance
  of the mean difference is the part due to *which questions* the benchmark holds (``between``) plus the part due
  to the *trials' sampling noise* (``within``: each sample's binomial variance over its trials, estimated
  without bias by ``x(1 − x)/(m − 1)``, needs two or more trials). ``k`` times the trials divides ``within`` by
  ``k`` and leaves ``between``: when ``between`` dominates, more questions help and more trials do not.

``tests/analysis/test_significance_simulation.py`` checks all three by simulation (the power at the printed effect, the
standard error predicted for more trials against the one measured with them).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from statsmodels.stats.power import TTestPower

from ..base.json_types import JSONObject
from .clusters import Design

#: The power of the minimum detectable effect.
POWER = 0.8
#: The trial multipliers whose standard error and minimum detectable effect are reported.
MORE_TRIALS = (2, 4)


def standard_error(d: np.ndarray, design: Design) -> float:
    """The cluster-robust standard error of ``mean(d)`` (0 with one cluster)."""
    return float(math.sqrt(design.variance_of_mean(np.asarray(d, float))))


def detectable_effect(se: float, clusters: int, alpha: float, power: float = POWER) -> float | None:
    """The smallest true difference the two-sided test at ``alpha`` finds with probability ``power``, given the
    standard error ``se`` over ``clusters`` clusters (None below 2 clusters)."""
    if clusters < 2:
        return None
    return _standardised_effect(clusters, alpha, power) * math.sqrt(clusters) * se


@functools.lru_cache(maxsize=256)
def _standardised_effect(clusters: int, alpha: float, power: float) -> float:
    """The effect size (in SDs) a two-sided one-sample t-test on ``clusters`` units detects with ``power``
    (a root search: cached, since every pair and category of a comparison asks for few distinct sizes)."""
    es = TTestPower().solve_power(effect_size=None, nobs=clusters, alpha=alpha, power=power, alternative="two-sided")
    return float(es)


def _within(x: np.ndarray, m: np.ndarray) -> float | None:
    """``Σ_i var̂(x_i | question) / n²`` of one run: ``x(1 − x)/(m − 1)`` per sample with two or more trials;
    for a sample left with one (its other trials lost), the mean per-trial variance of the others (None when no
    sample has two)."""
    x, m = np.asarray(x, float), np.asarray(m, float)
    several = m >= 2
    if not several.any():
        return None
    per_trial = x * (1 - x) * m / np.maximum(m - 1, 1)  # unbiased Bernoulli variance of one trial
    pooled = float(per_trial[several].mean())
    var = np.where(several, per_trial, pooled) / m
    return float(var.sum() / len(x) ** 2)


@dataclass
class VarianceComponents:
    """The variance of the mean paired difference split into the questions' part and the trials' part."""

    between: float  # from which questions were drawn (max(total − within, 0))
    within: float  # from the trials' sampling noise, at the trials run
    clusters: int
    alpha: float

    def se(self, trials_factor: float = 1.0) -> float:
        """The standard error with ``trials_factor`` times the trials (``inf``: no trial noise left)."""
        return math.sqrt(self.between + (0.0 if math.isinf(trials_factor) else self.within / trials_factor))

    def detectable(self, trials_factor: float = 1.0) -> float | None:
        return detectable_effect(self.se(trials_factor), self.clusters, self.alpha)

    @property
    def within_share(self) -> float:
        total = self.between + self.within
        return self.within / total if total > 0 else 0.0

    def to_dict(self) -> JSONObject:
        more = {f"x{k}": {"se": self.se(k), "mde": self.detectable(k)} for k in MORE_TRIALS}
        return {
            "between_questions_variance": self.between,
            "within_question_variance": self.within,
            "within_share": self.within_share,
            "more_trials": {**more, "unlimited": {"se": self.se(math.inf), "mde": self.detectable(math.inf)}},
        }


def variance_components(
    xa: np.ndarray, ma: np.ndarray, xb: np.ndarray, mb: np.ndarray, design: Design, alpha: float
) -> VarianceComponents | None:
    """The components of the variance of ``mean(xb − xa)`` (None unless each run has a sample with two or more
    trials — the trials' noise cannot otherwise be told from the questions' — or when the variance is 0). ``within`` is capped at the total,
    so that :meth:`VarianceComponents.se` at the trials run is :func:`standard_error`."""
    wa, wb = _within(xa, ma), _within(xb, mb)
    if wa is None or wb is None:
        return None
    total = float(design.variance_of_mean(np.asarray(xb, float) - np.asarray(xa, float)))
    if total <= 0:
        return None
    within = min(wa + wb, total)
    return VarianceComponents(total - within, within, design.count, alpha)
