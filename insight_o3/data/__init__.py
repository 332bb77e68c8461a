"""Training-data pipelines of the paper's Appendix C: collages (C.1) and region localization (C.2).

Pure-Python / numpy / Pillow only (no torch). See :mod:`insight_o3.data.schema` for the row formats
both pipelines write.
"""
