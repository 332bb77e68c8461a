"""The settings of collage synthesis (Algorithm 1's parameters and the question template), apart from the engine.

Only the standard library: a command builds its flags from :class:`CollageConfig` (``--help`` included) without
loading numpy or Pillow, which :mod:`insight_o3.data.collage` (the planner and renderer) needs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..base.setting_kinds import Kind, kind_field

__all__ = ["CollageConfig", "DEFAULT_QUESTION_TEMPLATE"]

#: The question of a collage row: the source question, pointed at the target's tile.
DEFAULT_QUESTION_TEMPLATE = "Look at image #{tile_id} in the collage. {question}"


@dataclass(frozen=True)
class CollageConfig:
    """Every parameter of Algorithm 1 (names follow the paper; areas in pixels)."""

    grid: int = kind_field(Kind.RESULT, default=32)  # G: canvas, tiles and panels snap to multiples of G
    min_short_edge: int = kind_field(Kind.RESULT, default=224)  # M: target tile short edge after jitter
    canvas_area: tuple[float, float] = kind_field(Kind.RESULT, default=(6.0e6, 1.6e7))  # [A_min, A_max]
    canvas_aspect: tuple[float, float] = kind_field(Kind.RESULT, default=(0.5, 2.0))  # [a_min, a_max] (W/H)
    #: [lambda_min, lambda_max] (area scale of S*)
    target_scale: tuple[float, float] = kind_field(Kind.RESULT, default=(0.1, 4.0))
    target_aspect_jitter: float = kind_field(Kind.RESULT, default=0.1)  # tau_tgt (log-aspect jitter of the target)
    fill_aspect_jitter: float = kind_field(Kind.RESULT, default=0.25)  # tau_fill (log-aspect band around the panel)
    #: [lambda_fill_min, lambda_fill_max] (area scale)
    fill_scale: tuple[float, float] = kind_field(Kind.RESULT, default=(0.1, 4.0))
    panel_aspect: tuple[float, float] = kind_field(Kind.RESULT, default=(0.5, 2.0))  # [AR_min, AR_max]
    min_panel_side: int = kind_field(Kind.RESULT, default=128)  # minimal panel size (rounded up to G)
    max_panel_area: float = kind_field(Kind.RESULT, default=1.0e6)  # panels larger than this are split further
    max_effective_area: float = kind_field(Kind.RESULT, default=1.0e6)  # S_eff: max effective source area
    bbox_cap: float = kind_field(Kind.RESULT, default=2e-4)  # rho_cap: area(bbox on canvas) / area(canvas)
    placement_retries: int = kind_field(Kind.RESULT, default=8)  # R: shrink steps when the target does not fit
    shrink_factor: float = kind_field(Kind.RESULT, default=0.9)  # linear shrink per placement retry
    max_attempts: int = kind_field(Kind.RESULT, default=20)  # T: rejection-loop attempts
    canvas_enlarge: float = kind_field(Kind.RESULT, default=1.5)  # area factor of the single enlarge-canvas fallback
    extra_pass_jitter_mult: float = kind_field(Kind.RESULT, default=2.0)  # aspect band widening of the extra fill pass
    usage_power: float = kind_field(Kind.RESULT, default=1.0)  # fill weight (1 + uses)^-usage_power
    #: where panel cuts fall (fraction of the side)
    split_range: tuple[float, float] = kind_field(Kind.RESULT, default=(0.3, 0.7))

    def validate(self) -> None:
        def rng(name: str, lo: float, hi: float, positive: bool = True) -> None:
            if not (lo <= hi) or (positive and lo <= 0):
                raise ValueError(f"{name} must be an increasing positive range, got [{lo}, {hi}]")

        if self.grid < 1:
            raise ValueError("grid must be >= 1")
        rng("canvas_area", *self.canvas_area)
        rng("canvas_aspect", *self.canvas_aspect)
        rng("target_scale", *self.target_scale)
        rng("fill_scale", *self.fill_scale)
        rng("panel_aspect", *self.panel_aspect)
        rng("split_range", *self.split_range)
        if not 0 < self.bbox_cap <= 1:
            raise ValueError("bbox_cap must be in (0, 1]")
        if not 0 < self.shrink_factor < 1:
            raise ValueError("shrink_factor must be in (0, 1)")
        if self.canvas_enlarge < 1:
            raise ValueError("canvas_enlarge must be >= 1")
        if self.max_attempts < 1 or self.placement_retries < 0:
            raise ValueError("max_attempts must be >= 1 and placement_retries >= 0")

    @property
    def panel_side(self) -> int:
        g = self.grid
        return max(g, math.ceil(self.min_panel_side / g) * g)
