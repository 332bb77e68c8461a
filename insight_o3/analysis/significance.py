"""Is a difference between runs real? Paired statistics over samples, whatever the number of trials.

**The unit is the sample.** A sample's trials share the image and the question, so they are not
independent: every statistic here first averages each run's trials per sample (``x_i`` = the share of
sample ``i``'s judged trials that are correct, *all* of the run's trials — two runs need not have
run the same number) and then works on the ``n`` samples.

* **Accuracy** = the mean of ``x_i``. Its interval is Wilson's score interval at the *effective sample
  size* ``n_eff = p(1 − p) / var̂(p̂)`` (the cluster design effect; between ``n`` and the number of
  judged trials; ``n`` when ``p̂`` is 0 or 1, since then the trials' correlation cannot be estimated),
  with Korn and Graubard's degrees-of-freedom correction ``n_eff · (z / t_{n−1})²`` (Korn & Graubard
  1998, *Survey Methodology* 24:193; Dean & Pagano 2015, *J. Survey Stat. Methodol.* 3:484, who found
  it keeps its coverage for small clustered samples). It is never degenerate: an all-correct run of 40
  samples gets about [91, 100] %.
* **The test** of two runs is the **paired sign-flip (randomization) test** over samples (Fisher 1935,
  *The Design of Experiments* §21; Good 2005, *Permutation, Parametric and Bootstrap Tests of
  Hypotheses* §3.1): under the null the two runs' labels are exchangeable within a sample, so the
  differences ``d_i = x_B,i − x_A,i`` are flipped in sign at random and ``|mean d|`` compared with its
  sign-flip distribution — exact (all ``2^n`` sign vectors) when ``2^n ≤ n_resamples``, else Monte Carlo
  with ``(1 + hits) / (1 + n_resamples)`` (Phipson & Smyth 2010). It is the cluster-level analogue of
  McNemar's test (as Obuchowski 1998, *Stat. Med.* 17:1495, for clustered matched pairs) and equals
  ``scipy.stats.permutation_test(..., permutation_type="samples")`` (a test checks it).
* **The interval of the difference** ``accuracy(B) − accuracy(A)`` is Newcombe's hybrid score interval
  for paired proportions (Newcombe 1998, *Stat. Med.* 17:2635, method 10; the MOVER of Zou & Donner
  2008, *Stat. Med.* 27:1693) built from the two runs' Wilson limits above and the correlation of
  ``x_A`` and ``x_B`` over samples (0 when one of them does not vary). The paired bootstrap over
  samples (``scipy.stats.bootstrap``, percentile, a fixed seed) is given too; the coverage tests show
  it is too narrow below about 40 samples, the score interval is not.
* **McNemar's counts** (``b`` = (sample, trial) pairs only A got right, ``c`` = only B; trial ``k``
  against trial ``k``) are *descriptive*: treating the pairs of one sample as independent makes its
  p-value anti-conservative when each question favours one system (tests/analysis/test_significance.py shows
  10–27 % rejections at a nominal 5 %), so it is not used to decide anything.
* **Failed items** (status ``failed``: the model's or the judge's API call was lost) are not the
  system's answer: by default they are left out (a sample keeps its judged trials; a sample without a
  judged trial in a run leaves the paired analysis) and counted per run; ``failed_as_wrong`` counts them
  as wrong, as ``eval_metrics.json``'s ``overall_accuracy`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import numpy as np
from numpy.typing import ArrayLike
from scipy import stats
from statsmodels.stats.proportion import proportion_confint

from ..base.json_types import JSONObject
from ..evaluation.schema import EvalRecord

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0
#: Resamples drawn at a time (memory: this many x samples numbers).
_BATCH = 1000
#: The status of an item lost to API errors (see :mod:`.judge`).
FAILED = "failed"
CORRECT = "correct"
#: How the intervals and the test are made (written into the JSON outputs).
METHODS = {
    "accuracy_ci": "Wilson score at the effective sample size (design effect over samples, Korn-Graubard df)",
    "difference_ci": "Newcombe's paired hybrid score interval (MOVER) from the runs' Wilson limits",
    "bootstrap_ci": "paired bootstrap over samples, percentile",
    "test": "paired sign-flip randomization test over samples on per-sample accuracy",
    "mcnemar": "descriptive: discordant (sample, trial) pairs, trial k against trial k",
}


class PairingError(ValueError):
    """Runs that cannot be paired (other samples, missing records, no samples); the message says what."""


@dataclass
class Outcomes:
    """Each (sample, trial) of a run: ``statuses[i, k]`` and whether it was correct."""

    keys: list[str]
    categories: list[str]
    correct: np.ndarray  # bool, shape (samples, trials)
    statuses: np.ndarray  # str, same shape

    def judged(self, failed_as_wrong: bool = False) -> np.ndarray:
        """Which items count: all of them, or (default) those not lost to API errors."""
        return np.ones(self.correct.shape, bool) if failed_as_wrong else self.statuses != FAILED

    def per_sample(self, failed_as_wrong: bool = False) -> tuple[np.ndarray, np.ndarray]:
        """``(x, m)``: each sample's accuracy over its counted trials (NaN without one) and their number."""
        m = self.judged(failed_as_wrong).sum(axis=1)
        hits = (self.correct & self.judged(failed_as_wrong)).sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(m > 0, hits / np.maximum(m, 1), np.nan), m

    def failed_items(self) -> int:
        return int((self.statuses == FAILED).sum())

    def failed_samples(self) -> int:
        """Samples none of whose trials was judged (they leave the analysis unless counted as wrong)."""
        return int((self.statuses == FAILED).all(axis=1).sum())

    def subset(self, rows: np.ndarray) -> Outcomes:
        idx = np.flatnonzero(rows)
        return Outcomes(
            [self.keys[i] for i in idx], [self.categories[i] for i in idx], self.correct[rows], self.statuses[rows]
        )


