"""What the wheel holds: every data file of the package is declared as package data, test helpers are not in
the package, and CI installs the built wheel outside the repository (scripts/check_wheel.sh)."""

from __future__ import annotations

import fnmatch
import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())

pytestmark = pytest.mark.smoke


def test_every_package_data_file_is_declared():
    patterns = PYPROJECT["tool"]["setuptools"]["package-data"]["insight_o3"]
    pkg = ROOT / "insight_o3"
    data = [
        p.relative_to(pkg).as_posix()
        for p in pkg.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    # the README's example scripts (scripts/examples/*.sh) ship too: a user of the wheel can copy them
    assert any(f.startswith("scripts/examples/") for f in data)
    missing = [f for f in data if not any(fnmatch.fnmatch(f, p) for p in patterns)]
    assert not missing, f"files the package uses but the wheel would lack: {missing}"


def test_test_helpers_live_in_tests_not_in_the_package():
    assert not (ROOT / "insight_o3" / "testing").exists()
    for name in ("tiny_qwen.py", "vllm_server.py", "assets/tiny_tokenizer_corpus.txt"):
        assert (ROOT / "tests" / "support" / name).is_file(), name
    # what a user command needs stays in the package under a user-facing name
    assert (ROOT / "insight_o3" / "demo" / "bench.py").is_file()
    assert (ROOT / "insight_o3" / "endpoints" / "scripted_server.py").is_file()


def test_ci_installs_the_wheel_and_runs_every_console_script_outside_the_repo():
    ci = (ROOT / ".ci" / "run").read_text()
    assert "bash scripts/check_wheel.sh" in ci
    check = (ROOT / "scripts" / "check_wheel.sh").read_text()
    assert "pip wheel" in check and 'cd "$WORK/outside"' in check
    assert 'ep.group == "console_scripts"' in check  # the list comes from the wheel, never goes stale
    assert "insight-o3-make-demo-bench" in check
    assert "insight-o3-make-demo-bench" in PYPROJECT["project"]["scripts"]
    assert "insight-o3-demo" in check and PYPROJECT["project"]["scripts"]["insight-o3-demo"].startswith(
        "insight_o3.scripts.demo:"
    )


def test_the_license_file_is_the_one_the_metadata_names():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["project"]["license"] == {"text": "Apache-2.0"}
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text  # the whole text, not a stub
