"""Target-and-fill collage synthesis (the paper's Appendix C.1, Algorithm 1).

Planning (:func:`plan_collage`) is a pure function of the pool arrays, the target index, the config,
a seeded ``numpy.random.Generator`` and a usage counter; rendering (:func:`render_collage`) turns a
plan into pixels. Steps, as in Algorithm 1:

0. target meta: ``S* = min(W_src*H_src, S_eff)`` (the source area, capped at the max effective
   area), ``rho_src`` = bbox area / image area, ``r_src = W_src/H_src``.
1. canvas: ``A ~ U[A_min, A_max]``, aspect ``a`` log-uniform in ``[a_min, a_max]``, ``W = sqrt(A a)``,
   ``H = sqrt(A / a)`` snapped to the grid ``G``.
2. feasible target-scale interval ``I_lambda`` (``lambda`` scales the *area* ``S*``): bounds
   ``[lambda_min, lambda_max]``; occupancy ``lambda S* <= A``; bbox cap ``rho_src lambda S* / A <=
   rho_cap``; target aspect ``r* = r_src * exp(U[-tau_tgt, tau_tgt])`` and the lower bound raised so
   that the tile's short edge is ``>= M``. Empty: enlarge the canvas once (area times
   ``canvas_enlarge``), else reject.
3. ``lambda`` = midpoint of ``I_lambda``; ``w* = sqrt(lambda S* r*)``, ``h* = sqrt(lambda S* / r*)``
   snapped to ``G`` (the snap that keeps every constraint and is closest in area).
4. best-fit placement on the free list at a random grid-aligned position that leaves either no gap
   or a gap of at least the minimum panel side to each edge; no fit: shrink ``(w*, h*)`` by
   ``shrink_factor`` up to ``R`` times while the constraints hold, then enlarge the canvas once and
   re-plan, else reject.
5. the free space (a guillotine split around the target) is split recursively at grid-aligned
   cuts until every panel has aspect in ``[AR_min, AR_max]`` and area ``<= max_panel_area``; a
   piece thinner than the minimum panel side cannot be a panel.
6. panels are filled largest-first: candidates have aspect within ``+-tau_fill`` (log) of the
   panel's and a fill scale (panel area / effective area of the centre crop) within
   ``[lambda_fill_min, lambda_fill_max]``; among them an item is drawn with weight
   ``(1 + uses)^-usage_power`` (less-used images preferred), centre-cropped to the panel aspect and
   resized to the panel. Items sharing the target's (or another tile's) image file are excluded.
7. panels still empty get one extra pass with the aspect band widened by ``extra_pass_jitter_mult``;
   if any stays empty the attempt is rejected (restart at step 1), up to ``T`` attempts.
8. tiles get visible IDs (a random permutation of ``1..n``) drawn in a tile corner that does not
   touch the target bbox.

The target tile is the *whole* target image resized to ``(w*, h*)`` (the light aspect jitter is a
slight anisotropic stretch), so its bbox maps exactly onto the canvas.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from ..imaging.images import open_image
from .collage_config import CollageConfig
from .source_pool import SourceItem


# ----------------------------------------------------------------------------- data
@dataclass
class PoolArrays:
    """Vectorised view of the pool for fast candidate filtering."""

    items: list[SourceItem]
    width: np.ndarray
    height: np.ndarray
    log_aspect: np.ndarray
    path_id: np.ndarray  # items sharing an image file share a path id

    @classmethod
    def build(cls, items: list[SourceItem]) -> PoolArrays:
        w = np.array([it.width for it in items], dtype=np.float64)
        h = np.array([it.height for it in items], dtype=np.float64)
        ids: dict[str, int] = {}
        pid = np.array([ids.setdefault(it.image, len(ids)) for it in items], dtype=np.int64)
        return cls(items, w, h, np.log(w / h), pid)

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class Tile:
    pool_index: int
    box: tuple[int, int, int, int]  # on the canvas
    crop: tuple[int, int, int, int]  # in the source image
    is_target: bool
    tile_id: int = 0
    label_box: tuple[int, int, int, int] = (0, 0, 0, 0)

    @property
    def scale(self) -> tuple[float, float]:
        return (
            (self.box[2] - self.box[0]) / (self.crop[2] - self.crop[0]),
            (self.box[3] - self.box[1]) / (self.crop[3] - self.crop[1]),
        )


@dataclass
class CollagePlan:
    width: int
    height: int
    tiles: list[Tile]
    target_bbox: tuple[float, float, float, float]
    attempts: int

    @property
    def target(self) -> Tile:
        return next(t for t in self.tiles if t.is_target)


@dataclass
class _Rejection:
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, why: str) -> None:
        self.reasons[why] = self.reasons.get(why, 0) + 1


class CollageInfeasible(Exception):
    """No collage after ``T`` attempts; ``reasons`` counts why attempts were rejected."""

    def __init__(self, reasons: dict[str, int]):
        super().__init__(f"no feasible collage: {reasons}")
        self.reasons = reasons


# ----------------------------------------------------------------------------- steps 1-3
def snap(x: float, g: int) -> int:
    return max(g, int(round(x / g)) * g)


def canvas_size(area: float, aspect: float, g: int) -> tuple[int, int]:
    return snap(math.sqrt(area * aspect), g), snap(math.sqrt(area / aspect), g)


def sample_canvas(rng: np.random.Generator, cfg: CollageConfig) -> tuple[int, int]:
    """Step 1."""
    area = rng.uniform(*cfg.canvas_area)
    aspect = math.exp(rng.uniform(math.log(cfg.canvas_aspect[0]), math.log(cfg.canvas_aspect[1])))
    return canvas_size(area, aspect, cfg.grid)


def scale_interval(
    s_star: float, rho_src: float, r_star: float, canvas_area: float, cfg: CollageConfig
) -> tuple[float, float] | None:
    """Step 2: ``I_lambda`` or None when empty."""
    lo, hi = cfg.target_scale
    hi = min(hi, canvas_area / s_star, cfg.bbox_cap * canvas_area / (rho_src * s_star))
    lo = max(lo, cfg.min_short_edge**2 / (s_star * min(r_star, 1 / r_star)))
    return (lo, hi) if lo <= hi else None


def target_ok(w: int, h: int, s_star: float, rho_src: float, W: int, H: int, cfg: CollageConfig) -> bool:
    """All step-2 constraints for a concrete (snapped) tile size on a concrete canvas."""
    lam = w * h / s_star
    return (
        min(w, h) >= cfg.min_short_edge
        and w * h <= W * H
        and rho_src * w * h <= cfg.bbox_cap * W * H
        and cfg.target_scale[0] <= lam <= cfg.target_scale[1]
    )


def snap_target(
    w: float, h: float, s_star: float, rho_src: float, W: int, H: int, cfg: CollageConfig
) -> tuple[int, int] | None:
    """Step 3's grid snap: the feasible floor/ceil combination closest in area to ``w*h``."""
    g = cfg.grid
    best = None
    for sw in {max(g, math.floor(w / g) * g), max(g, math.ceil(w / g) * g)}:
        for sh in {max(g, math.floor(h / g) * g), max(g, math.ceil(h / g) * g)}:
            if target_ok(sw, sh, s_star, rho_src, W, H, cfg):
                key = (abs(sw * sh - w * h), sw, sh)
                if best is None or key < best:
                    best = key
    return None if best is None else (best[1], best[2])


