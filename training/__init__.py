"""Trainers that sit on top of the library: they import their logic from :mod:`insight_o3` and run on an existing
training stack (the ``dpo`` extra). Run from the repository root (``python -m training.dpo.train``); not shipped in
the wheel, like the verl recipe."""

__all__ = ["dpo"]
