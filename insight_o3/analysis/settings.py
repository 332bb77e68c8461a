"""The statistics' settings that commands offer as flags (``compare``, ``export``: ``--cluster``, ``--confidence``,
``--n_resamples``, ``--seed``), apart from the numerics (:mod:`insight_o3.analysis.clusters`,
:mod:`insight_o3.analysis.significance`) so that building a parser loads neither numpy, scipy nor statsmodels."""

from __future__ import annotations

from ..protocol.statuses import Vocabulary

__all__ = ["DEFAULT_CONFIDENCE", "DEFAULT_RESAMPLES", "DEFAULT_SEED", "Cluster"]

DEFAULT_RESAMPLES = 10_000
DEFAULT_CONFIDENCE = 0.95
DEFAULT_SEED = 0


class Cluster(Vocabulary):
    """What one independent unit is (``--cluster``)."""

    IMAGE = "image"  # the samples that share an image
    SAMPLE = "sample"  # each sample alone