def outcomes(
    trials: Sequence[Sequence[EvalRecord]], keys: Sequence[str] | None = None, name: str = "the run"
) -> Outcomes:
    """The outcome table of a run from its records per trial, rows in ``keys`` order (default: the
    first trial's). Every trial must have a record for every key; a run without samples is refused."""
    if not trials:
        raise PairingError(f"{name} has no trials")
    by_trial = [{r.sample_key: r for r in recs} for recs in trials]
    order = list(keys) if keys is not None else [r.sample_key for r in trials[0]]
    if not order:
        raise PairingError(f"{name} holds no samples: nothing to analyse")
    for k, bt in enumerate(by_trial):
        missing = [key for key in order if key not in bt]
        if missing:
            raise PairingError(f"{name}: trial {k} has no record for {len(missing)} sample(s), e.g. {missing[0]!r}")
    statuses = np.array([[str(bt[key].status) for bt in by_trial] for key in order], dtype=object).reshape(
        len(order), len(by_trial)
    )
    cats = [by_trial[0][key].category for key in order]
    return Outcomes(order, cats, statuses == CORRECT, statuses)


# ----------------------------------------------------------------------------- intervals
#: An interval's ``(low, high)``: floats for one run, arrays over the leading axes for many (so: either).
Bounds: TypeAlias = tuple[Any, Any]


def _z(confidence: float) -> float:
    return float(stats.norm.ppf(0.5 + confidence / 2))


def wilson(
    p: np.ndarray | float, n: np.ndarray | float, confidence: float = DEFAULT_CONFIDENCE
) -> tuple[np.ndarray, np.ndarray]:
    """Wilson's score interval of a proportion ``p`` observed on ``n`` (possibly effective, non-integer)
    trials: ``statsmodels.stats.proportion.proportion_confint(method="wilson")``, which takes a
    non-integer count and size; clipped to [0, 1] against float rounding."""
    p, n = np.asarray(p, float), np.asarray(n, float)
    lo, hi = proportion_confint(p * n, n, alpha=1 - confidence, method="wilson")
    return np.clip(lo, 0.0, 1.0), np.clip(hi, 0.0, 1.0)


