"""The library must import without the training stack (DEVELOPERS.md: no torch, verl or vllm)."""

import subprocess
import sys

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


READ_ONLY_CODE = """
import sys
import insight_o3.viz.report, insight_o3.evaluation.run_card, insight_o3.analysis.agreement
print(",".join(sorted(k for k in ("scipy.stats", "statsmodels", "openai") if k in sys.modules)))
"""


@pytest.mark.smoke
def test_reading_and_reporting_a_run_loads_no_statistics_or_http_client():
    """``report``, ``compare``, ``export`` and the demo read run cards and draw reports: they load scipy.stats and
    statsmodels (~0.7 CPU s) only when judges are compared (:mod:`insight_o3.analysis.kappa`), and never the OpenAI
    client (~0.3 CPU s; the card's default judge flow is in :mod:`insight_o3.evaluation.judge_settings`)."""
    out = subprocess.run([sys.executable, "-c", READ_ONLY_CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"importing the report's modules pulled in {out.stdout.strip()}"
