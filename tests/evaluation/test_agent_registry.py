"""A third-party agent: a tiny package declaring an ``insight_o3.agents`` entry point, laid out as pip installs it
(the module and its ``.dist-info``) on the interpreter's path, then run by ``evaluate --agent`` against scripted
endpoints: discovery through ``importlib.metadata`` is ours to prove; how pip lays a package out is pip's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
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
def plugin_site(tmp_path_factory):
    """A directory laid out as pip installs the package into site-packages: the module and its ``.dist-info`` with
    ``entry_points.txt``; ``importlib.metadata`` finds distributions on any ``sys.path`` entry, so putting the
    directory on ``PYTHONPATH`` is an install as discovery sees it (no venv or wheel build needed)."""
    site = tmp_path_factory.mktemp("plugin_site")
    (site / "half_agent").mkdir()
    (site / "half_agent" / "__init__.py").write_text(PLUGIN)
    info = site / "half_agent-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: half-agent\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text('[insight_o3.agents]\nhalf = half_agent:PLUGIN\n')
    (info / "top_level.txt").write_text("half_agent\n")
    return site


def test_installed_plugin_agent_runs(plugin_site, tmp_path, openai_server):
    def script(req, call):
        turns = sum(m["role"] == "assistant" for m in req["messages"])
        q = eb.marker(json.dumps(req["messages"][0]))
        return chat("ZOOM please" if turns == 0 else f"<answer>{eb.QUESTIONS[q][3]}</answer>")

    main_srv = openai_server(script)
    judge_srv = openai_server(eb.judge_script())
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    out = tmp_path / "out"
    argv = eb.evaluate_argv(ann, img_dir, out, main_srv.base_url, judge_srv.base_url, "--agent", "half")
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{plugin_site}"}
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv], env=env, capture_output=True, text=True
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
    env["PYTHONPATH"] = str(REPO)
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv], env=env, capture_output=True, text=True
    )
    assert r.returncode == 2 and "no agent 'half'" in r.stderr
