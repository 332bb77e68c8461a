"""Baselines you can watch without a GPU: the keyless demo's scripted model speaks each registered agent's protocol
(DeepEyes, Mini-o3, Pixel-Reasoner, and a plugin that declares ``demo_reply``), so ``evaluate --agent NAME`` against
the demo's endpoints zooms, answers in the protocol's format and the report shows its crops; ``evaluate --help``
lists every agent; the leaderboard entry names its agent."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.agents.tool_agents import DemoTurn
from insight_o3.demo.endpoints import DemoScripts
from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer
from insight_o3.evaluation.agent_registry import BUILTIN, agent_names
from insight_o3.scripts import evaluate, export, make_demo_bench, report

BASELINES = ("deepeyes", "mini_o3", "pixel_reasoner")


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A small demo benchmark and the demo's scripted model and judge on 127.0.0.1."""
    root = tmp_path_factory.mktemp("demo_baselines")
    bench = root / "bench"
    argv = ["--output_dir", str(bench), "--num_images", "2", "--num_questions", "4", "--min_side", "600"]
    assert make_demo_bench.main([*argv, "--seed", "3"]) == 0
    scripts = DemoScripts.from_metadata(bench / "metadata.jsonl", accuracy=0.5, searched_accuracy=1.0)
    with ScriptedOpenAIServer(scripts.model) as model, ScriptedOpenAIServer(scripts.judge) as judge:
        yield root, bench, model, judge


def _evaluate(demo, agent: str) -> Path:
    root, bench, model, judge = demo
    argv = [
        "--agent", agent, "--model", "scripted-demo-model", "--eval_name", f"demo/{agent}",
        "--ann_file", str(bench / "metadata.jsonl"), "--img_dir", str(bench), "--output_dir", str(root / "eval"),
        "--api_base_url", model.base_url, "--api_key", "EMPTY", "--judge_api_base_url", judge.base_url,
        "--judge_api_key", "EMPTY", "--no_progress", "--image_workers", "0",
    ]  # fmt: skip
    assert evaluate.main(argv) == 0
    return root / "eval" / "demo" / agent


@pytest.mark.parametrize("agent", BASELINES)
def test_each_baseline_zooms_answers_in_its_format_and_the_report_shows_its_crops(demo, agent):
    run = _evaluate(demo, agent)
    records = [json.loads(line) for line in (run / "trial_0" / "eval_records.jsonl").read_text().splitlines()]
    assert len(records) == 4
    for r in records:
        er = r["eval_result"]
        assert er["stats"]["zooms"] == 1, er["stats"]  # one crop of the evidence, then the answer
        assert "stop_reason" not in er["stats"], er["stats"]
        assert er["status"] == "correct"  # searched_accuracy 1.0: the crop was seen
        crops = [p for m in er["trajectory"] for p in m["content"] if isinstance(p, dict) and p.get("type") == "image"]
        assert len(crops) == 2
    page = run / "report.html"
    assert report.main([str(run), "--output_file", str(page)]) == 0
    html = page.read_text(encoding="utf-8")
    assert html.count("<img") >= 4 * 2  # every sample shows the image and its crop


def test_the_demo_speaks_a_plugins_declared_protocol_and_nothing_else_speaks_for_it():
    said: list[DemoTurn] = []

    def mine(turn: DemoTurn) -> str | None:
        said.append(turn)
        return f"<look>{list(turn.box)}</look>" if turn.system == "MY PROTOCOL" and turn.turns == 0 else None

    row = {
        "question_id": "q1", "question": "Which bar is tallest?", "answer": "B", "img_width": 100, "img_height": 80,
        "target_layouts": [1], "layout_infos": {"1": {"bbox": [10, 20, 30, 40]}},
    }  # fmt: skip
    scripts = DemoScripts([row], speakers=[mine])
    with ScriptedOpenAIServer(scripts.model) as srv:
        import openai

        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        messages = [{"role": "system", "content": "MY PROTOCOL"}, {"role": "user", "content": row["question"]}]
        reply = client.chat.completions.create(model="m", messages=messages)
        assert reply.choices[0].message.content == "<look>[10.0, 20.0, 30.0, 40.0]</look>"
        plain = client.chat.completions.create(model="m", messages=messages[1:])  # no system prompt: a single model
        assert "<look>" not in (plain.choices[0].message.content or "")
    assert said[0].size == (100, 80) and said[0].tag.startswith("(demo ref q1@")


