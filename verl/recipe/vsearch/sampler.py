"""Batches that mix data sources in a fixed ratio (``+data.batch_sampler.weights.<data_source>=w``).

verl's ``create_rl_sampler`` builds this class from ``data.sampler.{class_path,class_name}`` with
``(data_source=dataset, data_config=config.data)``, and the trainer's ``StatefulDataLoader`` cuts
the index stream into batches of ``data.train_batch_size`` (``drop_last=True``). The sampler therefore
emits the stream batch by batch: every consecutive block of ``batch_size`` indices holds exactly
``counts[s]`` rows of each source ``s``, where ``counts`` splits ``batch_size`` by the weights
(largest remainder, ties to the source listed first; 24 at 0.5/0.5 -> 12 + 12).

Within an epoch each source is drawn without replacement from its own seeded permutation; an epoch
ends when the scarcest source (relative to its per-batch count) runs out, so ``len(sampler)`` is
``n_batches * batch_size``. Everything derives from ``(stream, seed, epoch)``, and the position is saved by
``state_dict`` (``epoch``, ``offset``, with the stream, seed and counts it indexes, which a resume must match):
a resumed run continues with exactly the indices an uninterrupted one would have produced (the dataloader must
use ``num_workers=0``, which verl enforces for custom samplers).

Two streams (``data.batch_sampler.stream``, set by ``vsearch.variant`` through ``${vsearch_protocol:sampler_stream}``):

* ``fork`` (``original``): the fork's ``VSearchBatchSampler`` (``verl/experimental/dataset/vsearch_sampler.py`` of
  ``926d137``, ``:52, 97-111, 181-207``): per epoch one ``torch.Generator`` seeded ``seed + epoch`` draws a
  ``randperm`` for every weighted source present, in the sources' order; a batch is the sources' next
  ``counts[s]`` rows concatenated in that order (not shuffled); ties of the largest remainder go to the
  fractional part, then the source name. The fork took the sources' order from a ``set`` (so from the
  process's string hashing); here it is the order the weights are listed in (``train.sh``: as written).
* ``mixed`` (``paper``): per source a numpy permutation of ``(seed, epoch, j)``, each batch's rows shuffled.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence, Sized
from typing import Any

import numpy as np
from verl.experimental.dataset.sampler import AbstractSampler

from insight_o3.base.json_types import JSONObject

STREAMS = ("fork", "mixed")


def split_batch(batch_size: int, weights: Mapping[str, float], ties_by_name: bool = False) -> dict[str, int]:
    """Rows of each source in one batch (largest remainder; sums to ``batch_size``). Ties: the source listed first,
    or (``ties_by_name``, the fork's ``vsearch_sampler.py:111``) the smaller name."""
    if batch_size <= 0:
        raise ValueError(f"batch size must be positive, got {batch_size}")
    if not weights:
        raise ValueError("data.batch_sampler.weights is empty: add +data.batch_sampler.weights.<data_source>=<w>")
    for name, w in weights.items():
        if isinstance(w, bool) or not isinstance(w, (int, float)) or not np.isfinite(w) or w < 0:
            raise ValueError(f"data.batch_sampler.weights.{name} must be a non-negative number, got {w!r}")
    total = float(sum(weights.values()))
    if total <= 0:
        raise ValueError("data.batch_sampler.weights must have a positive sum")
    exact = {k: batch_size * w / total for k, w in weights.items()}
    counts = {k: int(np.floor(v)) for k, v in exact.items()}
    if ties_by_name:
        order = sorted(weights, key=lambda k: (-(exact[k] - counts[k]), k))
    else:
        order = sorted(weights, key=lambda k: -(exact[k] - counts[k]))  # stable: ties keep listing order
    for k in order[: batch_size - sum(counts.values())]:
        counts[k] += 1
    return counts


def dataset_sources(dataset: Sized) -> list[str]:
    """The ``data_source`` of every row (RLHFDataset keeps the parquet rows in ``dataframe``)."""
    frame = getattr(dataset, "dataframe", None)
    if frame is None or "data_source" not in getattr(frame, "column_names", getattr(frame, "columns", [])):
        raise TypeError(
            f"{type(dataset).__name__} has no dataframe with a data_source column; "
            "WeightedSourceSampler needs verl's RLHFDataset (or a subclass)"
        )
    return [str(s) for s in frame["data_source"]]


class WeightedSourceSampler(AbstractSampler):
    """Index sampler yielding batch-sized blocks in the configured source ratio (see module doc)."""

    def __init__(self, data_source: Sized, data_config: Any):
        weights = _to_dict(_select(data_config, ("batch_sampler", "weights")))
        batch_size = data_config.get("gen_batch_size", None) or data_config.get("train_batch_size")
        seed = _select(data_config, ("batch_sampler", "seed"))
        self.seed = int(seed if seed is not None else (data_config.get("seed", None) or 0))
        self.stream = str(_select(data_config, ("batch_sampler", "stream")) or "mixed")
        if self.stream not in STREAMS:
            raise ValueError(f"data.batch_sampler.stream must be one of {STREAMS}, got {self.stream!r}")
        self.batch_size = int(batch_size)
        split = split_batch(self.batch_size, weights, ties_by_name=self.stream == "fork")
        self.counts = {k: c for k, c in split.items() if c > 0}
        sources = dataset_sources(data_source)
        self.rows: dict[str, np.ndarray] = {}
        # the fork draws a permutation for every weighted source present, even one without a row in a batch
        self.drawn = [k for k in weights if k in set(sources)] if self.stream == "fork" else list(self.counts)
        for name in dict.fromkeys([*self.counts, *self.drawn]):
            self.rows[name] = np.array([i for i, s in enumerate(sources) if s == name], dtype=np.int64)
        present = sorted(set(sources))
        missing = [k for k in self.counts if len(self.rows[k]) == 0]
        if missing:
            raise ValueError(
                f"data.batch_sampler.weights names data_source(s) {missing} that the dataset does not "
                f"contain; its data sources are {present}"
            )
        unweighted = sorted(set(present) - set(weights))
        if unweighted:
            raise ValueError(
                f"dataset rows with data_source {unweighted} have no weight: add "
                f"+data.batch_sampler.weights.<name>=<w> (0 to skip them)"
            )
        self.n_batches = min(len(self.rows[k]) // c for k, c in self.counts.items())
        if self.n_batches == 0:
            short = {k: (len(self.rows[k]), c) for k, c in self.counts.items() if len(self.rows[k]) < c}
            raise ValueError(f"not enough rows for one batch of {self.batch_size}: (rows, needed) per source {short}")
        self._epoch, self._offset = 0, 0

    def __len__(self) -> int:
        return self.n_batches * self.batch_size

    def epoch_indices(self, epoch: int) -> np.ndarray:
        """The full index stream of one epoch (a pure function of seed and epoch)."""
        if self.stream == "fork":
            return self._fork_epoch(epoch)
        perms = {
            k: np.random.default_rng([self.seed, epoch, j]).permutation(self.rows[k]) for j, k in enumerate(self.counts)
        }
        mix = np.random.default_rng([self.seed, epoch, len(self.counts)])
        blocks = []
        for b in range(self.n_batches):
            block = np.concatenate([perms[k][b * c : (b + 1) * c] for k, c in self.counts.items()])
            blocks.append(mix.permutation(block))
        return np.concatenate(blocks)

    def _fork_epoch(self, epoch: int) -> np.ndarray:
        import torch

        g = torch.Generator()
        g.manual_seed(int(self.seed + epoch))
        perms = {k: self.rows[k][torch.randperm(len(self.rows[k]), generator=g).numpy()] for k in self.drawn}
        blocks = [
            np.concatenate([perms[k][b * c : (b + 1) * c] for k, c in self.counts.items()])
            for b in range(self.n_batches)
        ]
        return np.concatenate(blocks)

    def __iter__(self) -> Iterator[int]:
        if self._offset >= len(self):  # restored (or re-entered) exactly at the end of an epoch
            self._epoch, self._offset = self._epoch + 1, 0
        stream = self.epoch_indices(self._epoch)
        while self._offset < len(stream):
            i = int(stream[self._offset])
            self._offset += 1
            yield i
        self._epoch, self._offset = self._epoch + 1, 0

    def state_dict(self) -> JSONObject:
        return {
            "epoch": self._epoch,
            "offset": self._offset,
            "seed": self.seed,
            "counts": dict(self.counts),
            "stream": self.stream,
        }

    def load_state_dict(self, state: dict) -> None:
        """The saved position, refused when it belongs to another index stream (seed, counts or stream differ: the
        offset would point into different indices); a state saved before the stream was recorded is taken as this
        run's stream."""
        saved = (state.get("seed"), state.get("counts"), state.get("stream", self.stream))
        if saved != (self.seed, dict(self.counts), self.stream):
            raise ValueError(
                f"sampler state was saved with seed={saved[0]} counts={saved[1]} stream={saved[2]}, "
                f"but this run has seed={self.seed} counts={dict(self.counts)} stream={self.stream} "
                "(data.batch_sampler.seed / .stream, set by vsearch.variant: resume under the variant that saved it, "
                "or set both to the saved values)"
            )
        self._epoch, self._offset = int(state["epoch"]), int(state["offset"])


def _select(cfg: Any, path: Sequence[str]) -> Any:
    node = cfg
    for key in path:
        if node is None:
            return None
        node = node.get(key, None) if hasattr(node, "get") else None
    return node


def _to_dict(node: Any) -> JSONObject:
    if node is None:
        return {}
    try:
        from omegaconf import DictConfig, OmegaConf

        if isinstance(node, DictConfig):
            return dict(OmegaConf.to_container(node, resolve=True))
    except ImportError:
        pass
    return dict(node)
