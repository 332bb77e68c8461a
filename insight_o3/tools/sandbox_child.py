"""The sandbox's child (run as a script by :mod:`insight_o3.tools.sandbox`, standard library only): inside the new
user, mount, network, PID and IPC namespaces that ``unshare`` made, it makes every mount read-only except its
scratch folder, sets its limits, waits for the parent's go, then runs the code as OpenSearch-VL's
``PythonInterpreterTool.call`` does (RL/.../tools/python_interpreter_tool.py at c5c02a4: restricted builtins, the
safe-import list, stdout/stderr captured) and writes one JSON result line on the result descriptor.

Usage: python -I sandbox_child.py SCRATCH LIMITS_JSON   (the code is SCRATCH/code.py)
"""

import ctypes
import ctypes.util
import io
import json
import os
import resource
import sys
from typing import Any

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18
MS_NOATIME, MS_NODIRATIME, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 1 << 21, 1 << 24
_FLAG = {"ro": MS_RDONLY, "nosuid": MS_NOSUID, "nodev": MS_NODEV, "noexec": MS_NOEXEC, "noatime": MS_NOATIME,
         "nodiratime": MS_NODIRATIME, "relatime": MS_RELATIME, "strictatime": MS_STRICTATIME}  # fmt: skip
REFUSED = 125  # exit status: the sandbox could not be made (the parent refuses the call)


def _mount(libc: Any, source: Any, target: str, fstype: Any, flags: int) -> None:
    if libc.mount(source, target.encode(), fstype, flags, None) != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"mount {target}: {os.strerror(e)}")


def read_only_except(scratch: str) -> None:
    """Every mount read-only but ``scratch`` (bind-mounted onto itself first, so it is a mount of its own)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    _mount(libc, None, "/", None, MS_REC | MS_PRIVATE)
    _mount(libc, scratch.encode(), scratch, None, MS_BIND)
    with open("/proc/self/mountinfo") as fh:
        mounts = [line.split() for line in fh]
    for fields in mounts:
        target = fields[4].encode().decode("unicode_escape")
        if target == scratch:
            continue
        flags = MS_REMOUNT | MS_BIND | MS_RDONLY
        for opt in fields[5].split(","):
            flags |= _FLAG.get(opt, 0)
        try:
            _mount(libc, None, target, None, flags)
        except OSError:
            if "ro" not in fields[5].split(","):  # a writable mount that stays writable: refuse
                raise


SAFE_MODULES = [
    "math", "datetime", "json", "random", "re", "collections", "itertools", "statistics", "numpy", "pandas",
    "scipy", "scipy.linalg", "scipy.optimize", "scipy.signal", "scipy.special", "matplotlib", "matplotlib.pyplot",
    "urllib.request", "requests", "sys",
]  # fmt: skip


class CappedText(io.StringIO):
    """stdout/stderr of the code: kept up to ``cap`` characters; past it the code is stopped."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap, self.cut = cap, False

    def write(self, s: str) -> int:
        room = self.cap - self.tell()
        if len(s) > room:
            super().write(s[: max(room, 0)])
            self.cut = True
            raise OutputLimit()
        return super().write(s)


class OutputLimit(BaseException):
    pass


class Timeout(BaseException):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise Timeout()


