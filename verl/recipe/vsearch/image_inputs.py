"""Image *references* in training rows; the pixel values are rebuilt where the model runs.

verl 0.7.0's agent-loop worker gives every training row its own ``multi_modal_inputs`` with the image
processor's ``pixel_values`` (fp32, 4 patches x 1176 values per image token, ~18.4 KB per token): at the
D.1 budget a row holding the full image carries ~75 MB plus its crops, and a step of 192-672 rows
15-50 GB, shipped from the agent-loop workers to the driver and from there to the actor and reference
workers through Ray's object store. A row needs far less to get the same pixels back: which file, which
region of it, the size it was shown at and how it was rendered: the :class:`~insight_o3.imaging.images.ImageRef`
s the vSearcher session already plans (:class:`ImageViews`, a few hundred bytes).

* The agent-loop worker (:class:`recipe.vsearch.episodes.VSearchAgentLoopWorker`) puts
  ``{"image_grid_thw": ..., VIEWS_KEY: ImageViews}`` in a training row's ``multi_modal_inputs`` instead of
  the processor's output (the grids are what verl's mrope position ids need; computed from the image
  sizes, :func:`recipe.vsearch.episodes.image_grid_thw`).
* The recipe's actor / reference worker (:mod:`recipe.vsearch.on_policy`) wraps each policy's
  ``DataParallelPPOActor._forward_micro_batch`` (:func:`rebuild_pixels_in`): before verl concatenates the
  micro-batch's ``multi_modal_inputs``, every row with references gets its ``pixel_values`` back
  (:func:`rebuild`): the same views rendered by the same code as in the rollout
  (:func:`insight_o3.agents.views.pil_view` over an :class:`~insight_o3.imaging.images.ImageStore`), through
  the worker's own image processor, one image at a time, concatenated in the row's order. The rebuilt
  ``image_grid_thw`` must equal the row's (else the row's image tokens and pixels would not pair: an error
  naming the file). ``tests/recipe/test_image_inputs.py`` checks the result byte for byte against the
  processor's output on the row's images, as verl computes it.
* Each worker process keeps a byte-bounded cache of the per-view pixel values (:class:`PixelCache`): an
  episode's full image, shared by its in-loop calls and the n rollouts of its prompt, is decoded and
  processed once per worker while it stays in the cache (and the reference, old-log-prob and update passes
  of a step reuse it).

The images are read on the worker's node: image files must be readable at the same path on every node
(the rule that already holds for the agent-loop workers; README, Multi-node).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from insight_o3.agents.views import pil_view
from insight_o3.base.json_types import JSONObject
from insight_o3.imaging.images import ImageRef, ImageStore, Resize

if TYPE_CHECKING:  # torch is imported where pixels are rebuilt: the rollout side (ImageViews) needs no torch
    import torch

#: the key of a row's ``multi_modal_inputs`` that holds its :class:`ImageViews` (popped before the model sees it)
VIEWS_KEY = "vsearch_image_views"
#: bytes of pixel values one worker process keeps (``VSEARCH_PIXEL_CACHE_MB``; 0 disables the cache)
DEFAULT_CACHE_BYTES = 2 * 2**30
#: decoded originals one worker process keeps (crops of one image decode it once while it stays)
ORIGINALS_CACHED = 8


@dataclass(frozen=True)
class ImageViews:
    """Every image of one training row, in the row's order, as references: the file, the region of it and the
    size it was shown at (``refs``), and how the session rendered them (``resize``, ``alpha``)."""

    refs: tuple[ImageRef, ...]
    resize: Resize
    alpha: str


class PixelCache:
    """Per-process cache of one view's ``(pixel_values, image_grid_thw)``, bounded in bytes (LRU)."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._stores: dict[str, ImageStore] = {}
        #: views served from the cache / processed again, and the seconds spent rebuilding micro-batches' pixels
        self.stats: dict[str, float] = {"hits": 0, "misses": 0, "rebuild_s": 0.0}
        self._reported = dict(self.stats)

    def add_rebuild_time(self, seconds: float) -> None:
        with self._lock:
            self.stats["rebuild_s"] += seconds

    def step_metrics(self) -> dict[str, float]:
        """What this process rebuilt since the last call (one call per training step, in the actor worker's
        ``update_actor``: the reference pass and the update of the step): ``vsearch/pixel_cache_hits`` /
        ``_misses`` (views) and ``vsearch/pixel_rebuild_s`` (wall seconds in :func:`rebuild`, before the forward
        that waited for it)."""
        with self._lock:
            now = dict(self.stats)
            delta = {k: now[k] - self._reported[k] for k in now}
            self._reported = now
        return {
            "vsearch/pixel_cache_hits": float(delta["hits"]),
            "vsearch/pixel_cache_misses": float(delta["misses"]),
            "vsearch/pixel_rebuild_s": float(delta["rebuild_s"]),
        }

    def store(self, alpha: str) -> ImageStore:
        with self._lock:
            if alpha not in self._stores:
                self._stores[alpha] = ImageStore(max_cached_bytes=0, originals_cached=ORIGINALS_CACHED, alpha=alpha)
            return self._stores[alpha]

    def view(self, processor: Any, ref: ImageRef, resize: Resize, alpha: str) -> tuple[torch.Tensor, torch.Tensor]:
        key = (id(processor), ref, resize, alpha)
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                self.stats["hits"] += 1
                return hit
            self.stats["misses"] += 1
        image = pil_view(self.store(alpha), resize, ref)
        out = processor.image_processor(images=[image], return_tensors="pt")
        item = (out["pixel_values"], out["image_grid_thw"])
        nbytes = item[0].numel() * item[0].element_size()
        with self._lock:
            if nbytes <= self.max_bytes and key not in self._items:
                self._items[key] = item
                self._bytes += nbytes
                while self._bytes > self.max_bytes:
                    _, (old, _) = self._items.popitem(last=False)
                    self._bytes -= old.numel() * old.element_size()
        return item


