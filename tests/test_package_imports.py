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