def test_every_builtin_baseline_declares_its_demo_behaviour_and_evaluate_help_lists_every_agent(capsys):
    assert all(BUILTIN[a].demo_reply is not None for a in BASELINES)
    with pytest.raises(SystemExit):
        evaluate.main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name in agent_names():
        assert name in text


def test_the_leaderboard_entry_names_its_agent(demo, tmp_path):
    run = _evaluate(demo, "mini_o3")
    out = tmp_path / "export"
    assert export.main([str(run), "--output_dir", str(out)]) == 0
    board = json.loads((out / "leaderboard.json").read_text())
    assert board["agent"] == {"name": "mini_o3", "protocol": BUILTIN["mini_o3"].protocol_version}


SWEEP = Path(__file__).resolve().parents[2] / "insight_o3" / "scripts" / "examples" / "sweep_agents.sh"


def test_the_agents_sweep_covers_three_agents_on_six_benchmarks():
    env = {k: v for k, v in os.environ.items() if not k.endswith("API_KEY")}
    r = subprocess.run(["bash", str(SWEEP)], capture_output=True, text=True, env={**env, "DRY_RUN": "1"}, timeout=60)
    assert r.returncode == 0, r.stderr
    cmds = [line for line in r.stdout.splitlines() if "insight_o3.scripts.evaluate" in line]
    assert len(cmds) == 18
    seen = {(c.split("--agent ")[1].split()[0], c.split("--benchmark ")[1].split()[0]) for c in cmds}
    assert {a for a, _ in seen} == set(BASELINES) and len({b for _, b in seen}) == 6 and len(seen) == 18
    for c in cmds:
        agent, bench = c.split("--agent ")[1].split()[0], c.split("--benchmark ")[1].split()[0]
        want = "32" if agent == "mini_o3" else "1" if bench == "mme_realworld_lite" else "3"
        assert f"--num_trials {want}" in c and "--api_key EMPTY" in c
    assert "gather_eval_results" in r.stdout.splitlines()[-1]


def test_the_agents_sweep_runs_keyless_against_the_demo_endpoints(demo, tmp_path):
    root, bench, model, judge = demo
    data = tmp_path / "data"
    (data / "O3-Bench").mkdir(parents=True)
    (data / "O3-Bench" / "test").symlink_to(bench)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "JUDGE_", "INSIGHT_O3_"))}
    env |= {"PYTHON": sys.executable, "INSIGHT_O3_DATA_ROOT": str(data), "BENCHMARKS": "o3_bench"}
    env |= {"OUTPUT_DIR": str(tmp_path / "eval"), "MINI_O3_TRIALS": "1", "JUDGE_API_KEY": "EMPTY"}
    env |= {"JUDGE_API_BASE_URL": judge.base_url, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    env |= {f"{a.upper()}_BASE_URL": model.base_url for a in BASELINES}
    r = subprocess.run(["bash", str(SWEEP)], capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    table = (tmp_path / "eval" / "agents.md").read_text()
    for agent in BASELINES:
        assert f"+{agent}" in table
        recs = [f for f in (tmp_path / "eval").rglob("eval_records.jsonl") if f"+{agent}/o3_bench/" in str(f)]
        lines = [json.loads(x) for f in recs for x in f.read_text().splitlines()]
        assert lines and all(x["eval_result"]["stats"]["zooms"] == 1 for x in lines)
