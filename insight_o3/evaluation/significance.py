"""Is a difference between runs real? Paired statistics over samples × trials (scipy where it has them).

The unit of resampling is the **sample**: its trials are correlated (same image, same question), so
confidence intervals come from a cluster bootstrap — each sample's accuracy over its trials is one
observation, resampled with replacement (``scipy.stats.bootstrap``, percentile method, a fixed seed).
For two runs on the same samples the bootstrap is paired (``paired=True``: the same resampled
samples for both), which is what makes a small difference detectable.

McNemar's test compares two runs on the discordant (sample, trial) pairs — trial ``k`` of run A
against trial ``k`` of run B, for the trials both have: ``b`` = A right and B wrong, ``c`` = A wrong
and B right. The p-value is the exact one (``scipy.stats.binomtest(b, b + c, 0.5)``), the
statistic the continuity-corrected ``(|b − c| − 1)² / (b + c)`` (its chi-square p-value is given too).
With several trials per sample the pairs of one sample are not independent, so McNemar's p-value is
optimistic there; the paired bootstrap interval of the difference is the one to trust.

Cohen's κ measures how two judges agree beyond chance: ``(p_o − p_e) / (1 − p_e)`` over the items
both judged (scipy has no κ; the confusion table is ``scipy.stats.contingency.crosstab``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from scipy import stats
from scipy.stats.contingency import crosstab

from .schema import EvalRecord

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0


class PairingError(ValueError):
    """Runs that cannot be paired (other samples, missing records); the message says what differs."""


@dataclass
class Outcomes:
    """Whether each (sample, trial) of a run was answered correctly: ``correct[i, k]``."""

    keys: list[str]
    categories: list[str]
    correct: np.ndarray  # bool, shape (samples, trials)
    statuses: np.ndarray  # str, same shape

    @property
    def per_sample(self) -> np.ndarray:
        """Each sample's accuracy over its trials."""
        return self.correct.mean(axis=1)

    def subset(self, rows: np.ndarray) -> Outcomes:
        return Outcomes(
            [self.keys[i] for i in np.flatnonzero(rows)],
            [self.categories[i] for i in np.flatnonzero(rows)],
            self.correct[rows],
            self.statuses[rows],
        )

    def trials(self, n: int) -> Outcomes:
        return Outcomes(self.keys, self.categories, self.correct[:, :n], self.statuses[:, :n])


def outcomes(trials: Sequence[Sequence[EvalRecord]], keys: Sequence[str] | None = None) -> Outcomes:
    """The outcome table of a run from its records per trial, rows in ``keys`` order (default: the
    first trial's). Every trial must have a record for every key."""
    if not trials:
        raise PairingError("a run without trials")
    by_trial = [{r.sample_key: r for r in recs} for recs in trials]
    order = list(keys) if keys is not None else [r.sample_key for r in trials[0]]
    for k, bt in enumerate(by_trial):
        missing = [key for key in order if key not in bt]
        if missing:
            raise PairingError(f"trial {k} has no record for {len(missing)} sample(s), e.g. {missing[0]!r}")
    statuses = np.array([[bt[key].status for bt in by_trial] for key in order], dtype=object).reshape(
        len(order), len(by_trial)
    )
    cats = [by_trial[0][key].category for key in order]
    return Outcomes(order, cats, statuses == "correct", statuses)


def _ci(data: tuple, statistic, n_resamples: int, confidence: float, seed: int, paired: bool) -> tuple[float, float]:
    if len(data[0]) < 2:
        v = float(statistic(*[np.asarray(d)[None, :] for d in data], axis=-1)[0])
        return v, v
    res = stats.bootstrap(
        data,
        statistic,
        paired=paired,
        vectorized=True,
        n_resamples=n_resamples,
        confidence_level=confidence,
        method="percentile",
        rng=np.random.default_rng(seed),
    )
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def _mean(x, axis=-1):
    return np.mean(x, axis=axis)


def _mean_diff(a, b, axis=-1):
    return np.mean(a, axis=axis) - np.mean(b, axis=axis)