_CACHE: PixelCache | None = None
_CACHE_LOCK = threading.Lock()


def pixel_cache() -> PixelCache:
    """This process's :class:`PixelCache` (``VSEARCH_PIXEL_CACHE_MB`` sets its size)."""
    global _CACHE
    with _CACHE_LOCK:
        if _CACHE is None:
            mb = os.environ.get("VSEARCH_PIXEL_CACHE_MB")
            _CACHE = PixelCache(int(float(mb) * 2**20) if mb else DEFAULT_CACHE_BYTES)
        return _CACHE


def with_references(grid: torch.Tensor, views: ImageViews) -> JSONObject:
    """A training row's ``multi_modal_inputs`` without pixel values: the grids and the references."""
    if len(views.refs) != int(grid.shape[0]):
        raise ValueError(f"{len(views.refs)} image references for {int(grid.shape[0])} images")
    return {"image_grid_thw": grid, VIEWS_KEY: views}


def rebuild(processor: Any, inputs: JSONObject, cache: PixelCache | None = None) -> JSONObject:
    """``inputs`` (a row's ``multi_modal_inputs``) with its ``pixel_values`` rebuilt from its references
    (unchanged if it has none). Raises ValueError when a rebuilt grid differs from the row's."""
    import torch

    views = inputs.get(VIEWS_KEY) if isinstance(inputs, dict) else None
    if views is None:
        return inputs
    cache = cache or pixel_cache()
    parts = [cache.view(processor, ref, views.resize, views.alpha) for ref in views.refs]
    grid = torch.cat([g for _, g in parts]) if parts else torch.zeros((0, 3), dtype=torch.long)
    want = inputs["image_grid_thw"]
    if not torch.equal(grid.to(want.dtype), want):
        paths = sorted({r.path for r in views.refs})
        raise ValueError(
            f"rebuilt image grids {grid.tolist()} != the row's {want.tolist()} for {paths}: the worker's image "
            "processor (or the image files) differ from the agent-loop worker's"
        )
    out = {k: v for k, v in inputs.items() if k != VIEWS_KEY}
    out["pixel_values"] = torch.cat([p for p, _ in parts])
    return out


def rebuild_pixels_in(policy: Any, processor: Any) -> None:
    """Make ``policy`` (verl's ``DataParallelPPOActor``: the actor or the reference) rebuild the pixel values of
    every micro-batch it runs from the rows' references (:func:`rebuild`), just before verl's own forward.
    Idempotent."""
    if getattr(policy, "_vsearch_rebuilds_pixels", False):
        return
    forward = policy._forward_micro_batch

    def _forward_micro_batch(micro_batch: Any, temperature: float, calculate_entropy: bool = False) -> Any:
        rows = micro_batch.get("multi_modal_inputs") if hasattr(micro_batch, "get") else None
        if rows is not None and any(isinstance(r, dict) and VIEWS_KEY in r for r in rows):
            if processor is None:
                raise ValueError("rows carry image references but the worker has no processor")
            micro_batch = dict(micro_batch)
            t0 = time.perf_counter()
            rebuilt = np.empty(len(rows), dtype=object)
            rebuilt[:] = [rebuild(processor, r) for r in rows]
            pixel_cache().add_rebuild_time(time.perf_counter() - t0)
            micro_batch["multi_modal_inputs"] = rebuilt
        return forward(micro_batch, temperature, calculate_entropy=calculate_entropy)

    policy._forward_micro_batch = _forward_micro_batch
    policy._vsearch_rebuilds_pixels = True
