"""A round's policy behind an OpenAI-compatible endpoint: the repository's ``scripts/vllm_serve_bg.sh`` (start in the
background, wait until healthy; stop ends the whole process group), so the round driver serves exactly as a user
does. A stale server of an earlier, killed driver is stopped first (every pid file the script left in the round's
run directory).

The port: a fixed one (``port``), or ``0``: a free one, picked the moment the server starts. A port picked long before
(at the start of a run, and reused round after round) is free only when it is picked: another program may take it
while a round trains, and then answers ``/health`` for the policy's server (the script refuses a port in use and a
listener that is not its server's, so such a race stops the round with a message instead of serving from a stranger).
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from insight_o3.base.json_types import JSONObject

ROOT = Path(__file__).resolve().parents[2]
SERVE_SCRIPT = ROOT / "scripts" / "vllm_serve_bg.sh"


class ServeError(RuntimeError):
    """The server did not start (the message ends with the script's output, which names its log)."""


@dataclass(frozen=True, kw_only=True)
class ServeSettings:
    """How the policy is served (none of it changes what the policy is): the port and host, the context length, the
    images per request, vLLM's CPU build (``cpu``: ``--cpu`` of the script), the interpreter, extra vLLM flags.
    ``port`` 0: a free port, picked when each server starts."""

    port: int = 8000
    host: str = "127.0.0.1"
    max_model_len: int = 16384
    limit_mm_per_prompt: str = '{"image": 1, "video": 0}'
    tensor_parallel_size: int = 1
    cpu: bool = False
    python: str | None = None
    timeout_s: int = 1800
    vllm_args: tuple[str, ...] = field(default_factory=tuple)

    def settings(self) -> JSONObject:
        return {
            "port": self.port,
            "host": self.host,
            "max_model_len": self.max_model_len,
            "limit_mm_per_prompt": self.limit_mm_per_prompt,
            "tensor_parallel_size": self.tensor_parallel_size,
            "cpu": self.cpu,
            "python": self.python,
            "timeout_s": self.timeout_s,
            "vllm_args": list(self.vllm_args),
        }

    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"


def _script(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        ["bash", str(SERVE_SCRIPT), *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT
    )


def start_args(model_dir: str, name: str, s: ServeSettings, run_dir: str) -> list[str]:
    """The script's ``start`` arguments."""
    args = ["start", "--model", model_dir, "--served-model-name", name, "--port", str(s.port), "--host", s.host]
    args += ["--max-model-len", str(s.max_model_len), "--limit-mm-per-prompt", s.limit_mm_per_prompt]
    args += ["--tensor-parallel-size", str(s.tensor_parallel_size), "--timeout", str(s.timeout_s), "--run-dir", run_dir]
    if s.cpu:
        args.append("--cpu")
    if s.python:
        args += ["--python", s.python]
    if s.vllm_args:
        args += ["--", *s.vllm_args]
    return args


def stop(s: ServeSettings, run_dir: str) -> None:
    _script("stop", "--port", str(s.port), "--run-dir", run_dir, timeout=120)


_PID_FILE = re.compile(r"^vllm_(\d+)\.pid$")


def stop_stale(s: ServeSettings, run_dir: str) -> None:
    """Stop every server whose pid file is in ``run_dir`` (an earlier driver's, killed while it served)."""
    for name in sorted(os.listdir(run_dir)):
        m = _PID_FILE.match(name)
        if m:
            stop(dataclasses.replace(s, port=int(m.group(1))), run_dir)


def free_port(host: str) -> int:
    """A port nothing listens on now (the server binds it seconds later, as it starts)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@contextmanager
def served(model_dir: str, name: str, s: ServeSettings, run_dir: str) -> Iterator[str]:
    """Serve ``model_dir`` as ``name`` while the block runs; yields the endpoint's base URL."""
    os.makedirs(run_dir, exist_ok=True)
    stop_stale(s, run_dir)
    if s.port == 0:
        s = dataclasses.replace(s, port=free_port(s.host))
    try:
        r = _script(*start_args(model_dir, name, s, run_dir), timeout=s.timeout_s + 120)
    except subprocess.TimeoutExpired:
        stop(s, run_dir)
        raise ServeError(
            f"vllm_serve_bg.sh start did not return within {s.timeout_s + 120} s (log: {run_dir})"
        ) from None
    if r.returncode != 0:
        stop(s, run_dir)
        raise ServeError(
            f"could not serve {model_dir} (vllm_serve_bg.sh exit {r.returncode}): {(r.stdout + r.stderr)[-2000:]}"
        )
    try:
        yield s.base_url()
    finally:
        stop(s, run_dir)
