"""``bash scripts/test.sh`` on xdist workers (tests.support.parallel): a module runs whole on one worker, a group's
modules on one worker and first, the tests marked ``timing`` after the workers, alone, and
``INSIGHT_O3_TEST_WORKERS=0`` runs serially in one process. Checked on a small generated suite, laid out at the
groups' module paths, that records where and in which order each test ran."""

from __future__ import annotations

import ast
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support import parallel
from tests.support.stacks import REPO, require_module

require_module("xdist")  # skips on an install without it, fails under INSIGHT_O3_REQUIRE_FULL

CONFTEST = (
    "from tests.conftest import pytest_addoption, pytest_collection_modifyitems, pytest_xdist_make_scheduler"
    "  # noqa: F401\n"
)
INI = "[pytest]\nmarkers =\n    timing: a wall-clock bound\n"

MODULE = """import json, os, time
import pytest

@pytest.mark.parametrize("i", range(3))
{mark}def test_it(i):
    time.sleep(0.05)
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({{"module": {module!r}, "i": i, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "pid": os.getpid(), "t": time.monotonic(), "omp": os.environ.get("OMP_NUM_THREADS"),
                            "blas": os.environ.get("OPENBLAS_NUM_THREADS")}}) + "\\n")
"""

#: two modules of each group, and three of none (collected before the groups' modules: "a*" < "recipe", "test_v")
PLAIN = ["tests/a1/test_one.py", "tests/a2/test_two.py", "tests/a3/test_three.py"]
GROUPED = [m for modules in parallel.GROUPS.values() for m in modules[:2]]
#: what scripts/test.sh sets for its workers (and this run's workers have: not passed on to the generated suite)
THREAD_COUNTS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
#: a module of ``timing`` tests, collected first
TIMING = "tests/a0/test_timed.py"


def _run(tmp_path: Path, *args: str, **env: str) -> list[dict]:
    root = tmp_path / "suite"
    for module in PLAIN + GROUPED + [TIMING]:
        path = root / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(MODULE.format(module=module, mark="@pytest.mark.timing\n" if module == TIMING else ""))
    (root / "conftest.py").write_text(CONFTEST)
    (root / "pytest.ini").write_text(INI)
    record = tmp_path / "record.jsonl"
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh"), "-p", "no:cacheprovider", "--rootdir", str(root), *args, str(root)],
        # not this run's PYTEST_ADDOPTS (a junit file) nor, on a worker, its PYTEST_XDIST_WORKER
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in THREAD_COUNTS},
            "PYTHONPATH": str(REPO),
            "RECORD": str(record),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    runs = [json.loads(line) for line in record.read_text().splitlines()]
    assert len(runs) == 3 * len(PLAIN + GROUPED + [TIMING])
    return runs


def test_every_grouped_module_exists():
    assert [m for m in parallel.GROUP_OF if not (REPO / m).is_file()] == []


def test_modules_and_groups_stay_on_one_worker_and_groups_start_first(tmp_path):
    runs = _run(tmp_path, f"--junitxml={tmp_path / 'junit.xml'}", INSIGHT_O3_TEST_WORKERS="3")
    # the timing tests: after every other test, in one process of their own (no worker), in their order; their
    # cases in the sibling report
    timed = [r for r in runs if r["module"] == TIMING]
    runs = [r for r in runs if r["module"] != TIMING]
    assert {r["worker"] for r in timed} == {None} and len({r["pid"] for r in timed}) == 1
    assert [r["i"] for r in sorted(timed, key=lambda r: r["t"])] == [0, 1, 2]
    assert min(r["t"] for r in timed) > max(r["t"] for r in runs)
    # one OpenMP/BLAS thread in each worker; the timing tests, alone, keep the caller's setting (none here)
    assert {(r["omp"], r["blas"]) for r in runs} == {("1", "1")} and {(r["omp"], r["blas"]) for r in timed} == {
        (None, None)
    }
    assert (tmp_path / "junit.xml").read_text().count("<testcase ") == len(runs)
    assert (tmp_path / "junit.timing.xml").read_text().count("<testcase ") == 3
    workers: dict[str, set] = {}
    for r in runs:
        workers.setdefault(r["module"], set()).add(r["worker"])
    assert all(len(w) == 1 for w in workers.values()), workers  # a module on one worker
    assert len({r["worker"] for r in runs}) == 3  # and the suite on all three
    for group, modules in parallel.GROUPS.items():
        a, b = modules[:2]
        assert workers[a] == workers[b], group  # a group on one worker
        (worker,) = workers[a]
        mine = [r["module"] for r in sorted(runs, key=lambda r: r["t"]) if r["worker"] == worker]
        assert mine[:6] == [a] * 3 + [b] * 3, mine  # first on its worker, its modules in the table's order
    for module in PLAIN:
        order = [r["i"] for r in sorted(runs, key=lambda r: r["t"]) if r["module"] == module]
        assert order == [0, 1, 2]  # a module's tests in their order


