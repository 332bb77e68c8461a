"""An agent plugin that calls no model (``AgentPlugin(calls_model=False)``) is not made to check a model endpoint
before the first sample: it runs with the model's URL unreachable, the judge the only endpoint asked."""

from __future__ import annotations

import socket

from insight_o3.evaluation import agent_registry
from insight_o3.evaluation.agent_registry import AgentPlugin
from insight_o3.protocol.attempt import Attempt, Solver
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb


class FirstLetter(Solver):
    """Answers every question "A" without asking anything."""

    async def solve(self, sample, n):
        return [Attempt("A", "stop") for _ in range(n)]

    async def aclose(self) -> None:
        pass


def _dead_url() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"  # nothing listens there any more


def test_a_plugin_that_calls_no_model_needs_no_model_endpoint(tmp_path, openai_server, monkeypatch, caplog):
    plugin = AgentPlugin(
        name="first_letter", protocol_version="test@1", description="answers A", build=lambda ctx: FirstLetter(),
        calls_model=False,
    )  # fmt: skip
    monkeypatch.setitem(agent_registry.BUILTIN, "first_letter", plugin)
    ann, img = eb.make_bench(tmp_path / "bench")
    judge = openai_server(eb.judge_script())
    argv = eb.evaluate_argv(ann, img, tmp_path / "out", _dead_url(), judge.base_url, "--agent", "first_letter")
    with caplog.at_level("INFO"):
        assert evaluate.main([*argv, "--api_key", "EMPTY", "--judge_api_key", "EMPTY"]) in (0, 1)
    assert "model: not asked (--agent first_letter calls no model)" in caplog.text
    assert "unreachable" not in caplog.text
    assert len(eb.read_records(tmp_path / "out" / "m/o3_bench")) == len(eb.QUESTIONS)
