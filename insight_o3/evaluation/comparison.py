"""Two or more runs on the same samples: accuracy with intervals, paired differences, McNemar, flips.

Every run is compared with the first (the reference), trial ``k`` against trial ``k`` for the trials
both have (:func:`~.significance.compare_pair`); the statistics are explained in :mod:`.significance`.
Cost and tokens per episode (one (sample, trial)) come from the records: tokens of the model and the
vSearcher (the judge's are left out, so runs judged alike and differently compare the same), cost as
recorded (``cost_usd``, judge included; None for runs without a price file).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..endpoints.usage import total_tokens
from .attribution import attribution_metrics
from .run_records import RunRecords
from .significance import (
    DEFAULT_CONFIDENCE,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Accuracy,
    PairingError,
    PairResult,
    compare_pair,
    outcomes,
    run_accuracy,
)

#: Roles whose tokens count as the cost of answering (the judge is the evaluation's, not the system's).
SYSTEM_ROLES = ("model", "vsearcher")


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
    attribution: dict = field(default_factory=dict)  # bucket -> share of episodes; "split": D.4 shares of errors

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "path": self.path,
            "n_samples": self.n_samples,
            "n_trials": self.n_trials,
            "accuracy": self.accuracy.to_dict(),
            "categories": {c: a.to_dict() for c, a in self.categories.items()},
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

    def to_dict(self) -> dict:
        return {
            "reference": self.runs[0].name if self.runs else None,
            "confidence": self.confidence,
            "n_resamples": self.n_resamples,
            "seed": self.seed,
            "ci_method": "cluster bootstrap over samples (paired for differences), percentile",
            "runs": [r.to_dict() for r in self.runs],
            "pairs": [p.to_dict() for p in self.pairs],
        }


def _attribution(recs) -> dict:
    """Share of episodes per bucket, plus the D.4 shares of the errors (``split``) for InSight-o3 runs."""
    m = attribution_metrics(recs)
    return {**m["attribution_ratio"], "split": m.get("error_split_ratio")}


def system_tokens(usage: dict) -> int:
    return total_tokens({r: c for r, c in usage.items() if r in SYSTEM_ROLES})


def unique_names(runs: list[RunRecords]) -> list[str]:
    """The runs' names, made distinct (a repeated name gets its path)."""
    names = [r.name for r in runs]
    return [n if names.count(n) == 1 else f"{n} ({r.path})" for n, r in zip(names, runs)]


def compare_runs(
    runs: list[RunRecords],
    n_resamples: int = DEFAULT_RESAMPLES,
    confidence: float = DEFAULT_CONFIDENCE,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    """Compare runs on the same samples (the first is the reference). Raises
    :class:`~.significance.PairingError` when they hold other samples."""
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
    table = [outcomes(r.trials, keys) for r in runs]
    stats = []
    for name, r, o in zip(names, runs, table):
        overall, cats = run_accuracy(o, n_resamples, confidence, seed)
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
                sum(system_tokens(x.usage_dict()) for x in recs) / len(recs) if recs else 0.0,
                (sum(costs) / len(recs)) if costs and len(costs) == len(recs) else None,
                _attribution(recs),
            )
        )
    pairs = [
        compare_pair(names[0], table[0], names[i], table[i], n_resamples, confidence, seed) for i in range(1, len(runs))
    ]
    return Comparison(stats, pairs, confidence, n_resamples, seed)
