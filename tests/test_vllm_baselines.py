"""The baseline agents (and Insight-V's two agents and its data engine's generator) against a real vLLM server on CPU
serving the tiny random-weight Qwen2.5-VL (the suite's shared server, tests/conftest.py ``shared_tiny_vllm``, also
tests/test_vllm_e2e.py's): whatever the random model says goes through
each protocol and every episode reaches a verdict; the judge is a scripted server. Replies are capped at 64 tokens
(the protocols' own caps exceed the tiny server's context). What vLLM checks here: that it takes each protocol's
requests as they are (Insight-V: ``skip_special_tokens``, ``repetition_penalty``, a ``seed`` per chain, the image in
the middle of the summary prompt)."""

from __future__ import annotations

import json
import re

import pytest

from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, ScriptedOpenAIServer, chat, last_user_text

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return eb.make_demo_bench_cli(tmp_path_factory.mktemp("bench"), min_side=500, max_side=800)


def _judge(req: dict, call: Call):
    return chat("<correct>" if "GT Answer:" in last_user_text(req) else "A")


@pytest.mark.parametrize("agent", ["deepeyes", "mini_o3", "pixel_reasoner", "insight_v"])
def test_baseline_agent_on_tiny_vllm(agent, tiny_vllm_server, bench, tmp_path):
    ann = next(bench.rglob("*.jsonl"))
    posts = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', tiny_vllm_server.log_tail(10**8)))
    with ScriptedOpenAIServer(_judge) as judge:
        argv = [
            "--agent", agent, "--model", "tiny", "--api_base_url", tiny_vllm_server.base_url, "--api_key", "EMPTY",
            "--judge_model", "judge", "--judge_api_base_url", judge.base_url, "--judge_api_key", "j",
            "--ann_file", str(ann), "--img_dir", str(ann.parent), "--eval_name", agent,
            "--output_dir", str(tmp_path), "--chat_completion_kwargs", '{"max_tokens": 64}', "--no_progress",
        ]  # fmt: skip
        assert evaluate.main(argv) == 0
    recs = eb.read_records(tmp_path / agent, 0)
    assert recs and all(r["eval_result"]["status"] in ("correct", "wrong", "invalid", "incomplete") for r in recs)
    sent = sum(r["eval_result"]["stats"].get("requests", 0) for r in recs)
    after = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', tiny_vllm_server.log_tail(10**8)))
    assert after - posts == sent >= len(recs)
    card = json.loads((tmp_path / agent / "run_card.json").read_text())
    assert card["agent"]["name"] == agent


def test_reasoning_data_generator_on_tiny_vllm(tiny_vllm_server, bench, tmp_path):
    """The data engine's generate step against vLLM: every request accepted (the random model's steps are no JSON,
    so every chain is malformed after its retry: 2 tries x (3 failed steps + the final answer) requests)."""
    from insight_o3.scripts import build_reasoning_data

    ann = next(bench.rglob("*.jsonl"))
    posts = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', tiny_vllm_server.log_tail(10**8)))
    argv = [
        "generate", "--output_dir", str(tmp_path / "w"), "--ann_file", str(ann), "--img_dir", str(ann.parent),
        "--model", "tiny", "--api_base_url", tiny_vllm_server.base_url, "--api_key", "EMPTY", "--num_chains", "1",
        "--chat_completion_kwargs", '{"max_tokens": 64}', "--no_progress", "--image_workers", "0",
    ]  # fmt: skip
    assert build_reasoning_data.main(argv) == 0
    recs = [json.loads(x) for x in (tmp_path / "w" / "generate" / "records.jsonl").read_text().splitlines()]
    assert recs and all(r["status"] in ("ok", "malformed") for r in recs)
    sent = sum(r.get("requests", 0) + sum(a["requests"] for a in r["attempts"]) for r in recs)
    after = len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', tiny_vllm_server.log_tail(10**8)))
    assert after - posts == sent >= len(recs)
