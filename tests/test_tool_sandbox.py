"""The python_interpreter sandbox contains what a naive subprocess does not: a fork bomb, a 10 GB allocation, a
socket connect, a write outside its scratch folder, an endless loop, 1 GB of output; it leaves no process behind
and refuses (fail closed) where it cannot isolate. The last test shows the probes catch a naive subprocess."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from insight_o3.tools.sandbox import SandboxLimits, probe, run_python
from tests.support.stacks import require

require(probe() is None, f"a sandbox (unshare with user/network namespaces; root: a pids cgroup): {probe()}")
LIMITS = SandboxLimits(seconds=3, memory=1 * 2**30, processes=16, output_chars=10_000)
ESCAPE = "S = __import__('sys').modules\nos = S['os']\n"  # past the release's restricted builtins


def _run(code: str, limits: SandboxLimits = LIMITS, marker: str = "") -> tuple:
    t = time.perf_counter()
    r = asyncio.run(run_python(code, limits, marker=marker))
    return r, time.perf_counter() - t


def _leftovers(marker: str) -> list[int]:
    """Processes whose environment carries ``marker`` (every sandbox process has INSIGHT_O3_SANDBOX=marker)."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if f"INSIGHT_O3_SANDBOX={marker}".encode() in Path(f"/proc/{pid}/environ").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def test_fork_bomb_is_capped_and_nothing_is_left(tmp_path):
    marker = f"forkbomb-{os.getpid()}"
    r, secs = _run(ESCAPE + "while True:\n    os.fork()\n", marker=marker)
    assert "Resource temporarily unavailable" in (r.text or "") or r.limit == "time"
    assert secs < LIMITS.seconds + 8
    assert _leftovers(marker) == []


def test_a_10_gb_allocation_fails_inside():
    r, _ = _run("x = np.ones(10 * 2**30 // 8)\nprint('allocated')")
    assert r.limit == "memory" and "MemoryError" in r.text and "allocated" not in r.text


def test_no_network(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    try:
        code = f"__import__('urllib.request')\nsk = __import__('sys').modules['socket']\nsk.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
        r, _ = _run(code)
    finally:
        srv.close()
    assert "connected" not in r.text and "unreachable" in r.text.lower()


def test_no_write_outside_scratch(tmp_path):
    target = tmp_path / "open_to_all"
    target.mkdir()
    target.chmod(0o777)  # even a world-writable folder
    code = f"io = __import__('sys').modules['io']\nio.open({str(target / 'x')!r}, 'w').write('x')\nprint('wrote')"
    r, _ = _run(code)
    assert "Read-only file system" in r.text and not (target / "x").exists()
    r, _ = _run("io = __import__('sys').modules['io']\nio.open('inside.txt', 'w').write('x')\nprint('wrote inside')")
    assert r.text == "[Output]\nwrote inside"


def test_endless_loop_is_stopped():
    r, secs = _run("while True:\n    pass\n")
    assert r.limit == "time" and r.text == "[Timeout] Execution exceeded 3s"
    assert secs < LIMITS.seconds + 8


def test_a_gigabyte_of_output_is_cut():
    r, secs = _run("for _ in range(1000):\n    print('x' * 10**6)\n" + ESCAPE + "os.write(1, b'y' * 10**6)")
    assert r.limit == "output" and r.text.endswith("[output cut: more than 10000 characters]")
    assert len(r.text) < 11_000 and secs < LIMITS.seconds + 8


def test_a_big_file_is_refused():
    r, _ = _run(
        "io = __import__('sys').modules['io']\nf = io.open('big', 'wb')\nf.write(b'x' * (80 * 2**20))\nprint('wrote')"
    )
    assert "File too large" in r.text


def test_refuses_where_it_cannot_isolate():
    probe.cache_clear()
    r = asyncio.run(run_python("print(1)", LIMITS, unshare="false"))
    assert r.text is None and "namespaces" in (r.refused or "")


def test_the_probes_catch_a_naive_subprocess(tmp_path):
    """The same network and file probes, run in a plain subprocess, escape: the tests above can fail."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    target = tmp_path / "open_to_all"
    target.mkdir()
    code = (
        f"import socket; socket.create_connection(('127.0.0.1', {srv.getsockname()[1]}), timeout=2); print('connected')\n"
        f"open({str(target / 'x')!r}, 'w').write('x'); print('wrote')"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30).stdout
    finally:
        srv.close()
    assert "connected" in out and "wrote" in out and (target / "x").exists()


def test_the_unprivileged_path_caps_processes_too():
    """As a user that is not root the process cap is RLIMIT_NPROC inside the new user namespace (root is exempt
    from it, hence the pids cgroup above): run the sandbox as ``nobody`` with the system's Python (the sandbox and
    its child use only the standard library) and fork-bomb it."""
    import shutil
    import tempfile

    python, setpriv = shutil.which("python3", path="/usr/bin:/bin"), shutil.which("setpriv")
    if os.geteuid() != 0 or python is None or setpriv is None:
        pytest.skip("needs root (to become nobody), setpriv and a system python3")
    tmp_path = Path(tempfile.mkdtemp(prefix="insight_o3_nobody_"))  # under /tmp: pytest's folders are 0700
    pkg = tmp_path / "pkg" / "insight_o3" / "tools"
    pkg.mkdir(parents=True)
    src = Path(__file__).resolve().parents[1] / "insight_o3"
    for rel in ("__init__.py", "tools/__init__.py", "tools/sandbox.py", "tools/sandbox_child.py"):
        shutil.copy(src / rel, pkg.parent / rel)
    script = tmp_path / "pkg" / "run.py"
    script.write_text(
        "import asyncio, sys\nsys.path.insert(0, sys.argv[1])\n"
        "from insight_o3.tools.sandbox import SandboxLimits, probe, run_python\n"
        "assert probe() is None, probe()\n"
        "code = \"os = __import__('sys').modules['os']\\nwhile True:\\n    os.fork()\\n\"\n"
        "r = asyncio.run(run_python(code, SandboxLimits(seconds=3, processes=16), marker=sys.argv[2]))\n"
        "print(r.text)\n"
    )
    for p in [tmp_path, *tmp_path.rglob("*")]:
        p.chmod(0o755 if p.is_dir() else 0o644)
    for parent in tmp_path.parents:  # nobody must reach the copy
        if not os.access(parent, os.X_OK) or (parent.stat().st_mode & 0o001) == 0:
            pytest.skip(f"{parent} is not searchable by other users")
    marker = f"nobody-{os.getpid()}"
    out = subprocess.run(
        [
            setpriv,
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            python,
            str(script),
            str(tmp_path / "pkg"),
            marker,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd="/",
    )
    shutil.rmtree(tmp_path, ignore_errors=True)
    assert "Resource temporarily unavailable" in out.stdout, out.stdout + out.stderr
    assert _leftovers(marker) == []


def test_a_process_that_exits_before_it_is_capped_is_not_an_error():
    """The harness puts each process of a sandbox's session in the call's pids cgroup (root); one that exits between
    the scan that found it and its addition (the kernel answers ESRCH) has nothing left to cap: no error, and the
    call goes on."""
    from insight_o3.tools.sandbox import _ProcessCap

    if os.geteuid() != 0:
        pytest.skip("the pids cgroup is used by root only")
    cap = _ProcessCap(4)
    try:
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()
        cap.add(gone.pid)
        assert str(gone.pid) not in (cap.path / "cgroup.procs").read_text().split()
    finally:
        cap.remove()