def test_workers_zero_runs_serially_in_one_process(tmp_path):
    runs = _run(tmp_path, INSIGHT_O3_TEST_WORKERS="0")
    assert {r["worker"] for r in runs} == {None} and len({r["pid"] for r in runs}) == 1
    assert {r["omp"] for r in runs} == {None}  # one process may use every core
    # as collected: no group first, and the timing tests where they are
    assert [r["module"] for r in runs][:12] == [m for m in [TIMING, *PLAIN] for _ in range(3)]


#: the generated suite's conftest for the shared tiny-model vLLM server: the suite's own fixtures and teardown hook
#: (tests/conftest.py), with a ``sleep`` standing in for the server
SHARED_CONFTEST = (
    CONFTEST
    + '''import json, os, subprocess, time
import pytest
from tests.conftest import pytest_runtest_teardown, shared_tiny_vllm, tiny_vllm_server  # noqa: F401


def note(event):
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({"event": event, "worker": os.environ.get("PYTEST_XDIST_WORKER"), "t": time.monotonic()})
                + "\\n")


class Server:
    def start(self, timeout):
        self.proc = subprocess.Popen(["sleep", "300"])
        note("start")
        return self

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        note("stop")


@pytest.fixture(scope="session")
def make_tiny_vllm():
    return Server
'''
)

USER_MODULE = """import json, os, time
import pytest

@pytest.mark.parametrize("i", range(3))
def test_it(i, tiny_vllm_server):
    assert tiny_vllm_server.proc.poll() is None
    time.sleep(0.05)
    with open(os.environ["RECORD"], "a") as f:
        f.write(json.dumps({{"module": {module!r}, "i": i, "worker": os.environ.get("PYTEST_XDIST_WORKER"),
                            "pid": os.getpid(), "t": time.monotonic(), "omp": os.environ.get("OMP_NUM_THREADS"),
                            "blas": os.environ.get("OPENBLAS_NUM_THREADS")}}) + "\\n")
"""


def _uses_the_shared_server(module: Path) -> bool:
    tree = ast.parse(module.read_text())
    tests = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("test")]
    return any(a.arg == "tiny_vllm_server" for f in tests for a in f.args.args)


#: the modules whose tests use the suite's shared tiny-model vLLM server (tests/conftest.py ``shared_tiny_vllm``)
SHARED_USERS = sorted(
    str(p.relative_to(REPO)) for p in (REPO / "tests").rglob("test_*.py") if _uses_the_shared_server(p)
)


@pytest.mark.parametrize("workers", ["0", "3"])
def test_the_shared_tiny_vllm_server_starts_once_and_stops_after_its_last_user(workers, tmp_path):
    """Its users run one after another (serially by path, under xdist in the servers group's order), so one start
    serves them all, and the teardown hook stops it before any other test runs on that worker."""
    assert len(SHARED_USERS) >= 2 and all(parallel.GROUP_OF.get(m) == "servers" for m in SHARED_USERS), SHARED_USERS
    root = tmp_path / "suite"
    for module in PLAIN + list(parallel.GROUPS["servers"]):
        path = root / module
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text((USER_MODULE if module in SHARED_USERS else MODULE).format(module=module, mark=""))
    (root / "conftest.py").write_text(SHARED_CONFTEST)
    (root / "pytest.ini").write_text(INI)
    record = tmp_path / "record.jsonl"
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "test.sh"), "-p", "no:cacheprovider", "--rootdir", str(root), str(root)],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith("PYTEST_") and k not in THREAD_COUNTS},
            "PYTHONPATH": str(REPO),
            "RECORD": str(record),
            "INSIGHT_O3_TEST_WORKERS": workers,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    rows = sorted((json.loads(line) for line in record.read_text().splitlines()), key=lambda row: row["t"])
    events = [row for row in rows if "event" in row]
    assert [e["event"] for e in events] == ["start", "stop"], events
    worker = events[0]["worker"]
    assert events[1]["worker"] == worker
    during = [row["module"] for row in rows if events[0]["t"] < row["t"] < events[1]["t"] and row["worker"] == worker]
    assert during == [m for m in SHARED_USERS for _ in range(3)], during
    # the worker ran tests after the stop (the group's rest, or the other modules): the server had stopped by then
    assert any(row["t"] > events[1]["t"] and row["worker"] == worker for row in rows if "module" in row)


def test_a_thread_count_the_caller_set_is_kept(tmp_path):
    runs = _run(tmp_path, INSIGHT_O3_TEST_WORKERS="3", OMP_NUM_THREADS="3")
    assert {r["omp"] for r in runs} == {"3"} and {r["blas"] for r in runs if r["module"] != TIMING} == {"1"}