# ----------------------------------------------------------------------------- steps 4-5
Rect = tuple[int, int, int, int]  # x, y, w, h


def _positions(lo: int, span: int, size: int, g: int, gap: int) -> list[int]:
    """Grid-aligned offsets of a ``size`` segment inside ``[lo, lo+span)`` leaving 0 or >= gap on both sides."""
    out = []
    for off in range(0, span - size + 1, g):
        rest = span - size - off
        if (off == 0 or off >= gap) and (rest == 0 or rest >= gap):
            out.append(lo + off)
    return out


def place_best_fit(
    free: list[Rect], w: int, h: int, rng: np.random.Generator, cfg: CollageConfig
) -> tuple[int, Rect] | None:
    """Step 4: the free rectangle with least leftover area that fits, at a random valid position."""
    best = None
    for i, (fx, fy, fw, fh) in enumerate(free):
        if w > fw or h > fh:
            continue
        xs = _positions(fx, fw, w, cfg.grid, cfg.panel_side)
        ys = _positions(fy, fh, h, cfg.grid, cfg.panel_side)
        if xs and ys and (best is None or fw * fh - w * h < best[0]):
            best = (fw * fh - w * h, i, xs, ys)
    if best is None:
        return None
    _, i, xs, ys = best
    return i, (int(xs[rng.integers(len(xs))]), int(ys[rng.integers(len(ys))]), w, h)