def effective_n(x: np.ndarray, m: np.ndarray, confidence: float = DEFAULT_CONFIDENCE) -> np.ndarray:
    """The effective sample size of the mean of per-sample accuracies ``x`` (``m`` trials each; the last
    axis is the samples, leading axes independent sets): the design effect's ``p(1 − p) / var̂`` within
    ``[n, Σm]`` (``n`` at ``p̂`` 0 or 1), times Korn and Graubard's degrees-of-freedom factor
    ``(z / t_{n−1})²``."""
    x, m = np.asarray(x, float), np.asarray(m, float)
    n = x.shape[-1]
    p = x.mean(axis=-1)
    total = m.sum(axis=-1)
    if n < 2:
        return np.full(p.shape, float(n))
    v = x.var(axis=-1, ddof=1) / n
    with np.errstate(divide="ignore", invalid="ignore"):
        design = np.where(v > 0, p * (1 - p) / v, total)
    ne = np.where((p <= 0) | (p >= 1), float(n), np.clip(design, n, total))
    return ne * (_z(confidence) / float(stats.t.ppf(0.5 + confidence / 2, n - 1))) ** 2


def accuracy_interval(x: np.ndarray, m: np.ndarray, confidence: float = DEFAULT_CONFIDENCE) -> Bounds:
    """Wilson's interval of the accuracy ``mean(x)`` at the effective sample size (module docstring);
    ``(low, high)``, each of the shape of the leading axes (floats for one run)."""
    lo, hi = wilson(np.mean(x, axis=-1), effective_n(x, m, confidence), confidence)
    return (float(lo), float(hi)) if np.ndim(lo) == 0 else (lo, hi)


