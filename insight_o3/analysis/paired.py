"""Run B against run A on the same samples: the accuracies, the paired difference with its interval, the test
that decides, what the comparison could have found, per category (Holm-adjusted), and the samples that flipped.

The statistics are those of :mod:`.significance` (test and intervals) and :mod:`.power` (standard error,
minimum detectable effect, variance components) over the clusters of :mod:`.clusters` (by default the samples
sharing an image), on each run's trials averaged per sample (:mod:`.outcomes`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from statsmodels.stats.multitest import multipletests

from ..base.json_types import JSONObject
from .clusters import Cluster, Design, cluster_labels
from .outcomes import Outcomes, PairingError
from .power import VarianceComponents, detectable_effect, standard_error, variance_components
from .significance import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    McNemar,
    accuracy_interval,
    bootstrap_difference,
    difference_interval,
    is_exact,
    mcnemar,
    sign_flip_pvalue,
    smallest_pvalue,
)

#: Below this many clusters the percentile bootstrap is too narrow (``scripts/stats_audit.py``).
MIN_CLUSTERS_FOR_BOOTSTRAP = 40


def design_of(o: Outcomes, cluster: Cluster) -> Design:
    """The clusters of a run's samples (:func:`~.clusters.cluster_labels`)."""
    return Design.of(cluster_labels(o.keys, o.images, cluster))


def holm(pvalues: list[float]) -> list[float]:
    """Holm's step-down adjustment (``statsmodels.stats.multitest.multipletests(method="holm")``)."""
    if not pvalues:
        return []
    return [float(p) for p in multipletests(pvalues, method="holm")[1]]


@dataclass
class Accuracy:
    mean: float
    low: float
    high: float
    n: int  # samples counted (with a judged trial, unless failures count as wrong)
    clusters: int

    def to_dict(self) -> JSONObject:
        return {"mean": self.mean, "ci": [self.low, self.high], "n": self.n, "clusters": self.clusters}


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
    """B against A on a set of samples: the difference, its intervals, the sign-flip test and its reach."""

    n: int  # samples paired
    clusters: int  # independent units: the test flips, the intervals resample these
    differing: int  # clusters on which the runs differ at all (the others cannot move the test)
    accuracy_a: float
    accuracy_b: float
    difference: float
    low: float
    high: float
    bootstrap: tuple[float, float] | None
    pvalue: float
    exact: bool  # the p-value enumerates every sign vector
    min_pvalue: float  # the smallest p these clusters allow
    alpha: float
    se: float  # cluster-robust standard error of the difference
    mde: float | None  # minimum detectable effect at 80 % power
    components: VarianceComponents | None
    mcnemar: McNemar
    pvalue_holm: float | None = None  # set where this p is one of several (categories, pairs)

    @property
    def significant(self) -> bool:
        """What decides: the test at ``alpha`` (Holm-adjusted where it is one of several)."""
        return (self.pvalue_holm if self.pvalue_holm is not None else self.pvalue) < self.alpha

    @property
    def interval_agrees(self) -> bool:
        """Whether the interval excludes 0 exactly when the (unadjusted) test rejects."""
        return (self.pvalue < self.alpha) == (self.low > 0 or self.high < 0)

    @property
    def can_be_significant(self) -> bool:
        return self.min_pvalue < self.alpha

    def to_dict(self) -> JSONObject:
        return {
            "n": self.n,
            "clusters": self.clusters,
            "clusters_differing": self.differing,
            "accuracy_a": self.accuracy_a,
            "accuracy_b": self.accuracy_b,
            "difference": self.difference,
            "ci": [self.low, self.high],
            "bootstrap_ci": list(self.bootstrap) if self.bootstrap else None,
            "bootstrap_too_few_clusters": self.clusters < MIN_CLUSTERS_FOR_BOOTSTRAP,
            "pvalue": self.pvalue,
            "pvalue_exact": self.exact,
            "pvalue_holm": self.pvalue_holm,
            "alpha": self.alpha,
            "significant": self.significant,
            "interval_agrees_with_test": self.interval_agrees,
            "smallest_attainable_pvalue": self.min_pvalue,
            "se": self.se,
            "mde_80": self.mde,
            "variance_components": self.components.to_dict() if self.components else None,
            "mcnemar": self.mcnemar.to_dict(),
        }


@dataclass
class PairResult:
    """Run B against run A over the samples both judged: ``difference`` = accuracy(B) − accuracy(A)."""

    a: str
    b: str
    trials_a: int
    trials_b: int
    cluster: Cluster
    excluded: int  # samples left out: no judged trial in one of the runs
    overall: Paired
    categories: dict[str, Paired] = field(default_factory=dict)
    flips: list[Flip] = field(default_factory=list)
    #: With items lost to API errors: the overall comparison under the other rule (counted as wrong / left out).
    other_rule: Paired | None = None

    def to_dict(self) -> JSONObject:
        return {
            "a": self.a,
            "b": self.b,
            "trials_a": self.trials_a,
            "trials_b": self.trials_b,
            "cluster": str(self.cluster),
            "samples_excluded": self.excluded,
            **self.overall.to_dict(),
            "categories": {c: p.to_dict() for c, p in self.categories.items()},
            "categories_multiplicity": f"Holm over {len(self.categories)} categories (exploratory)",
            "other_failure_rule": self.other_rule.to_dict() if self.other_rule else None,
            "flips": [f.to_dict() for f in self.flips],
        }


