"""A third-party agent: a tiny package declaring an ``insight_o3.agents`` entry point, pip-installed into a fresh
venv (which sees this checkout's library), then run by ``evaluate --agent`` against scripted endpoints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from tests.support import eval_bench as eb
from tests.support.openai_server import chat

REPO = Path(__file__).resolve().parents[2]

PLUGIN = '''
"""A toy tool agent: asks once for the left half of the image, then answers with the model's last reply."""

from insight_o3.agents.tool_agents import AgentDefaults, Ask, Finish
from insight_o3.evaluation.agent_registry import tool_agent
from insight_o3.imaging.images import ImageRef
from insight_o3.protocol.trajectory import image_part, message


class HalfSession:
    def __init__(self, question, options, image, size):
        self.image, self.size = image, size
        full = ImageRef(image, (0.0, 0.0, float(size[0]), float(size[1])), size)
        self.messages = [message("user", image_part(full), "HALF-AGENT " + question)]

    def step(self, reply, finish_reason=None):
        self.messages.append(message("assistant", reply))
        if "ZOOM" in reply and len(self.messages) < 4:
            w, h = self.size
            half = ImageRef(self.image, (0.0, 0.0, float(w // 2), float(h)), (w // 2, h))
            self.messages.append(message("user", image_part(half), "the left half"))
            return Ask(zoomed=True)
        return Finish(reply)


PLUGIN = tool_agent("half", "half@1", "toy", HalfSession, AgentDefaults(completion_kwargs={"temperature": 0.5}))
'''


@pytest.fixture(scope="module")
def plugin_venv(tmp_path_factory):
    root = tmp_path_factory.mktemp("plugin")
    pkg = root / "half_agent"
    (pkg / "half_agent").mkdir(parents=True)
    (pkg / "half_agent" / "__init__.py").write_text(PLUGIN)
    (pkg / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=61"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "half-agent"
            version = "0.1"

            [project.entry-points."insight_o3.agents"]
            half = "half_agent:PLUGIN"
            """
        )
    )
    wheels = root / "wheels"  # built with this interpreter's setuptools, installed into a fresh venv
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(pkg)],
        check=True,
        capture_output=True,
    )
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the fresh venv sees this interpreter's installed packages (openai, pillow ...) through a .pth file
    Path(site, "dev_venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "--no-index", *map(str, wheels.glob("*.whl"))],
        check=True,
        capture_output=True,
    )
    return py


def test_installed_plugin_agent_runs(plugin_venv, tmp_path, openai_server):
    def script(req, call):
        turns = sum(m["role"] == "assistant" for m in req["messages"])
        q = eb.marker(json.dumps(req["messages"][0]))
        return chat("ZOOM please" if turns == 0 else f"<answer>{eb.QUESTIONS[q][3]}</answer>")

    main_srv = openai_server(script)
    judge_srv = openai_server(eb.judge_script())
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    out = tmp_path / "out"
    argv = eb.evaluate_argv(ann, img_dir, out, main_srv.base_url, judge_srv.base_url, "--agent", "half")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    r = subprocess.run(
        [str(plugin_venv), "-m", "insight_o3.scripts.evaluate", *argv], env=env, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr[-3000:]
    run = out / "m/o3_bench"
    assert json.loads((run / "run_card.json").read_text())["agent"] == {"name": "half", "protocol": "half@1"}
    assert all(req["temperature"] == 0.5 for req in main_srv.requests)
    assert len(main_srv.requests) == 2 * len(eb.QUESTIONS)
    rec = eb.read_records(run, 0)[0]
    crops = [p["image"] for m in rec["eval_result"]["trajectory"] for p in m["content"] if p.get("type") == "image"]
    assert crops[1]["region"] == [0, 0, 48, 64]
    # the agent is unknown to an interpreter without the package
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv], env=env, capture_output=True, text=True
    )
    assert r.returncode == 2 and "no agent 'half'" in r.stderr
