"""A sandboxed child process for code a model wrote: wall time, memory, processes, output, file size, no network,
its own scratch folder, and every process killed afterwards.

How (Linux): ``unshare`` (util-linux) starts the child in new user, mount, network, PID and IPC namespaces
(``--map-root-user --mount-proc --kill-child``): the network namespace has no interface up, so no connection
leaves it; :mod:`.sandbox_child` remounts every mount read-only except a fresh scratch folder (a write anywhere
else fails with EROFS, even in a world-writable folder); ``RLIMIT_AS`` caps memory, ``RLIMIT_FSIZE`` file size,
``RLIMIT_CPU`` CPU time; the number of processes is capped by a ``pids`` cgroup when this process is root (root is
exempt from ``RLIMIT_NPROC``) and by ``RLIMIT_NPROC`` inside the new user namespace otherwise; stdout is read up
to a cap; the child runs in its own session and the whole process group (and with it the PID namespace) is killed
with SIGKILL when the call ends, whatever happened.

Fail closed: when the namespaces cannot be made here (no ``unshare``, user namespaces disabled, a container that
forbids them) or the process cap cannot be set, :func:`probe` says why and the tool refuses every call with that
reason; nothing runs unconfined.
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

CHILD = Path(__file__).with_name("sandbox_child.py")
CGROUP_PIDS_ROOTS = ("/sys/fs/cgroup/pids", "/sys/fs/cgroup")
UNSHARE_FLAGS = ["--user", "--map-root-user", "--mount", "--mount-proc", "--net", "--pid", "--ipc", "--kill-child"]


@dataclass(frozen=True, kw_only=True)
class SandboxLimits:
    seconds: float = 30.0  # wall time of the code (the release's PythonInterpreterTool.timeout)
    memory: int = 2 * 2**30  # RLIMIT_AS, bytes
    processes: int = 32  # processes and threads at once
    output_chars: int = 100_000  # characters of the code's stdout/stderr kept (then it is stopped)
    file_bytes: int = 64 * 2**20  # RLIMIT_FSIZE
    result_bytes: int = 1 * 2**20  # bytes of the child's result line read


@dataclass(frozen=True)
class SandboxResult:
    text: str | None  # the release-format result; None when the call was refused or killed
    limit: str | None  # "time", "memory", "output", "result" or None
    refused: str | None = None  # why no sandbox could be made (fail closed)
    seconds: float = 0.0


def _pids_cgroup_root() -> Path | None:
    for root in CGROUP_PIDS_ROOTS:
        p = Path(root)
        if (p / "cgroup.procs").exists() and (p.name == "pids" or (p / "cgroup.controllers").exists()):
            if p.name == "pids" or "pids" in (p / "cgroup.controllers").read_text().split():
                return p
    return None


@functools.lru_cache(maxsize=4)
def probe(unshare: str = "unshare") -> str | None:
    """None when sandboxes can be made here, else why not (cached per ``unshare`` command)."""
    exe = shutil.which(unshare)
    if exe is None:
        return f"{unshare!r} (util-linux) is not installed"
    try:
        r = subprocess.run([exe, *UNSHARE_FLAGS, "--fork", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{unshare} cannot run: {e}"
    if r.returncode != 0:
        return f"this host does not let the process create user/network namespaces ({r.stderr.decode()[:200].strip()})"
    if os.geteuid() == 0 and _pids_cgroup_root() is None:
        return "running as root without a writable pids cgroup, the number of processes cannot be capped"
    return None


class _ProcessCap:
    """The pids cgroup of one call (root only), removed when empty."""

    def __init__(self, limit: int):
        root = _pids_cgroup_root()
        assert root is not None
        self.path = root / "insight_o3_sandbox" / secrets.token_hex(8)
        self.path.mkdir(parents=True)
        (self.path / "pids.max").write_text(str(limit))

    def add(self, pid: int) -> None:
        """Put ``pid`` in this cgroup; a process that has exited meanwhile has nothing left to cap."""
        try:
            (self.path / "cgroup.procs").write_text(str(pid))
        except ProcessLookupError:
            pass

    def remove(self) -> None:
        for _ in range(200):
            try:
                self.path.rmdir()
                return
            except OSError:
                for pid in (self.path / "cgroup.procs").read_text().split():
                    try:
                        os.kill(int(pid), signal.SIGKILL)
                    except (ProcessLookupError, ValueError):
                        pass
                time.sleep(0.01)


async def _cap_session(cap: _ProcessCap, proc: asyncio.subprocess.Process) -> None:
    """Every process of ``proc``'s session (unshare, its child waiting for "g") into ``cap``, scanned again after each
    addition until a scan finds none new: what a capped process forks later is in the cgroup from birth, what was
    forked before it was added is caught by the next scan, and a short-lived one may exit in between."""
    added: set[int] = set()
    for _ in range(100):
        pids = set(_session_pids(proc.pid))
        new = pids - added
        for pid in sorted(new):
            cap.add(pid)
        added |= new
        if (len(pids) >= 2 and not new) or proc.returncode is not None:
            return
        await asyncio.sleep(0.005)


def _session_pids(sid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    out.append(int(entry))
            except OSError:
                pass
    return out


def _kill_session(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


async def run_python(code: str, limits: SandboxLimits, unshare: str = "unshare", marker: str = "") -> SandboxResult:
    """Run ``code`` in a fresh sandbox (see the module docstring)."""
    why = probe(unshare)
    if why is not None:
        return SandboxResult(None, None, refused=why)
    loop = asyncio.get_running_loop()
    start = loop.time()
    scratch = Path(tempfile.mkdtemp(prefix="insight_o3_sandbox_"))
    (scratch / "code.py").write_text(code, encoding="utf-8")
    root = os.geteuid() == 0
    cap = _ProcessCap(limits.processes) if root else None
    child_limits = {
        "memory": limits.memory,
        "file_bytes": limits.file_bytes,
        "cpu_seconds": max(1, int(limits.seconds) + 1),
        "nproc": None if root else limits.processes,
        "output_chars": limits.output_chars,
        "timeout": limits.seconds,
    }
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(scratch),
        "TMPDIR": str(scratch),
        "LANG": "C.UTF-8",
        "OPENBLAS_NUM_THREADS": "1",
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MPLBACKEND": "Agg",
        "INSIGHT_O3_SANDBOX": marker or scratch.name,
    }
    exe = shutil.which(unshare) or unshare
    proc = await asyncio.create_subprocess_exec(
        exe, *UNSHARE_FLAGS, "--", sys.executable, "-I", str(CHILD), str(scratch), json.dumps(child_limits),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        env=env, start_new_session=True, limit=limits.result_bytes,
    )  # fmt: skip
    limit: str | None = None
    raw = b""
    try:
        if cap is not None:
            await _cap_session(cap, proc)
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"g")
        await proc.stdin.drain()
        proc.stdin.close()
        try:
            raw = await asyncio.wait_for(proc.stdout.readline(), timeout=limits.seconds + 5)
        except asyncio.TimeoutError:
            limit = "time"
        except ValueError:  # a line longer than the stream's limit
            limit = "result"
        if limit is None and loop.time() - start > limits.seconds + 4:
            limit = "time"
    finally:
        _kill_session(proc.pid)
        try:
            await asyncio.wait_for(proc.wait(), timeout=10)
        except asyncio.TimeoutError:
            pass
        if cap is not None:
            await asyncio.to_thread(cap.remove)
        shutil.rmtree(scratch, ignore_errors=True)
    seconds = loop.time() - start
    if limit is not None:
        return SandboxResult(None, limit, seconds=seconds)
    try:
        out = json.loads(raw[: limits.result_bytes])
    except ValueError:
        return SandboxResult(None, "result", seconds=seconds)
    if not isinstance(out, dict):
        return SandboxResult(None, "result", seconds=seconds)
    if "refused" in out:
        return SandboxResult(None, None, refused=str(out["refused"]), seconds=seconds)
    return SandboxResult(str(out.get("text", "")), out.get("limit"), seconds=seconds)
