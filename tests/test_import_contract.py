"""The import contract of scripts/lint.sh (``[tool.importlinter]`` in pyproject.toml, docs/architecture.md):
kept by the tree, and broken — so lint fails — by an upward import or a cycle planted in a copy of it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = [
    pytest.mark.smoke,
    pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter not installed (dev extra)"),
]


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{root / 'verl'}"}
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(ROOT / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _copy(tmp_path: Path) -> Path:
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "config", "*.md", "*.sh", "*.txt", "*.j2")
    shutil.copytree(ROOT / "insight_o3", tmp_path / "insight_o3", ignore=ignore)
    shutil.copytree(ROOT / "verl" / "recipe", tmp_path / "verl" / "recipe", ignore=ignore)
    shutil.copytree(ROOT / "training", tmp_path / "training", ignore=ignore)
    return tmp_path


def _plant(root: Path, module: str, line: str) -> None:
    path = root / (module.replace(".", "/") + ".py")
    path.write_text(path.read_text() + f"\n{line}\n")


def test_the_tree_keeps_the_contract():
    r = _lint(ROOT)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "0 broken" in r.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "insight_o3.imaging.geometry", "from insight_o3.evaluation import metrics  # noqa")
    r = _lint(root)
    assert r.returncode != 0
    assert "insight_o3 layers: each imports only those below it BROKEN" in r.stdout
    assert "insight_o3.imaging.geometry -> insight_o3.evaluation.metrics" in r.stdout


def test_a_cycle_between_siblings_breaks_the_contract(tmp_path):
    root = _copy(tmp_path)  # client and guard share the endpoints package, so only the cycle check catches this
    _plant(root, "insight_o3.endpoints.client", "from insight_o3.endpoints import guard as run_guard  # noqa")
    _plant(root, "insight_o3.endpoints.guard", "from insight_o3.endpoints import client as api  # noqa")
    r = _lint(root)
    assert r.returncode != 0
    assert "no import cycles between sibling modules or packages BROKEN" in r.stdout


def test_the_library_may_not_import_the_training_stack(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "insight_o3.protocol.rewards", "import torch  # noqa")
    r = _lint(root)
    assert r.returncode != 0
    assert "insight_o3 is not allowed to import torch" in r.stdout


def _contract_layers() -> list[str]:
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["id"] == "layers"]
    return [name.strip() for layer in layers for name in layer.replace("|", ":").split(":")]


def test_the_folders_are_the_layers():
    """`ls insight_o3/` shows the layers: every entry of the package root is a package and a layer of the contract,
    every layer is an entry, and docs/architecture.md's table names each one."""
    entries = {p.stem for p in (ROOT / "insight_o3").iterdir() if p.suffix == ".py" and p.stem != "__init__"}
    entries |= {p.name for p in (ROOT / "insight_o3").iterdir() if (p / "__init__.py").is_file()}
    layers = _contract_layers()
    assert sorted(entries) == sorted(layers)
    modules = [name for name in layers if (ROOT / "insight_o3" / f"{name}.py").is_file()]
    assert modules == [], "no module sits at the package root; everything is a package"
    table = (ROOT / "docs" / "architecture.md").read_text().split("```")[1]
    for name in layers:
        assert (f"{name}/" in table) or (f"{name}.py" in table), f"docs/architecture.md's layer table lacks {name}"


def test_the_library_may_not_import_the_trainer(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "insight_o3.jobs.integrity", "from training.dpo import settings  # noqa")
    r = _lint(root)
    assert r.returncode != 0
    assert "the library needs no training stack, and no recipe or test code BROKEN" in r.stdout


def test_the_trainer_may_not_import_the_commands(tmp_path):
    root = _copy(tmp_path)
    _plant(root, "training.dpo.pairs", "from insight_o3.scripts import evaluate  # noqa")
    r = _lint(root)
    assert r.returncode != 0
    assert "the trainers import the library's modules, not its commands, viewers or test" in r.stdout
    assert "BROKEN" in r.stdout
