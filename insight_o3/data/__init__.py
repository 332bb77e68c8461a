"""Training-data pipelines of the paper's Appendix C: collages (C.1) and region localization (C.2).

Pure-Python / numpy / Pillow only (no torch). See :mod:`insight_o3.data.schema` for the row formats
both pipelines write.
"""

__all__ = [
    "collage",
    "collage_config",
    "collage_jobs",
    "describe",
    "difficulty",
    "layout",
    "region_localization",
    "release_benchmarks",
    "reliability",
    "schema",
    "search_benchmarks",
    "source_pool",
]
