"""Freezing of Qwen2.5-VL's vision tower and projector (D.1: both stay frozen during training).

In verl 0.7 the FSDP actor freezes ``get_vl_model_vision_tower(model)`` when
``actor_rollout_ref.actor.freeze_vision_tower=True`` (the recipe config sets it). For Qwen2.5-VL
that module is ``model.visual``, and the projector (the patch merger, ``visual.merger``) is a
submodule of it, so one switch freezes both. :func:`freeze_vision` applies the same rule through the
same verl helper and checks the projector really is covered, so the CPU test exercises the code path
the GPU run relies on, and a transformers layout change that moved the merger out would fail loudly.
"""
from __future__ import annotations

import torch
from verl.workers.fsdp_workers import get_vl_model_vision_tower

PROJECTOR_NAMES = ("merger",)


def freeze_vision(model: torch.nn.Module) -> list[str]:
    """Set ``requires_grad=False`` on the vision tower and projector; return the frozen names."""
    tower = get_vl_model_vision_tower(model)
    if tower is None:
        raise ValueError(f"{type(model).__name__} has no vision tower to freeze")
    if not any(hasattr(tower, n) for n in PROJECTOR_NAMES):
        raise ValueError("the vision projector is not inside the vision tower; freeze it explicitly")
    tower.requires_grad_(False)
    ids = {id(p) for p in tower.parameters()}
    return [n for n, p in model.named_parameters() if id(p) in ids]
