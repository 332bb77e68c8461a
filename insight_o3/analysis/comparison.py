"""Two or more runs on the same samples: accuracy with intervals, the paired test, flips, cost.

Every run is compared with the first (the reference) over the samples both judged, each run with all
its trials (:func:`~.paired.compare_pair`; the statistics are explained in :mod:`.significance` and
:mod:`.power`), over clusters of samples (:mod:`.clusters`: by default the samples sharing an image). With two or
more runs against the reference, their p-values are Holm-adjusted over the pairs. Items lost to API errors are
left out and counted per run unless ``failed_as_wrong``; with such items, the other rule's figures are given
beside. Tokens per episode
(one (sample, trial)) are the model's and the vSearcher's (:func:`~insight_o3.endpoints.usage.system_tokens`, the
judge's left out, so runs judged alike and differently compare the same); cost per episode is as
recorded (``cost_usd``, the judge included; None for runs without a price file).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from ..endpoints.usage import system_tokens
from ..evaluation.attribution import attribution_metrics
from ..evaluation.schema import EvalRecord
from .clusters import Cluster
from .outcomes import PairingError, check_categories, outcomes
from .paired import Accuracy, PairResult, compare_pair, holm, run_accuracy
from .run_records import RunRecords
from .significance import DEFAULT_CONFIDENCE, DEFAULT_RESAMPLES, DEFAULT_SEED, METHODS


@dataclass
class RunStats:
    name: str
    path: str
    n_samples: int
    n_trials: int
    accuracy: Accuracy
    categories: dict[str, Accuracy]
    tokens_per_episode: float
    cost_per_episode: float | None
    failed_items: int = 0  # (sample, trial) records lost to API errors
    failed_samples: int = 0  # samples without a judged trial
    attribution: dict = field(default_factory=dict)  # bucket -> share of episodes; "split": D.4 shares of errors
    other_rule: Accuracy | None = None  # with failed items: the accuracy under the other rule

    def to_dict(self) -> JSONObject:
        return {
            "name": self.name,
            "path": self.path,
            "n_samples": self.n_samples,
            "n_trials": self.n_trials,
            "accuracy": self.accuracy.to_dict(),
            "categories": {c: a.to_dict() for c, a in self.categories.items()},
            "failed": {"items": self.failed_items, "samples_without_a_judged_trial": self.failed_samples},
            "accuracy_other_failure_rule": self.other_rule.to_dict() if self.other_rule else None,
            "tokens_per_episode": self.tokens_per_episode,
            "cost_per_episode": self.cost_per_episode,
            "attribution": self.attribution,
        }


@dataclass
class Comparison:
    runs: list[RunStats]
    pairs: list[PairResult]  # run i (i >= 1) against run 0
    confidence: float
    n_resamples: int
    seed: int
    failed_as_wrong: bool = False
    cluster: Cluster = Cluster.IMAGE

    def to_dict(self) -> JSONObject:
        return {
            "reference": self.runs[0].name if self.runs else None,
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "cluster": str(self.cluster),
            "methods": METHODS,
            "failed_items": "counted as wrong" if self.failed_as_wrong else "excluded",
            "pairs_multiplicity": f"Holm over {len(self.pairs)} pairs" if len(self.pairs) > 1 else None,
            "tokens_per_episode": "model + vSearcher prompt and completion tokens; the judge's excluded",
            "runs": [r.to_dict() for r in self.runs],
            "pairs": [p.to_dict() for p in self.pairs],
        }


def _attribution(recs: Iterable[EvalRecord]) -> JSONObject:
    """Share of episodes per bucket, plus the D.4 shares of the errors (``split``) for InSight-o3 runs."""
    m = attribution_metrics(recs)
    return {**m["attribution_ratio"], "split": m.get("error_split_ratio")}


def tokens_per_episode(recs: Sequence[EvalRecord]) -> float:
    """Mean :func:`~insight_o3.endpoints.usage.system_tokens` over the records (0 without records)."""
    return sum(system_tokens(x.usage_dict()) for x in recs) / len(recs) if recs else 0.0


def unique_names(runs: list[RunRecords]) -> list[str]:
    """The runs' names, made distinct (a repeated name gets its path)."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{n} ({r.path})" for n, r in zip(names, runs)]


def compare_runs(
    runs: list[RunRecords],
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
    failed_as_wrong: bool = False,
    cluster: Cluster = Cluster.IMAGE,
) -> Comparison:
    """Compare runs on the same samples (the first is the reference). Raises
    :class:`~.outcomes.PairingError` when they hold other samples or none, or give a sample other categories."""
    if len(runs) < 2:
        raise PairingError("compare needs two or more runs")
    names = unique_names(runs)
    keys = runs[0].keys
    for name, r in zip(names[1:], runs[1:]):
        if set(r.keys) != set(keys):
            only_a, only_b = set(keys) - set(r.keys), set(r.keys) - set(keys)
            raise PairingError(
                f"{names[0]} and {name} hold other samples ({len(only_a)} only in the first, {len(only_b)} only "
                f"in the second, e.g. {sorted(only_a or only_b)[0]!r}); compare runs of the same benchmark and subset"
            )
    table = [outcomes(r.trials, keys, name) for name, r in zip(names, runs)]
    check_categories(names, table)
    stats = []
    for name, r, o in zip(names, runs, table):
        overall, cats = run_accuracy(o, confidence, failed_as_wrong, name, cluster)
        other = None
        if o.failed_items() and (failed_as_wrong or o.failed_items() < o.statuses.size):
            other = run_accuracy(o, confidence, not failed_as_wrong, name, cluster)[0]
        recs = r.records()
        costs = [x.cost_usd for x in recs if x.cost_usd is not None]
        stats.append(
            RunStats(
                name,
                r.path,
                len(keys),
                len(r.trials),
                overall,
                cats,
                tokens_per_episode(recs),
                (sum(costs) / len(recs)) if costs and len(costs) == len(recs) else None,
                o.failed_items(),
                o.failed_samples(),
                _attribution(recs),
                other,
            )
        )
    pairs = [
        compare_pair(names[0], table[0], names[i], table[i], n_resamples, confidence, seed, failed_as_wrong, cluster)
        for i in range(1, len(runs))
    ]
    if len(pairs) > 1:
        for p, adj in zip(pairs, holm([p.overall.pvalue for p in pairs])):
            p.overall.pvalue_holm = adj
    return Comparison(stats, pairs, confidence, n_resamples, seed, failed_as_wrong, cluster)
