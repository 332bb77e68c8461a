"""Every command starts in a blink: ``python -m insight_o3.scripts.<X> --help`` loads none of the heavy libraries
(the openai SDK, scipy, statsmodels, pandas, matplotlib, Jinja, Pillow, numpy, pydantic: each command imports them
where it uses them) and uses at most :data:`LIMIT_CPU_S` of CPU time.

The module check is exact (``-X importtime`` lists every module the child imported); the CPU check measures the
child's user + system time (not wall time, which a loaded machine inflates) with a margin for a busy machine.
``scripts/bench_startup.py`` prints the figures per command."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.commands import console_scripts

pytestmark = pytest.mark.smoke

REPO = Path(__file__).resolve().parents[2]
#: The goal: CPU seconds of one command's ``--help`` (Python's own start-up included; about 0.05 s of it).
LIMIT_CPU_S = 0.3
#: How much a busy machine may inflate CPU time (shared caches, frequency): the test fails above this many times
#: the goal, so it fails on a heavy import (openai alone is about 1.2 s) and not on a neighbour's load.
MARGIN = 2.0
#: Top-level packages a ``--help`` must not import.
HEAVY = ("openai", "httpx", "scipy", "statsmodels", "pandas", "matplotlib", "jinja2", "PIL", "numpy", "pydantic")


def command_modules() -> list[str]:
    """The module of every console script of ``[project.scripts]``."""
    return sorted({target.split(":")[0] for target in console_scripts().values()})


def help_run(module: str) -> tuple[float, set[str]]:
    """(CPU s of the child, the top-level packages it imported) of ``python -X importtime -m MODULE --help``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", module, "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
        timeout=60,
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    imported = set()
    for line in done.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            imported.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    return cpu, imported


def test_the_commands_are_those_of_pyproject():
    modules = command_modules()
    assert "insight_o3.scripts.evaluate" in modules and "insight_o3.scripts.report" in modules
    assert all(m.startswith("insight_o3.scripts.") for m in modules)


@pytest.mark.parametrize("module", command_modules())
def test_help_imports_no_heavy_library_and_starts_fast(module):
    cpu, imported = help_run(module)
    assert "argparse" in imported  # the listing is read right
    assert sorted(imported & set(HEAVY)) == [], f"{module} --help imports heavy libraries"
    if cpu > LIMIT_CPU_S * MARGIN:  # one retry: a single slow run on a busy machine is not a regression
        cpu = min(cpu, help_run(module)[0])
    assert cpu <= LIMIT_CPU_S * MARGIN, f"{module} --help took {cpu:.2f} CPU s (goal {LIMIT_CPU_S})"