def accuracy_ci(
    per_sample: np.ndarray,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Cluster-bootstrap interval of the accuracy (the mean of the per-sample accuracies)."""
    return _ci((np.asarray(per_sample, float),), _mean, n_resamples, confidence, seed, paired=False)


def difference_ci(
    per_sample_a: np.ndarray,
    per_sample_b: np.ndarray,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> tuple[float, float]:
    """Paired cluster-bootstrap interval of ``accuracy(B) − accuracy(A)``."""
    a, b = np.asarray(per_sample_a, float), np.asarray(per_sample_b, float)
    return _ci((b, a), _mean_diff, n_resamples, confidence, seed, paired=True)


@dataclass
class McNemar:
    """McNemar's test on paired binary outcomes: ``b`` = A right / B wrong, ``c`` = A wrong / B right."""

    n: int
    b: int
    c: int
    statistic: float  # (|b - c| - 1)^2 / (b + c), 0 without discordant pairs
    pvalue: float  # exact: two-sided binomial test of b among b + c at 1/2
    pvalue_chi2: float  # the statistic against chi-square with 1 degree of freedom

    def to_dict(self) -> dict:
        return {
            "n": self.n,
            "b": self.b,
            "c": self.c,
            "statistic": self.statistic,
            "pvalue": self.pvalue,
            "pvalue_chi2": self.pvalue_chi2,
        }


def mcnemar(a: np.ndarray, b: np.ndarray) -> McNemar:
    """McNemar's test of two runs' correctness on the same items (any shape, compared element-wise)."""
    a, b = np.asarray(a, bool).ravel(), np.asarray(b, bool).ravel()
    if a.shape != b.shape:
        raise PairingError(f"McNemar needs paired outcomes, got {a.size} and {b.size}")
    nb, nc = int((a & ~b).sum()), int((~a & b).sum())
    d = nb + nc
    if d == 0:
        return McNemar(int(a.size), nb, nc, 0.0, 1.0, 1.0)
    stat = (abs(nb - nc) - 1) ** 2 / d
    return McNemar(
        int(a.size), nb, nc, float(stat), float(stats.binomtest(nb, d, 0.5).pvalue), float(stats.chi2.sf(stat, 1))
    )


def cohen_kappa(x: Sequence, y: Sequence) -> float:
    """Cohen's κ of two raters' labels on the same items (NaN when chance agreement is 1, i.e. both
    raters gave one and the same label to everything)."""
    if len(x) != len(y):
        raise PairingError(f"kappa needs the same items, got {len(x)} and {len(y)}")
    if not len(x):
        return float("nan")
    xs, ys = np.asarray(x, dtype=object).astype(str), np.asarray(y, dtype=object).astype(str)
    labels = sorted(set(xs) | set(ys))
    full = crosstab(xs, ys, levels=(labels, labels)).count.astype(float)
    n = full.sum()
    po = np.trace(full) / n
    pe = float((full.sum(axis=1) * full.sum(axis=0)).sum() / n**2)
    if pe >= 1.0:
        return float("nan")
    return float((po - pe) / (1 - pe))


# ----------------------------------------------------------------------------- run comparison
@dataclass
class Accuracy:
    mean: float
    low: float
    high: float
    n: int  # samples

    def to_dict(self) -> dict:
        return {"mean": self.mean, "ci": [self.low, self.high], "n": self.n}


@dataclass
class Flip:
    """A sample whose accuracy over the paired trials differs between two runs."""

    key: str
    category: str
    statuses_a: list[str]
    statuses_b: list[str]
    accuracy_a: float
    accuracy_b: float

    @property
    def change(self) -> str:
        return "fixed" if self.accuracy_b > self.accuracy_a else "broken"

    def to_dict(self) -> dict:
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
class PairResult:
    """Run B against run A: ``difference`` = accuracy(B) − accuracy(A) over the paired trials."""

    a: str
    b: str
    trials: int  # paired trials
    difference: float
    low: float
    high: float
    mcnemar: McNemar
    categories: dict[str, dict] = field(default_factory=dict)  # category -> difference, ci, mcnemar
    flips: list[Flip] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "a": self.a,
            "b": self.b,
            "paired_trials": self.trials,
            "difference": self.difference,
            "ci": [self.low, self.high],
            "mcnemar": self.mcnemar.to_dict(),
            "categories": self.categories,
            "flips": [f.to_dict() for f in self.flips],
        }


def run_accuracy(o: Outcomes, n_resamples: int, confidence: float, seed: int) -> tuple[Accuracy, dict]:
    """Accuracy with its interval, overall and per category."""
    x = o.per_sample
    lo, hi = accuracy_ci(x, n_resamples, confidence, seed)
    overall = Accuracy(float(x.mean()) if len(x) else 0.0, lo, hi, len(x))
    cats = {}
    for cat in sorted(set(o.categories)):
        xs = x[np.array([c == cat for c in o.categories])]
        lo, hi = accuracy_ci(xs, n_resamples, confidence, seed)
        cats[cat] = Accuracy(float(xs.mean()), lo, hi, len(xs))
    return overall, cats


def compare_pair(
    name_a: str,
    a: Outcomes,
    name_b: str,
    b: Outcomes,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> PairResult:
    """Run B against run A on the same samples (rows in the same order), trial k against trial k."""
    if a.keys != b.keys:
        raise PairingError(f"{name_a} and {name_b} hold other samples")
    t = min(a.correct.shape[1], b.correct.shape[1])
    a, b = a.trials(t), b.trials(t)
    xa, xb = a.per_sample, b.per_sample
    lo, hi = difference_ci(xa, xb, n_resamples, confidence, seed)
    cats = {}
    for cat in sorted(set(a.categories)):
        rows = np.array([c == cat for c in a.categories])
        clo, chi = difference_ci(xa[rows], xb[rows], n_resamples, confidence, seed)
        cats[cat] = {
            "n": int(rows.sum()),
            "accuracy_a": float(xa[rows].mean()),
            "accuracy_b": float(xb[rows].mean()),
            "difference": float(xb[rows].mean() - xa[rows].mean()),
            "ci": [clo, chi],
            "mcnemar": mcnemar(a.correct[rows], b.correct[rows]).to_dict(),
        }
    flips = [
        Flip(a.keys[i], a.categories[i], list(a.statuses[i]), list(b.statuses[i]), float(xa[i]), float(xb[i]))
        for i in np.flatnonzero(xa != xb)
    ]
    flips.sort(key=lambda f: (-abs(f.accuracy_b - f.accuracy_a), f.change, f.key))
    return PairResult(
        name_a,
        name_b,
        t,
        float(xb.mean() - xa.mean()),
        lo,
        hi,
        mcnemar(a.correct, b.correct),
        cats,
        flips,
    )