def _correlation(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Pearson's r over the last axis, 0 where one side does not vary (Newcombe's rule for an empty margin)."""
    da, db = a - a.mean(axis=-1, keepdims=True), b - b.mean(axis=-1, keepdims=True)
    den = np.sqrt((da * da).sum(axis=-1) * (db * db).sum(axis=-1))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(den > 0, (da * db).sum(axis=-1) / den, 0.0)


def difference_interval(
    xa: np.ndarray, ma: np.ndarray, xb: np.ndarray, mb: np.ndarray, confidence: float = DEFAULT_CONFIDENCE
) -> Bounds:
    """Newcombe's paired score interval (MOVER) of ``mean(xb) − mean(xa)`` over the same samples (last
    axis; leading axes independent sets, as :func:`accuracy_interval`)."""
    xa, xb = np.asarray(xa, float), np.asarray(xb, float)
    pa, pb = xa.mean(axis=-1), xb.mean(axis=-1)
    la, ua = wilson(pa, effective_n(xa, ma, confidence), confidence)
    lb, ub = wilson(pb, effective_n(xb, mb, confidence), confidence)
    r = _correlation(xa, xb)
    d = pb - pa
    low = d - np.sqrt(np.maximum((pb - lb) ** 2 - 2 * r * (pb - lb) * (ua - pa) + (ua - pa) ** 2, 0.0))
    high = d + np.sqrt(np.maximum((ub - pb) ** 2 - 2 * r * (ub - pb) * (pa - la) + (pa - la) ** 2, 0.0))
    low, high = np.maximum(low, -1.0), np.minimum(high, 1.0)
    return (float(low), float(high)) if np.ndim(low) == 0 else (low, high)


def bootstrap_difference(
    xa: np.ndarray,
    xb: np.ndarray,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float] | None:
    """The paired bootstrap interval over samples of ``mean(xb) − mean(xa)`` (None below 2 samples)."""
    if len(xa) < 2:
        return None
    res = stats.bootstrap(
        (np.asarray(xb, float), np.asarray(xa, float)),
        lambda b, a, axis=-1: np.mean(b, axis=axis) - np.mean(a, axis=axis),
        paired=True,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        batch=_BATCH,
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


# ----------------------------------------------------------------------------- tests
def sign_flip_pvalue(d: np.ndarray, n_resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> np.ndarray:
    """Two-sided p-value of the paired sign-flip test of ``mean(d) = 0`` over the last axis (leading axes:
    independent tests, e.g. simulation replicates). Exact when ``2^n ≤ n_resamples``."""
    d = np.asarray(d, float)
    n = d.shape[-1]
    obs = np.abs(d.mean(axis=-1))[..., None] - 1e-12  # ties with the observed value count as extreme
    if n < 31 and 2**n <= n_resamples:
        signs = 1.0 - 2.0 * ((np.arange(2**n)[:, None] >> np.arange(n)) & 1)
        return (np.abs(d @ signs.T) / n >= obs).mean(axis=-1)
    rng, hits = np.random.default_rng(seed), np.zeros(obs.shape[:-1], int)
    for start in range(0, n_resamples, _BATCH):  # memory bounded by _BATCH x n signs
        signs = rng.choice([-1.0, 1.0], (min(_BATCH, n_resamples - start), n))
        hits += (np.abs(d @ signs.T) / n >= obs).sum(axis=-1)
    return (1 + hits) / (n_resamples + 1)


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


# ----------------------------------------------------------------------------- run comparison
@dataclass
class Accuracy:
    mean: float
    low: float
    high: float
    n: int  # samples counted (with a judged trial, unless failures count as wrong)

    def to_dict(self) -> JSONObject:
        return {"mean": self.mean, "ci": [self.low, self.high], "n": self.n}


@dataclass
class Flip:
    """A sample whose accuracy over its trials differs between two runs."""

    key: str
    category: str
    statuses_a: list[str]
    statuses_b: list[str]
    accuracy_a: float
    accuracy_b: float

    @property
    def change(self) -> str:
        return "fixed" if self.accuracy_b > self.accuracy_a else "broken"

    def to_dict(self) -> JSONObject:
        return {
            "key": self.key,
            "category": self.category,
            "change": self.change,
            "accuracy_a": self.accuracy_a,
            "accuracy_b": self.accuracy_b,
            "statuses_a": self.statuses_a,
            "statuses_b": self.statuses_b,
        }


@dataclass
class Paired:
    """B against A on a set of samples: the difference, its intervals and the sign-flip test."""

    n: int  # samples paired
    accuracy_a: float
    accuracy_b: float
    difference: float
    low: float
    high: float
    bootstrap: tuple[float, float] | None
    pvalue: float
    exact: bool  # the p-value enumerates every sign vector
    mcnemar: McNemar

    def to_dict(self) -> JSONObject:
        return {
            "n": self.n,
            "accuracy_a": self.accuracy_a,
            "accuracy_b": self.accuracy_b,
            "difference": self.difference,
            "ci": [self.low, self.high],
            "bootstrap_ci": list(self.bootstrap) if self.bootstrap else None,
            "pvalue": self.pvalue,
            "pvalue_exact": self.exact,
            "mcnemar": self.mcnemar.to_dict(),
        }


@dataclass
class PairResult:
    """Run B against run A over the samples both judged: ``difference`` = accuracy(B) − accuracy(A)."""

    a: str
    b: str
    trials_a: int
    trials_b: int
    excluded: int  # samples left out: no judged trial in one of the runs
    overall: Paired
    categories: dict[str, Paired] = field(default_factory=dict)
    flips: list[Flip] = field(default_factory=list)

    def to_dict(self) -> JSONObject:
        return {
            "a": self.a,
            "b": self.b,
            "trials_a": self.trials_a,
            "trials_b": self.trials_b,
            "samples_excluded": self.excluded,
            **self.overall.to_dict(),
            "categories": {c: p.to_dict() for c, p in self.categories.items()},
            "flips": [f.to_dict() for f in self.flips],
        }


def run_accuracy(
    o: Outcomes, confidence: float = DEFAULT_CONFIDENCE, failed_as_wrong: bool = False, name: str = "the run"
) -> tuple[Accuracy, dict[str, Accuracy]]:
    """Accuracy with its interval, overall and per category (a category without a counted sample is
    left out), over the samples with a counted trial. Raises :class:`PairingError` when there is none."""
    x, m = o.per_sample(failed_as_wrong)
    keep = m > 0
    if not keep.any():
        raise PairingError(f"{name}: every item was lost to API errors; nothing was judged")

    def acc(rows: np.ndarray) -> Accuracy:
        lo, hi = accuracy_interval(x[rows], m[rows], confidence)
        return Accuracy(float(x[rows].mean()), lo, hi, int(rows.sum()))

    cats = np.array(o.categories, dtype=object)
    per_cat = {c: acc(keep & (cats == c)) for c in sorted(set(o.categories)) if (keep & (cats == c)).any()}
    return acc(keep), per_cat


def _paired(
    a: Outcomes, b: Outcomes, rows: np.ndarray, n_resamples: int, confidence: float, seed: int, failed_as_wrong: bool
) -> Paired:
    xa, ma = a.per_sample(failed_as_wrong)
    xb, mb = b.per_sample(failed_as_wrong)
    xa, ma, xb, mb = xa[rows], ma[rows], xb[rows], mb[rows]
    t = min(a.correct.shape[1], b.correct.shape[1])
    both = a.judged(failed_as_wrong)[rows, :t] & b.judged(failed_as_wrong)[rows, :t]
    desc = mcnemar(a.correct[rows, :t][both], b.correct[rows, :t][both])
    lo, hi = difference_interval(xa, ma, xb, mb, confidence)
    n = len(xa)
    return Paired(
        n,
        float(xa.mean()),
        float(xb.mean()),
        float(xb.mean() - xa.mean()),
        lo,
        hi,
        bootstrap_difference(xa, xb, n_resamples, confidence, seed),
        float(sign_flip_pvalue(xb - xa, n_resamples, seed)),
        n < 31 and 2**n <= n_resamples,
        desc,
    )


def compare_pair(
    name_a: str,
    a: Outcomes,
    name_b: str,
    b: Outcomes,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    failed_as_wrong: bool = False,
) -> PairResult:
    """Run B against run A on the same samples (rows in the same order), each with all its trials."""
    if a.keys != b.keys:
        raise PairingError(f"{name_a} and {name_b} hold other samples")
    xa, ma = a.per_sample(failed_as_wrong)
    xb, mb = b.per_sample(failed_as_wrong)
    keep = (ma > 0) & (mb > 0)
    if not keep.any():
        raise PairingError(f"{name_a} and {name_b} have no sample judged in both (every item lost to API errors)")
    cats = np.array(a.categories, dtype=object)
    per_cat = {
        c: _paired(a, b, keep & (cats == c), n_resamples, confidence, seed, failed_as_wrong)
        for c in sorted(set(a.categories))
        if (keep & (cats == c)).any()
    }
    flips = [
        Flip(a.keys[i], a.categories[i], list(a.statuses[i]), list(b.statuses[i]), float(xa[i]), float(xb[i]))
        for i in np.flatnonzero(keep & (xa != xb))
    ]
    flips.sort(key=lambda f: (-abs(f.accuracy_b - f.accuracy_a), f.change, f.key))
    return PairResult(
        name_a,
        name_b,
        a.correct.shape[1],
        b.correct.shape[1],
        int((~keep).sum()),
        _paired(a, b, keep, n_resamples, confidence, seed, failed_as_wrong),
        per_cat,
        flips,
    )
