"""The suite never uses the user's cache: ``$XDG_CACHE_HOME`` is the session's own before any module fixture runs
(a module's demo run or sandbox is set up before the per-test one), and each test's own inside a test
(tests/conftest.py: ``private_session_cache``, ``private_user_cache``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


@pytest.fixture(scope="module")
def module_cache() -> str:
    return os.environ["XDG_CACHE_HOME"]


def test_module_and_test_fixtures_see_private_caches(module_cache, tmp_path_factory):
    base = tmp_path_factory.getbasetemp()
    assert Path(module_cache).is_relative_to(base) and "xdg-cache-session" in Path(module_cache).name
    here = os.environ["XDG_CACHE_HOME"]
    assert Path(here).is_relative_to(base) and here != module_cache
