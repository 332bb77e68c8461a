"""A served vSearcher decodes as it was trained, whatever ``generation_config.json`` its checkpoint carries.

``verl/recipe/vsearch/export_hf.sh`` (verl's model merger) copies the base model's ``generation_config.json`` into the
export (Qwen2.5-VL-Instruct's holds ``repetition_penalty`` 1.05, ``top_k``, ``top_p``), and ``vllm serve`` applies it
to every request that does not set those fields (``--generation-config auto``, vLLM's default). The evaluation's
vSearcher requests set only ``temperature`` 0 and ``max_tokens``, so before this change the trained vSearcher was
evaluated with a repetition penalty it never saw: verl's rollouts and ``val.sh`` force 1.0. Greedy box coordinates
repeat digits, which is exactly what a penalty changes.

Here the tiny Qwen2.5-VL gets a planted ``generation_config.json`` with a repetition penalty (1.5: larger than Qwen's
1.05, so that the random model's greedy output visibly changes), is served by ``scripts/vllm_serve_bg.sh --cpu`` as
the README starts the vSearcher, and asked as the evaluation asks: the reply equals the one with
``repetition_penalty`` 1.0 sent explicitly (training's decoding), and differs from the one with the planted penalty
sent explicitly (the control: the penalty does change this prompt's output). ``--generation-config auto`` still
reproduces vLLM's default when asked for.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from tests.support.stacks import REPO
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.slow
LAUNCHER = REPO / "scripts" / "vllm_serve_bg.sh"
PENALTY = 1.5
PROMPT = "List the box corners: 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3"


@pytest.fixture(scope="module")
def planted_model(tiny_qwen_dir, tmp_path_factory):
    """The tiny checkpoint with the sampling fields of an instruct model's generation config planted."""
    out = tmp_path_factory.mktemp("planted") / "tiny-with-penalty"
    shutil.copytree(tiny_qwen_dir, out)
    cfg = json.loads((out / "generation_config.json").read_text())
    cfg.update(do_sample=True, repetition_penalty=PENALTY, temperature=0.1, top_p=0.001, top_k=1)
    (out / "generation_config.json").write_text(json.dumps(cfg))
    return out


def _launcher(*args: str, python, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(
        ["bash", str(LAUNCHER), args[0], "--python", str(python), *args[1:]],  # before the "--" of vLLM's own args
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


def _greedy(port: int, **extra: float) -> str:
    from openai import OpenAI

    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="EMPTY", max_retries=0, timeout=120)
    reply = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": PROMPT}],
        temperature=0,
        max_tokens=48,
        extra_body=extra or None,
    )
    return reply.choices[0].message.content or ""


@pytest.mark.parametrize("mode", ["default", "auto"])
def test_served_requests_decode_as_in_training(mode, planted_model, vllm_venv_python, tmp_path):
    port, run_dir = free_port(), tmp_path / "vllm"
    where = ["--port", str(port), "--run-dir", str(run_dir)]
    flags = [] if mode == "default" else ["--generation-config", "auto"]
    start = _launcher(
        "start",
        "--cpu",
        "--model",
        str(planted_model),
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "4096",
        "--timeout",
        "300",
        *flags,
        *where,
        "--",
        "--dtype",
        "float32",
        "--max-num-seqs",
        "2",
        python=vllm_venv_python,
    )
    log = run_dir / f"vllm_{port}.log"
    try:
        assert start.returncode == 0, start.stdout + start.stderr + (log.read_text()[-3000:] if log.exists() else "")
        as_evaluated = _greedy(port)  # what insight_o3's vSearcher client sends: temperature 0, max_tokens
        as_trained = _greedy(port, repetition_penalty=1.0)
        penalised = _greedy(port, repetition_penalty=PENALTY)
    finally:
        _launcher("stop", *where, python=vllm_venv_python)
    assert penalised != as_trained, "control: the planted penalty must change this prompt's greedy output"
    if mode == "default":
        assert as_evaluated == as_trained
    else:  # vLLM's default applies the checkpoint's penalty: the released evaluation's serving
        assert as_evaluated == penalised