def split_around(free_rect: Rect, placed: Rect, rng: np.random.Generator) -> list[Rect]:
    """Guillotine split of a free rectangle around a placed one (random orientation)."""
    fx, fy, fw, fh = free_rect
    x, y, w, h = placed
    if rng.random() < 0.5:  # horizontal bands first
        parts = [
            (fx, fy, fw, y - fy),
            (fx, y + h, fw, fy + fh - y - h),
            (fx, y, x - fx, h),
            (x + w, y, fx + fw - x - w, h),
        ]
    else:  # vertical bands first
        parts = [
            (fx, fy, x - fx, fh),
            (x + w, fy, fx + fw - x - w, fh),
            (x, fy, w, y - fy),
            (x, y + h, w, fy + fh - y - h),
        ]
    return [p for p in parts if p[2] > 0 and p[3] > 0]


def panelize(rect: Rect, rng: np.random.Generator, cfg: CollageConfig) -> tuple[list[Rect], list[Rect]]:
    """Step 5: split a free rectangle into panels; returns ``(panels, residual)``."""
    g, side = cfg.grid, cfg.panel_side
    x, y, w, h = rect
    if w < side or h < side:
        return [], [rect]
    ar = w / h
    ok_aspect = cfg.panel_aspect[0] <= ar <= cfg.panel_aspect[1]
    if ok_aspect and w * h <= cfg.max_panel_area:
        return [rect], []
    if ar > cfg.panel_aspect[1]:
        along_x = True
    elif ar < cfg.panel_aspect[0]:
        along_x = False
    else:
        along_x = w >= h
    length = w if along_x else h
    lo = max(side, math.ceil(cfg.split_range[0] * length / g) * g)
    hi = min(length - side, math.floor(cfg.split_range[1] * length / g) * g)
    if lo > hi:
        lo, hi = side, (length - side) // g * g
    if lo > hi:  # too small to split
        return ([rect], []) if ok_aspect else ([], [rect])
    cut = int(rng.integers(lo // g, hi // g + 1)) * g if lo % g == 0 else lo
    a, b = ((x, y, cut, h), (x + cut, y, w - cut, h)) if along_x else ((x, y, w, cut), (x, y + cut, w, h - cut))
    pa, ra = panelize(a, rng, cfg)
    pb, rb = panelize(b, rng, cfg)
    return pa + pb, ra + rb


# ----------------------------------------------------------------------------- step 6
def _center_crop(sw: float, sh: float, ar: float) -> tuple[int, int, int, int]:
    if sw / sh > ar:  # too wide: crop width
        cw, ch = max(1, round(sh * ar)), int(sh)
    else:
        cw, ch = int(sw), max(1, round(sw / ar))
    cx, cy = (int(sw) - cw) // 2, (int(sh) - ch) // 2
    return cx, cy, cx + cw, cy + ch


def fill_candidates(
    pool: PoolArrays, panel: Rect, tau: float, cfg: CollageConfig, excluded_paths: np.ndarray
) -> np.ndarray:
    """Indices of pool items that can fill ``panel`` (aspect band, bounded scaling, not excluded)."""
    _, _, pw, ph = panel
    log_ar = math.log(pw / ph)
    ar = pw / ph
    ok = np.abs(pool.log_aspect - log_ar) <= tau
    crop_area = np.where(pool.width / pool.height > ar, pool.height * pool.height * ar, pool.width * pool.width / ar)
    lam = (pw * ph) / np.minimum(crop_area, cfg.max_effective_area)
    ok &= (lam >= cfg.fill_scale[0]) & (lam <= cfg.fill_scale[1])
    ok &= ~excluded_paths[pool.path_id]
    return np.flatnonzero(ok)


def pick_fill(cands: np.ndarray, usage: np.ndarray, rng: np.random.Generator, cfg: CollageConfig) -> int:
    wts = (1.0 + usage[cands]) ** (-cfg.usage_power)
    return int(cands[rng.choice(len(cands), p=wts / wts.sum())])


# ----------------------------------------------------------------------------- labels
@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def label_geometry(tile_id: int, box: tuple[int, int, int, int]) -> tuple[int, int, int]:
    """``(font_size, label_w, label_h)`` of the ID label of a tile (font scales with the tile)."""
    short = min(box[2] - box[0], box[3] - box[1])
    size = int(min(72, max(14, short * 0.1)))
    l, t, r, b = _font(size).getbbox(f"#{tile_id}")
    pad = max(2, size // 5)
    return size, int(r - l) + 2 * pad, int(b - t) + 2 * pad


def label_box_for(
    tile: Tile, tile_id: int, avoid: tuple[float, float, float, float] | None
) -> tuple[int, int, int, int] | None:
    """Top-left corner by default; for the target, the first corner clear of the bbox (None: none)."""
    _, lw, lh = label_geometry(tile_id, tile.box)
    x1, y1, x2, y2 = tile.box
    lw, lh = min(lw, x2 - x1), min(lh, y2 - y1)
    corners = [(x1, y1), (x2 - lw, y1), (x1, y2 - lh), (x2 - lw, y2 - lh)]
    for cx, cy in corners:
        lb = (cx, cy, cx + lw, cy + lh)
        if avoid is None or (lb[2] <= avoid[0] or lb[0] >= avoid[2] or lb[3] <= avoid[1] or lb[1] >= avoid[3]):
            return lb
    return None


# ----------------------------------------------------------------------------- Algorithm 1
def _place_target(
    t: SourceItem, cfg: CollageConfig, rng: np.random.Generator, rej: _Rejection
) -> tuple[int, int, list[Rect], tuple[int, Rect]] | None:
    """Steps 1-4: a canvas and the target's rectangle on it (the canvas enlarged once if needed).
    Returns ``(W, H, free rects, (free index, (x, y, w, h)))`` or None."""
    src_area = t.width * t.height
    s_star = src_area * min(1.0, math.sqrt(cfg.max_effective_area / src_area)) ** 2
    rho_src, r_src = t.bbox_ratio, t.width / t.height
    W, H = sample_canvas(rng, cfg)  # step 1
    r_star = r_src * math.exp(rng.uniform(-cfg.target_aspect_jitter, cfg.target_aspect_jitter))
    for enlarge in (False, True):  # single enlarge fallback
        if enlarge:
            a = W / H
            W, H = canvas_size(W * H * cfg.canvas_enlarge, a, cfg.grid)
        interval = scale_interval(s_star, rho_src, r_star, W * H, cfg)  # step 2
        if interval is None:
            rej.add("empty scale interval")
            continue
        lam = 0.5 * (interval[0] + interval[1])  # step 3
        w = math.sqrt(lam * s_star * r_star)
        h = math.sqrt(lam * s_star / r_star)
        free: list[Rect] = [(0, 0, W, H)]
        for _ in range(cfg.placement_retries + 1):  # step 4
            size = snap_target(w, h, s_star, rho_src, W, H, cfg)
            if size is not None:
                fit = place_best_fit(free, size[0], size[1], rng, cfg)
                if fit is not None:
                    return W, H, free, fit
            w, h = w * cfg.shrink_factor, h * cfg.shrink_factor  # lambda = w*h/S* shrinks with it
        rej.add("target does not fit")
    return None


def _panels(
    free: list[Rect], placed: tuple[int, Rect], rng: np.random.Generator, cfg: CollageConfig
) -> list[Rect] | None:
    """Step 5: the free space around the target cut into panels (None when some of it cannot be)."""
    free_index, rect = placed
    free_rect = free.pop(free_index)
    free += split_around(free_rect, rect, rng)
    panels, residual = [], []
    for r in free:
        p, res = panelize(r, rng, cfg)
        panels += p
        residual += res
    return None if residual else panels


def _fill(
    pool: PoolArrays,
    target_index: int,
    panels: list[Rect],
    usage: np.ndarray,
    rng: np.random.Generator,
    cfg: CollageConfig,
) -> tuple[list[Tile], np.ndarray] | None:
    """Steps 6-7: a source image per panel, largest panel first, one extra pass with a looser aspect
    tolerance. Returns ``(fills, usage after them)`` or None when panels stay unfilled."""
    excluded = np.zeros(int(pool.path_id.max()) + 1, dtype=bool)
    excluded[pool.path_id[target_index]] = True
    order = sorted(panels, key=lambda p: (-p[2] * p[3], p[1], p[0]))  # step 6: largest first
    fills: list[Tile] = []
    local_usage = usage.copy()
    unfilled: list = []
    for tau in (cfg.fill_aspect_jitter, cfg.fill_aspect_jitter * cfg.extra_pass_jitter_mult):
        unfilled = []  # step 7: one extra pass
        for panel in order:
            cands = fill_candidates(pool, panel, tau, cfg, excluded)
            if len(cands) == 0:
                unfilled.append(panel)
                continue
            k = pick_fill(cands, local_usage, rng, cfg)
            px, py, pw, ph = panel
            it = pool.items[k]
            fills.append(Tile(k, (px, py, px + pw, py + ph), _center_crop(it.width, it.height, pw / ph), False))
            excluded[pool.path_id[k]] = True
            local_usage[k] += 1
        order = unfilled
        if not unfilled:
            break
    return None if unfilled else (fills, local_usage)


def _labelled(
    tiles: list[Tile], bbox: tuple[float, float, float, float], rng: np.random.Generator
) -> list[Tile] | None:
    """Step 8: shuffled IDs 1..n and a label box per tile (None when the target's label has no room)."""
    ids = rng.permutation(len(tiles)) + 1
    labelled = []
    for tile, tid in zip(tiles, ids):
        lb = label_box_for(tile, int(tid), bbox if tile.is_target else None)
        if lb is None:
            return None
        labelled.append(Tile(tile.pool_index, tile.box, tile.crop, tile.is_target, int(tid), lb))
    return labelled


def plan_collage(
    pool: PoolArrays, target_index: int, cfg: CollageConfig, rng: np.random.Generator, usage: np.ndarray
) -> CollagePlan:
    """Algorithm 1 for one target. ``usage`` (uses per pool item) is read for the fill weights and
    updated only when a collage is returned. Raises :class:`CollageInfeasible` after ``T`` attempts."""
    t = pool.items[target_index]
    rej = _Rejection()
    for attempt in range(1, cfg.max_attempts + 1):
        canvas = _place_target(t, cfg, rng, rej)
        if canvas is None:
            continue
        W, H, free, placed = canvas
        panels = _panels(free, placed, rng, cfg)
        if panels is None:
            rej.add("free space cannot be panelized")
            continue
        filled = _fill(pool, target_index, panels, usage, rng, cfg)
        if filled is None:
            rej.add("panels left unfilled")
            continue
        fills, local_usage = filled
        x, y, tw, th = placed[1]
        target_tile = Tile(target_index, (x, y, x + tw, y + th), (0, 0, t.width, t.height), True)  # step 8
        sx, sy = target_tile.scale
        bx1, by1, bx2, by2 = t.bbox
        bbox = (x + bx1 * sx, y + by1 * sy, x + bx2 * sx, y + by2 * sy)
        labelled = _labelled([target_tile] + fills, bbox, rng)
        if labelled is None:
            rej.add("no room for the target's ID label")
            continue
        usage[:] = local_usage
        usage[target_index] += 1
        return CollagePlan(W, H, labelled, bbox, attempt)
    raise CollageInfeasible(rej.reasons)


# ----------------------------------------------------------------------------- rendering
def render_collage(
    plan: CollagePlan,
    pool: PoolArrays,
    resample: Image.Resampling = Image.Resampling.BICUBIC,
    label_fg: tuple[int, int, int] = (255, 255, 255),
    label_bg: tuple[int, int, int] = (0, 0, 0),
) -> Image.Image:
    """Paste every tile (crop, resize) and draw its ID label."""
    canvas = Image.new("RGB", (plan.width, plan.height), (127, 127, 127))
    for tile in plan.tiles:
        src = open_image(pool.items[tile.pool_index].image)
        if tile.crop != (0, 0, src.width, src.height):
            src = src.crop(tile.crop)
        size = (tile.box[2] - tile.box[0], tile.box[3] - tile.box[1])
        canvas.paste(src.resize(size, resample), tile.box[:2])
    draw = ImageDraw.Draw(canvas)
    for tile in plan.tiles:
        font_size, _, _ = label_geometry(tile.tile_id, tile.box)
        lb = tile.label_box
        draw.rectangle((lb[0], lb[1], lb[2] - 1, lb[3] - 1), fill=label_bg)
        font = _font(font_size)
        l, t, _, _ = font.getbbox(f"#{tile.tile_id}")
        pad = max(2, font_size // 5)
        draw.text((lb[0] + pad - l, lb[1] + pad - t), f"#{tile.tile_id}", fill=label_fg, font=font)
    return canvas
