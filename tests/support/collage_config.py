"""A collage generator configuration with smaller canvases than the defaults (the tests stay fast; the
constraints are the same), as a :class:`CollageConfig` and as ``generate_collages`` flags."""

from __future__ import annotations

from insight_o3.data.collage_config import CollageConfig

CFG = CollageConfig(
    canvas_area=(1.5e6, 3.0e6), min_short_edge=160, max_panel_area=4.0e5, min_panel_side=96, bbox_cap=2e-3
)
CFG_FLAGS = [
    "--canvas_area",
    "1.5e6",
    "3.0e6",
    "--min_short_edge",
    "160",
    "--max_panel_area",
    "4e5",
    "--min_panel_side",
    "96",
    "--bbox_cap",
    "2e-3",
]