def run_accuracy(
    o: Outcomes,
    confidence: float = DEFAULT_CONFIDENCE,
    failed_as_wrong: bool = False,
    name: str = "the run",
    cluster: Cluster = Cluster.IMAGE,
) -> tuple[Accuracy, dict[str, Accuracy]]:
    """Accuracy with its interval, overall and per category (a category without a counted sample is
    left out), over the samples with a counted trial. Raises :class:`PairingError` when there is none."""
    x, m = o.per_sample(failed_as_wrong)
    keep = m > 0
    if not keep.any():
        raise PairingError(f"{name}: every item was lost to API errors; nothing was judged")
    design = design_of(o, cluster)

    def acc(rows: np.ndarray) -> Accuracy:
        d = design.subset(rows)
        lo, hi = accuracy_interval(x[rows], m[rows], d, confidence)
        return Accuracy(float(x[rows].mean()), lo, hi, int(rows.sum()), d.count)

    cats = np.array(o.categories, dtype=object)
    per_cat = {c: acc(keep & (cats == c)) for c in sorted(set(o.categories)) if (keep & (cats == c)).any()}
    return acc(keep), per_cat


def _paired(
    a: Outcomes,
    b: Outcomes,
    rows: np.ndarray,
    design: Design,
    n_resamples: int,
    confidence: float,
    seed: int,
    failed_as_wrong: bool,
) -> Paired:
    xa, ma = a.per_sample(failed_as_wrong)
    xb, mb = b.per_sample(failed_as_wrong)
    xa, ma, xb, mb = xa[rows], ma[rows], xb[rows], mb[rows]
    t = min(a.correct.shape[1], b.correct.shape[1])
    both = a.judged(failed_as_wrong)[rows, :t] & b.judged(failed_as_wrong)[rows, :t]
    desc = mcnemar(a.correct[rows, :t][both], b.correct[rows, :t][both])
    des = design.subset(rows)
    d = xb - xa
    totals = des.totals(d)
    lo, hi = difference_interval(d, des, confidence)
    alpha = 1 - confidence
    se = standard_error(d, des)
    return Paired(
        n=len(d),
        clusters=des.count,
        differing=int((np.abs(totals) > 1e-9).sum()),
        accuracy_a=float(xa.mean()),
        accuracy_b=float(xb.mean()),
        difference=float(d.mean()),
        low=lo,
        high=hi,
        bootstrap=bootstrap_difference(d, des, n_resamples, confidence, seed),
        pvalue=float(sign_flip_pvalue(totals, n_resamples, seed)),
        exact=is_exact(des.count, n_resamples),
        min_pvalue=smallest_pvalue(totals, n_resamples),
        alpha=alpha,
        se=se,
        mde=detectable_effect(se, des.count, alpha) if se > 0 else None,
        components=variance_components(xa, ma, xb, mb, des, alpha),
        mcnemar=desc,
    )


def _kept(a: Outcomes, b: Outcomes, failed_as_wrong: bool) -> np.ndarray:
    return (a.per_sample(failed_as_wrong)[1] > 0) & (b.per_sample(failed_as_wrong)[1] > 0)


def compare_pair(
    name_a: str,
    a: Outcomes,
    name_b: str,
    b: Outcomes,
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    failed_as_wrong: bool = False,
    cluster: Cluster = Cluster.IMAGE,
) -> PairResult:
    """Run B against run A on the same samples (rows in the same order), each with all its trials; the
    clusters are A's (:func:`design_of`). The per-category p-values are Holm-adjusted over the categories."""
    if a.keys != b.keys:
        raise PairingError(f"{name_a} and {name_b} hold other samples")
    xa, _ = a.per_sample(failed_as_wrong)
    xb, _ = b.per_sample(failed_as_wrong)
    keep = _kept(a, b, failed_as_wrong)
    if not keep.any():
        raise PairingError(f"{name_a} and {name_b} have no sample judged in both (every item lost to API errors)")
    design = design_of(a, cluster)
    cats = np.array(a.categories, dtype=object)
    per_cat = {
        c: _paired(a, b, keep & (cats == c), design, n_resamples, confidence, seed, failed_as_wrong)
        for c in sorted(set(a.categories))
        if (keep & (cats == c)).any()
    }
    if len(per_cat) > 1:
        for p, adj in zip(per_cat.values(), holm([p.pvalue for p in per_cat.values()])):
            p.pvalue_holm = adj
    flips = [
        Flip(a.keys[i], a.categories[i], list(a.statuses[i]), list(b.statuses[i]), float(xa[i]), float(xb[i]))
        for i in np.flatnonzero(keep & (xa != xb))
    ]
    flips.sort(key=lambda f: (-abs(f.accuracy_b - f.accuracy_a), f.change, f.key))
    other = None
    if a.failed_items() or b.failed_items():
        rows = _kept(a, b, not failed_as_wrong)
        if rows.any():
            other = _paired(a, b, rows, design, n_resamples, confidence, seed, not failed_as_wrong)
    return PairResult(
        name_a,
        name_b,
        a.correct.shape[1],
        b.correct.shape[1],
        cluster,
        int((~keep).sum()),
        _paired(a, b, keep, design, n_resamples, confidence, seed, failed_as_wrong),
        per_cat,
        flips,
        other,
    )
