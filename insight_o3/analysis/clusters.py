"""Which samples are independent: the clusters every statistic resamples, flips and counts.

Questions on the same image are not independent: when a system reads an image well it tends to answer all of
that image's questions better, so the two systems' per-question differences correlate within an image (O3-Bench
holds 345 questions on 204 images). Treating them as independent makes a test reject too often and an interval
too narrow (``tests/analysis/test_significance_simulation.py`` shows it). The unit of every statistic is therefore the
**cluster**: by default the samples sharing an image (:attr:`Cluster.IMAGE`; a sample whose image is not
recorded is its own cluster), or each sample alone (:attr:`Cluster.SAMPLE`).

A statistic of per-sample values ``x`` (the last axis; leading axes are independent sets, e.g. simulation
replicates with the same design) works on the cluster totals ``X_g = Σ_{i∈g} x_i`` and sizes ``n_g``: the mean
is ``ΣX_g / n`` and its variance the cluster-robust (CR1) one, ``G/(G−1) Σ_g (X_g − x̄ n_g)² / n²`` (Liang &
Zeger 1986; Cameron & Miller 2015, *J. Human Resources* 50:317), which is ``s²/n`` when every cluster is one
sample.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .settings import Cluster as Cluster


@dataclass(frozen=True)
class Design:
    """Samples in clusters: ``index[i]`` is sample ``i``'s cluster (``0 .. count − 1``)."""

    index: np.ndarray  # int, one per sample
    count: int

    @classmethod
    def of(cls, labels: Sequence[str] | np.ndarray) -> Design:
        """Clusters of equal labels, numbered in order of first appearance."""
        _, first, inverse = np.unique(np.asarray(labels, dtype=object).astype(str), True, True)
        order = np.argsort(np.argsort(first))  # relabel by first appearance: cluster 0 holds sample 0
        return cls(order[inverse].astype(int), len(first))

    @classmethod
    def single(cls, n: int) -> Design:
        """Every sample its own cluster."""
        return cls(np.arange(n), n)

    @property
    def n(self) -> int:
        return len(self.index)

    @property
    def sizes(self) -> np.ndarray:
        return np.bincount(self.index, minlength=self.count).astype(float)

    def subset(self, rows: np.ndarray) -> Design:
        """The design of the samples in ``rows`` (a mask), clusters renumbered."""
        return Design.of(self.index[np.asarray(rows, bool)])

    def totals(self, x: np.ndarray) -> np.ndarray:
        """Cluster totals of ``x`` over its last axis: shape ``(..., count)``."""
        order = np.argsort(self.index, kind="stable")
        starts = np.flatnonzero(np.r_[True, np.diff(self.index[order]) != 0])
        return np.add.reduceat(np.asarray(x, float)[..., order], starts, axis=-1)

    def effective_clusters(self) -> float:
        """``n² / Σ n_g²``: the number of equal clusters that would carry as much information when a cluster's
        samples are identical (``count`` for equal sizes, ``n`` for single samples)."""
        return float(self.n**2 / (self.sizes**2).sum())

    def variance_of_mean(self, x: np.ndarray) -> np.ndarray:
        """The cluster-robust (CR1) variance of ``mean(x)`` over the last axis (0 with one cluster)."""
        x = np.asarray(x, float)
        if self.count < 2:
            return np.zeros(x.shape[:-1])
        resid = self.totals(x) - x.mean(axis=-1, keepdims=True) * self.sizes
        return self.count / (self.count - 1) * (resid * resid).sum(axis=-1) / self.n**2


def cluster_labels(keys: Sequence[str], images: Sequence[str], how: Cluster) -> list[str]:
    """Each sample's cluster label: its image (``how`` = image; the sample's key when no image is recorded),
    or its own key."""
    if how is Cluster.SAMPLE:
        return list(keys)
    return [f"image:{im}" if im else f"sample:{k}" for k, im in zip(keys, images)]
