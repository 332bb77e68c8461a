"""How ``bash scripts/test.sh`` spreads the suite over pytest-xdist workers (``-n N --dist loadfile``).

A test module is the unit of work: its tests run on one worker, in order, so a module-scoped fixture (a demo run,
a started server) is built once, as in a serial run. The modules of a group in :data:`GROUPS` must not run beside
each other (a Ray cluster, vLLM-CPU servers, training runs: both cores and GBs each while they start): one worker
runs a group's modules one after another. The groups start first, the longest first (the order of :data:`GROUPS`),
so the run does not wait for the heavy chain at its end; the other modules follow in collection order on whichever
worker is free.

A test marked ``timing`` asserts a wall-clock bound that holds on a quiet machine only; ``scripts/test.sh`` holds
these out of the workers (``--timing-phase=skip``) and runs them after, alone and serially (``--timing-phase=only``).

The groups are a table of module paths, not ``xdist_group`` marks: xdist's ``loadgroup`` sends a mark to its
scheduler by rewriting the test's node id, which pytest 9.2 no longer allows, so the marks are silently ignored
(https://github.com/pytest-dev/pytest-xdist/issues/1386). Without xdist (``INSIGHT_O3_TEST_WORKERS=0``, ``-n 0``,
a venv without it) nothing here changes the run.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

#: group -> its modules (paths from the repository root), in the order the groups start
GROUPS: dict[str, tuple[str, ...]] = {
    # the recipe's CPU driver (Ray, 2 FSDP ranks with vLLM's engine in each; ~4 min alone, ~10 GB) and the one
    # other test that starts a local Ray cluster
    "driver": ("tests/recipe/test_driver_vllm.py", "tests/recipe/test_runtime_env.py"),
    # real vLLM-CPU servers, and the DPO runs (training, then a vLLM server per round); the two modules that share
    # the suite's tiny-model server (tests/conftest.py ``shared_tiny_vllm``) one after the other: it stops after
    # the last test that uses it
    "servers": (
        "tests/training/test_dpo_rounds.py",
        "tests/test_vllm_launcher.py",
        "tests/test_vllm_baselines.py",
        "tests/test_vllm_e2e.py",
        "tests/recipe/test_vllm_replay.py",
        "tests/training/test_dpo_train.py",
    ),
}
GROUP_OF = {module: group for group, modules in GROUPS.items() for module in modules}


def scope(nodeid: str) -> str:
    """A test's unit of work: its group, or its module."""
    module = nodeid.split("::", 1)[0]
    return GROUP_OF.get(module, module)


def order_groups_first(items: list[pytest.Item]) -> None:
    """On an xdist worker, the groups' tests first (group by group, each group's modules in :data:`GROUPS` order),
    then the rest as collected. Every worker sorts the same collection the same way (xdist checks that they
    agree); the sort is stable, so the tests of a module keep pytest's order (its module fixtures rely on it)."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    rank = {module: i for i, module in enumerate(GROUP_OF)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


def make_scheduler(config: pytest.Config, log):
    """xdist's loadfile scheduling with :func:`scope` as the unit of work, queued in collection order (xdist's
    default queues the units with the most tests first)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):
        def __init__(self, config: pytest.Config, log=None) -> None:
            super().__init__(config, log)
            config.option.loadscopereorder = False

        def _split_scope(self, nodeid: str) -> str:
            return scope(nodeid)

    return GroupScheduling(config, log)


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


#: ``--timing-phase``: where the tests marked ``timing`` run (``scripts/test.sh`` runs them after the workers, alone)
TIMING_PHASES = ("inline", "skip", "only")


def select_timing_phase(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the ``timing`` tests (a wall-clock bound that 2 cores shared with other workers' servers, Ray and vLLM
    break: CI saw a rate-limited run take 1.8x its ideal beside the CPU driver) or everything else, as
    ``--timing-phase`` says: ``inline`` (the default) runs every test where it is collected, ``skip`` deselects the
    timing tests (the parallel part of ``scripts/test.sh``), ``only`` keeps them alone (its serial part after)."""
    phase = config.getoption("timing_phase")
    if phase == "inline":
        return
    keep, drop = [], []
    for item in items:
        (keep if (item.get_closest_marker("timing") is not None) == (phase == "only") else drop).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
