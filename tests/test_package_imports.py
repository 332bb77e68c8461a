"""The library must import without the training stack (DEVELOPERS.md: no torch, verl or vllm)."""

import subprocess
import sys
from pathlib import Path

import pytest

CODE = """
import importlib, pkgutil, sys
import insight_o3
names = [m.name for m in pkgutil.walk_packages(insight_o3.__path__, "insight_o3.")]
for name in names:
    importlib.import_module(name)
heavy = sorted(k for k in ("torch", "verl", "vllm", "transformers", "ray", "torchvision") if k in sys.modules)
print(len(names), ",".join(heavy))
"""


@pytest.mark.smoke
def test_every_library_module_imports_without_the_training_stack():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True).stdout.split()
    assert int(out[0]) >= 40  # every module of the package was imported
    assert out[1:] == [], f"importing insight_o3 pulled in {out[1:]}"


LOADED = """
import importlib, sys
for name in sys.argv[1:-1]:
    importlib.import_module(name)
print(",".join(k for k in sys.argv[-1].split(",") if k in sys.modules))
"""


def loaded(modules: list[str], heavy: list[str]) -> str:
    """Which of ``heavy`` a fresh interpreter has loaded after importing ``modules``."""
    argv = [sys.executable, "-c", LOADED, *modules, ",".join(heavy)]
    return subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.smoke
def test_a_module_loads_only_what_it_uses():
    """``build_o3_bench``'s review page loads one module of ``insight_o3.viz``, not the package's others (pandas and
    matplotlib, ~0.6 CPU s: the package's names load their modules when asked for). ``report``, ``compare``,
    ``export`` and the demo read run cards and draw reports: they load scipy.stats and statsmodels (~0.7 CPU s) only
    when judges are compared (:mod:`insight_o3.analysis.kappa`), and never the OpenAI client (~0.3 CPU s; the card's
    default judge flow is in :mod:`insight_o3.evaluation.judge_settings`)."""
    assert loaded(["insight_o3.viz.review_page"], ["pandas", "matplotlib", "insight_o3.viz.report"]) == ""
    report = ["insight_o3.viz.report", "insight_o3.evaluation.run_card", "insight_o3.analysis.agreement"]
    assert loaded(report, ["scipy.stats", "statsmodels", "openai"]) == ""


def test_the_viz_package_names_load_their_modules():
    import insight_o3.viz as viz
    from insight_o3.viz import run_view

    assert viz.load_run is run_view.load_run and all(hasattr(viz, name) for name in viz.__all__)
    assert set(viz.__all__) == set(viz._LAZY) and set(viz.__all__) <= set(dir(viz))
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        _ = viz.nope  # type: ignore[attr-defined]


def test_type_checkers_see_the_viz_names_where_they_load_from():
    """The ``if TYPE_CHECKING:`` imports of ``insight_o3.viz`` (what mypy and editors read) are exactly ``_LAZY``."""
    import ast

    import insight_o3.viz as viz

    tree = ast.parse(Path(viz.__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", "") == "TYPE_CHECKING")
    seen = {a.name: (imp.module or "") for imp in block.body if isinstance(imp, ast.ImportFrom) for a in imp.names}
    assert seen == viz._LAZY
