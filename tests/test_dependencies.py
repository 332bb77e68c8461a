"""Installs that keep working: every third-party package the library imports is declared with a major
bound, the CPU test environments are locked (no CUDA build anywhere), the locks cover the claimed
openai majors, and the installed environment matches its lock."""

from __future__ import annotations

import ast
import json
import re
import sys
from importlib import metadata
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: import name -> distribution name, where they differ
DIST_OF = {
    "PIL": "pillow",
    "yaml": "pyyaml",
    "hydra": "hydra-core",
    "json_repair": "json-repair",
    "huggingface_hub": "huggingface-hub",
}
#: imported by the library only inside optional helpers that say what to install
OPTIONAL = {"torch", "transformers", "tokenizers", "qwen_vl_utils", "vllm", "verl", "paddleocr", "cv2", "pytesseract"}
#: the optional imports of the tools extra (pyproject's ``tools``): import name -> distribution
TOOLS_EXTRA = {"cv2": "opencv-contrib-python-headless", "pytesseract": "pytesseract"}


def _name(req: str) -> str:
    return re.split(r"[<>=!~\[; ]", req, maxsplit=1)[0].strip().lower()


def _lock(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints" / f"{name}.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            dist, _, version = line.partition("==")
            assert version, f"constraints/{name}.txt: {line!r} is not an exact pin"
            pins[dist.strip().lower().replace("_", "-")] = version.strip()
    return pins


def _third_party(sources: list[tuple[str, str]]) -> set[str]:
    """The top-level third-party modules that ``(code, file name)`` pairs import."""
    names = set()
    for code, where in sources:
        for node in ast.walk(ast.parse(code, where)):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "insight_o3"}


def _third_party_imports(package: Path) -> set[str]:
    return _third_party([(py.read_text(), str(py)) for py in package.rglob("*.py")])


@pytest.mark.smoke
def test_every_import_is_declared_with_a_major_bound():
    deps = {_name(d): d for d in PYPROJECT["project"]["dependencies"]}
    imported = _third_party_imports(ROOT / "insight_o3") - OPTIONAL
    undeclared = {n for n in imported if DIST_OF.get(n, n).lower() not in deps}
    assert not undeclared, f"insight_o3 imports undeclared packages: {sorted(undeclared)}"
    assert "httpx" not in imported and "httpx2" not in imported  # the SDK's own client factory is used
    for group, reqs in [
        ("runtime", PYPROJECT["project"]["dependencies"]),
        *PYPROJECT["project"]["optional-dependencies"].items(),
    ]:
        for r in reqs:
            assert "==" in r or "<" in r, f"{group}: {r!r} has no upper bound"


@pytest.mark.smoke
def test_locks_pin_the_cpu_stack_and_the_claimed_openai_majors():
    light, cpu = _lock("light"), _lock("cpu")
    for name, pins in (("light", light), ("cpu", cpu)):
        cuda = [d for d in pins if d.startswith("nvidia-") or d == "triton"]
        assert not cuda, f"constraints/{name}.txt pins CUDA packages: {cuda}"
        for dep in PYPROJECT["project"]["dependencies"] + PYPROJECT["project"]["optional-dependencies"]["dev"]:
            assert _name(dep) in pins, f"constraints/{name}.txt does not pin {_name(dep)}"
    assert "torch" not in light
    assert cpu["torch"].startswith("2.13.0")
    for dep in PYPROJECT["project"]["optional-dependencies"]["verl-cpu"]:
        assert _name(dep) in cpu, f"constraints/cpu.txt does not pin {_name(dep)}"
    # the openai bound claims 2.x and 3.x: the full environment tests the training stack's 2.x,
    # the light one what a fresh install resolves
    assert any(_name(d) == "openai" and "<4" in d for d in PYPROJECT["project"]["dependencies"])
    assert cpu["openai"].split(".")[0] == "2" and light["openai"].split(".")[0] == "3"
    train = {_name(d): d for d in PYPROJECT["project"]["optional-dependencies"]["train"]}
    assert train["openai"] == f"openai=={cpu['openai']}"  # the CPU tests run the training stack's openai


@pytest.mark.smoke
def test_setup_installs_from_the_locks():
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert '-c "$ROOT/constraints/light.txt" -e "$ROOT[dev]"' in setup
    assert '-c "$ROOT/constraints/cpu.txt" -e "$ROOT[dev,verl-cpu,tools,dpo]"' in setup
    ci = (ROOT / ".ci" / "run").read_text()
    assert "--light" in ci and "-m smoke" in ci