def run_code(code: str, timeout: float, output_cap: int, memory: int) -> tuple[str, str | None]:
    """``PythonInterpreterTool.call`` after its pattern check (done by the parent)."""
    allowed_modules: dict[str, Any] = {
        "math": __import__("math"), "datetime": __import__("datetime"), "json": __import__("json"),
        "random": __import__("random"), "re": __import__("re"), "collections": __import__("collections"),
        "itertools": __import__("itertools"), "statistics": __import__("statistics"),
    }  # fmt: skip
    try:
        import numpy as np

        allowed_modules["numpy"] = np
        allowed_modules["np"] = np
    except ImportError:
        pass
    try:
        import pandas as pd

        allowed_modules["pandas"] = pd
        allowed_modules["pd"] = pd
    except ImportError:
        pass

    def safe_import(name: str, *args: Any, **kwargs: Any) -> Any:
        if name in SAFE_MODULES or any(name.startswith(m + ".") for m in SAFE_MODULES):
            return __import__(name, *args, **kwargs)
        raise ImportError(f"Module '{name}' is not allowed for safety reasons")

    restricted_builtins: dict[str, Any] = {
        "abs": abs, "all": all, "any": any, "bin": bin, "bool": bool, "chr": chr, "dict": dict,
        "enumerate": enumerate, "filter": filter, "float": float, "hex": hex, "int": int, "len": len, "list": list,
        "map": map, "max": max, "min": min, "oct": oct, "ord": ord, "pow": pow, "print": print, "range": range,
        "reversed": reversed, "round": round, "set": set, "slice": slice, "sorted": sorted, "str": str, "sum": sum,
        "tuple": tuple, "type": type, "zip": zip, "__import__": safe_import, "Exception": Exception,
        "ImportError": ImportError, "ValueError": ValueError, "TypeError": TypeError, "KeyError": KeyError,
        "IndexError": IndexError, "AttributeError": AttributeError,
    }  # fmt: skip
    global_vars: dict[str, Any] = {"__builtins__": restricted_builtins}
    global_vars.update(allowed_modules)
    local_vars: dict[str, Any] = {}
    stdout_buffer, stderr_buffer = CappedText(output_cap), CappedText(output_cap)
    limit: str | None = None
    old = sys.stdout, sys.stderr
    import signal

    signal.signal(signal.SIGALRM, _alarm)
    try:
        sys.stdout, sys.stderr = stdout_buffer, stderr_buffer
        signal.setitimer(signal.ITIMER_REAL, timeout)
        exec(code, global_vars, local_vars)
    except Timeout:
        sys.stdout, sys.stderr = old
        return f"[Timeout] Execution exceeded {timeout:g}s", "time"
    except OutputLimit:
        limit = "output"
    except MemoryError as e:
        limit = "memory"
        _write(stderr_buffer, f"Execution error: MemoryError{': ' + str(e) if str(e) else ''} (the sandbox allows "
                              f"{memory} bytes of memory)")  # fmt: skip
    except Exception as e:
        _write(stderr_buffer, f"Execution error: {e}")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        sys.stdout, sys.stderr = old
    stdout_content, stderr_content = stdout_buffer.getvalue(), stderr_buffer.getvalue()
    cut = f"\n[output cut: more than {output_cap} characters]" if limit == "output" else ""
    if stderr_content:
        return "[Error]\n" + stderr_content + cut, limit
    if stdout_content:
        return "[Output]\n" + stdout_content.rstrip() + cut, limit
    meaningful_vars = {k: v for k, v in local_vars.items() if not k.startswith("_") and k not in allowed_modules}
    if meaningful_vars:
        return f"[Variables]\n{meaningful_vars}", limit
    return "[Success] Code executed (no output)", limit


def _write(buf: CappedText, text: str) -> None:
    try:
        buf.write(text)
    except OutputLimit:
        pass


def main() -> None:
    scratch, limits = sys.argv[1], json.loads(sys.argv[2])
    result_fd = os.dup(1)
    os.set_inheritable(result_fd, False)
    try:
        if limits.get("isolate_mounts", True):
            read_only_except(scratch)
    except OSError as e:
        os.write(result_fd, (json.dumps({"refused": f"cannot make the file system read-only: {e}"}) + "\n").encode())
        os._exit(REFUSED)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (1, 2):  # what the code writes to the descriptors goes nowhere (the release's goes to its console)
        os.dup2(devnull, fd)
    os.chdir(scratch)
    if sys.stdin.buffer.read(1) != b"g":  # the parent's go: its cgroup holds us now
        os._exit(REFUSED)
    os.dup2(devnull, 0)
    mem = int(limits["memory"])
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_FSIZE, (int(limits["file_bytes"]), int(limits["file_bytes"])))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    cpu = int(limits["cpu_seconds"])
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    if limits.get("nproc"):
        resource.setrlimit(resource.RLIMIT_NPROC, (int(limits["nproc"]), int(limits["nproc"])))
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the file cap fails with EFBIG instead
    with open("code.py", encoding="utf-8") as fh:
        code = fh.read()
    me = os.getpid()
    text, limit = run_code(code, limits["timeout"], int(limits["output_chars"]), mem)
    if os.getpid() == me:  # a process the code forked does not answer
        os.write(result_fd, (json.dumps({"text": text, "limit": limit}) + "\n").encode())
    os._exit(0)


if __name__ == "__main__":
    main()
