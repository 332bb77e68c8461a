"""A run's outcome table: whether each (sample, trial) was correct, judged or lost, with the sample's category
and image — what every paired statistic (:mod:`.paired`) reads.

**The unit is the sample.** A sample's trials share the image and the question, so they are not independent:
the statistics first average each run's trials per sample (``x_i`` = the share of sample ``i``'s counted trials
that are correct, *all* of the run's trials — two runs need not have run the same number) and then work on the
samples, grouped into clusters (:mod:`.clusters`: by default the samples that share an image).

**Failed items** (status ``failed``: the model's or the judge's API call was lost) are not the system's answer:
by default they are left out (a sample keeps its judged trials; a sample without a judged trial in a run leaves
the paired analysis) and counted per run; ``failed_as_wrong`` counts them as wrong, as ``eval_metrics.json``'s
``overall_accuracy`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..evaluation.schema import EvalRecord

#: The status of an item lost to API errors (see :mod:`insight_o3.evaluation.judge`).
FAILED = "failed"
CORRECT = "correct"


class PairingError(ValueError):
    """Runs that cannot be paired (other samples, missing records, no samples); the message says what."""


@dataclass
class Outcomes:
    """Each (sample, trial) of a run: ``statuses[i, k]`` and whether it was correct; each sample's category and
    image (``""`` when the record names none)."""

    keys: list[str]
    categories: list[str]
    images: list[str]
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
            [self.keys[i] for i in idx],
            [self.categories[i] for i in idx],
            [self.images[i] for i in idx],
            self.correct[rows],
            self.statuses[rows],
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
    first = [by_trial[0][key] for key in order]
    return Outcomes(order, [r.category for r in first], [r.image for r in first], statuses == CORRECT, statuses)


def check_categories(names: Sequence[str], tables: Sequence[Outcomes]) -> None:
    """Runs of one benchmark give each sample the same category; a difference means the runs were made on
    different annotation files, and per-category statistics would mix them. Raises :class:`PairingError` naming
    the first sample that differs. (Images are not checked: a run whose images moved records other paths; the
    clusters are the reference run's.)"""
    ref = tables[0]
    for name, t in zip(names[1:], tables[1:]):
        for key, x, y in zip(ref.keys, ref.categories, t.categories):
            if x != y:
                raise PairingError(
                    f"{names[0]} and {name} give sample {key!r} different categories ({x!r} and {y!r}): "
                    "compare runs of the same annotation file"
                )