@pytest.mark.smoke
def test_installed_environment_matches_its_lock():
    """A venv made by scripts/setup.sh (it leaves ``.insight_o3_lock`` naming its lock) holds exactly
    the locked versions; other environments (a plain ``pip install -e .``) are not checked."""
    marker = Path(sys.prefix) / ".insight_o3_lock"
    if not marker.is_file():
        pytest.skip(f"{sys.prefix} was not made by scripts/setup.sh")
    name = marker.read_text().strip()
    wrong = {}
    for dist, version in _lock(name).items():
        got = _installed(dist)
        if got is None or got.split("+")[0] != version.split("+")[0]:
            wrong[dist] = (version, got)
    assert not wrong, f"installed versions differ from constraints/{name}.txt: {wrong}; rerun scripts/setup.sh"


def _installed(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


#: the documents that give the notebooks' command, and the distribution of each ``jupyter <subcommand>``
NOTEBOOK_DOCS = ("README.md", "docs/report.md")
JUPYTER_SUBCOMMANDS = {"execute": "nbclient", "nbconvert": "nbconvert", "notebook": "notebook", "lab": "jupyterlab"}


def _jupyter_commands() -> set[str]:
    return {m for doc in NOTEBOOK_DOCS for m in re.findall(r"\bjupyter[ -]([a-z][\w-]*)", (ROOT / doc).read_text())}


def _notebook_imports() -> set[str]:
    cells = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text())["cells"]:
            if cell["cell_type"] == "code":
                lines = "".join(cell["source"]).splitlines()
                code = "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))  # magics
                cells.append((code, str(nb)))
    return _third_party(cells)


@pytest.mark.smoke
def test_the_notebooks_documented_command_and_imports_are_declared_and_locked():
    """The light install runs the notebooks as documented (it needs nbconvert, not only nbclient):
    every ``jupyter <subcommand>`` the docs give and every package the notebooks import is declared (runtime or
    the dev extra), pinned in both locks and installed here."""
    declared = {_name(d) for d in PYPROJECT["project"]["dependencies"]}
    declared |= {_name(d) for d in PYPROJECT["project"]["optional-dependencies"]["dev"]}
    light, cpu = _lock("light"), _lock("cpu")
    commands = _jupyter_commands()
    assert "nbconvert" in commands, f"{NOTEBOOK_DOCS}: the notebooks' command (jupyter nbconvert) is not documented"
    needed = {}
    for sub in sorted(commands):
        assert sub in JUPYTER_SUBCOMMANDS, f"documented `jupyter {sub}`: add its distribution to JUPYTER_SUBCOMMANDS"
        needed[f"jupyter {sub}"] = JUPYTER_SUBCOMMANDS[sub]
        scripts = metadata.entry_points(group="console_scripts", name=f"jupyter-{sub}")
        assert scripts, f"documented `jupyter {sub}` is not installed in {sys.prefix} (rerun scripts/setup.sh)"
    dists = metadata.packages_distributions()
    for module in sorted(_notebook_imports()):
        assert module in dists, f"the notebooks import {module}, which is not installed in {sys.prefix}"
        needed[f"import {module}"] = dists[module][0].lower()
    for why, dist in needed.items():
        dist = dist.replace("_", "-")
        assert dist in declared, f"{why}: {dist} is not declared in pyproject.toml (dependencies or the dev extra)"
        assert dist in light and dist in cpu, f"{why}: {dist} is not pinned in constraints/light.txt and cpu.txt"


def test_the_tools_extra_declares_and_locks_its_imports():
    """cv2 and pytesseract are imported only when a tool runs; the ``tools`` extra declares them with a major
    bound and the full CPU lock pins them (so CI runs the tools' tests with exactly them)."""
    extra = {_name(r): r for r in PYPROJECT["project"]["optional-dependencies"]["tools"]}
    pins = _lock("cpu")
    for dist in TOOLS_EXTRA.values():
        assert dist in extra and "<" in extra[dist], extra
        assert dist in pins, f"constraints/cpu.txt does not pin {dist}"


def test_the_dpo_extra_declares_and_locks_what_the_trainer_imports():
    """training/ (the DPO trainer) imports only the library, the standard library and what the ``dpo`` extra and
    the training stacks (``verl-cpu`` on CPU, ``train`` on GPU) declare; the CPU lock pins the ``dpo`` extra exactly."""
    extra = {_name(r): r for r in PYPROJECT["project"]["optional-dependencies"]["dpo"]}
    pins = _lock("cpu")
    for dist, req in extra.items():
        assert "==" in req and req == f"{dist}=={pins[dist]}", (req, pins.get(dist))
    stacks = {
        _name(r) for group in ("dpo", "verl-cpu", "train") for r in PYPROJECT["project"]["optional-dependencies"][group]
    }
    imported = _third_party_imports(ROOT / "training") - {"training", "recipe"}
    undeclared = {n for n in imported if DIST_OF.get(n, n).lower() not in stacks}
    assert not undeclared, f"training/ imports packages no extra declares: {sorted(undeclared)}"
