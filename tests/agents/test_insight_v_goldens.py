"""Insight-V's two-agent inference against goldens recorded by running the released ``infer_two_models.py``
(tests/golden/record_insight_v_goldens.py, tests/golden/README.md "Insight-V goldens"): every request of
:class:`~insight_o3.agents.insight_v_solver.InsightVSolver` through a local HTTP server replaying the case's replies
— the system message, the user text with the image where the release's ``<image>`` marker is, the sampling
settings — and the chain the summary agent saw, for MCQ and open questions, a reasoner reply without a
``<thoughts>`` span and one cut by the token limit."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from PIL import Image

from insight_o3.agents import insight_v as iv
from insight_o3.agents.insight_v_solver import InsightVSolver
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol.attempt_stats import InsightVStats
from insight_o3.protocol.statuses import InsightVAgent
from tests.golden.record_insight_v_goldens import make_image
from tests.support.openai_server import ScriptedOpenAIServer, chat

GOLDEN = json.loads((Path(__file__).resolve().parents[1] / "golden" / "insight_v.json").read_text(encoding="utf-8"))
CASES = GOLDEN["two_models"]["cases"]


def _recorded(case: dict, agent: str, what: str) -> list:
    return [e[what] for e in case["events"] if e.get("agent") == agent and what in e]


def _text_with_marker(content: list[dict]) -> tuple[str, list[tuple[int, int]]]:
    """A request's user content as the release's text: each image part as the ``<image>`` marker; the images'
    sizes."""
    text, sizes = "", []
    for p in content:
        if p["type"] == "text":
            text += p["text"]
        else:
            text += iv.IMAGE_TOKEN
            raw = base64.b64decode(p["image_url"]["url"].split(",", 1)[1])
            sizes.append(Image.open(io.BytesIO(raw)).size)
    return text, sizes


def test_the_constants_are_the_recorded_ones():
    case = CASES[0]
    assert iv.SYSTEM_PROMPT == case["system_message_default"]
    assert case["reason_question"] == case["origin_question"] + iv.REASON_SUFFIX
    assert case["summary_question"].startswith(iv.SUMMARY_PREFIX + case["origin_question"] + iv.REASON_PROCESS)
    for agent, kwargs in (("reasoner", iv.REASONER_KWARGS), ("summary", iv.SUMMARY_KWARGS)):
        (gen,) = _recorded(case, agent, "generate")
        assert gen["do_sample"] is True and gen["num_beams"] == 1  # sampling (temperature > 0), one beam: the API's
        assert (kwargs["temperature"], kwargs["top_p"], kwargs["max_tokens"]) == (
            gen["temperature"],
            gen["top_p"],
            gen["max_new_tokens"],
        )
        (skip,) = _recorded(case, agent, "skip_special_tokens")
        assert kwargs.get("extra_body", {}).get("skip_special_tokens", True) is skip


@pytest.mark.parametrize("n", range(len(CASES)), ids=[c["name"] for c in CASES])
def test_requests_match_the_release(n, tmp_path):
    case = CASES[n]
    path = tmp_path / "img.png"
    make_image(*case["size"], seed=n).save(path)
    replies = [case["reasoner_reply"], case["summary_reply"]]
    finish = "length" if case["name"].startswith("cut_by_token_limit") else "stop"

    def script(req: dict, call) -> object:
        return chat(replies[call.index], finish_reason=finish if call.index == 0 else "stop")

    options = None if not case["options"] else "\n".join(f"{'ABCDEF'[k]}. {o}" for k, o in enumerate(case["options"]))
    with ScriptedOpenAIServer(script) as srv:

        async def run():
            client = make_client(Endpoint(base_url=srv.base_url, api_key="k", max_retries=0))
            images = ImageStore(fmt="PNG", workers=1)
            try:
                solver = InsightVSolver(client, "reason", client, "summ", images)
                sample = SimpleNamespace(question=case["question"], options=options, image_path=str(path))
                return (await solver.solve(sample, 1))[0]
            finally:
                images.close()
                await client.close()

        attempt = asyncio.run(run())
        requests = list(srv.requests)
    assert iv.origin_question(case["question"], options) == case["origin_question"]  # ours (row IV2), pinned
    assert [r["model"] for r in requests] == ["reason", "summ"]
    for req, agent in zip(requests, ("reasoner", "summary")):
        system, user = _recorded(case, agent, "chat_template")
        assert req["messages"][0] == {"role": "system", "content": system[0]["content"]}
        text, sizes = _text_with_marker(req["messages"][1]["content"])
        assert text == user[0]["content"]
        assert text.count(iv.IMAGE_TOKEN) >= 1 and len(sizes) == 1
        assert [list(s) for s in sizes] == [e["image_sizes"][0] for e in case["events"] if "image_sizes" in e][:1]
        (gen,) = _recorded(case, agent, "generate")
        assert (req["temperature"], req["top_p"], req["max_tokens"], req["n"]) == (
            gen["temperature"],
            gen["top_p"],
            gen["max_new_tokens"],
            1,
        )
        (skip,) = _recorded(case, agent, "skip_special_tokens")
        assert req.get("skip_special_tokens", True) is skip
        assert len(req["messages"]) == 2
    assert iv.reason_chain(case["reasoner_reply"]) == case["reason_chain"]
    assert attempt.error is None and attempt.text == case["summary_reply"]
    assert isinstance(attempt.stats, InsightVStats)
    assert attempt.stats.chain == case["reason_chain"]
    assert attempt.stats.reasoner_finish_reason == finish
    want_form = {"no_thoughts_span": "missing", "close_without_open": "missing", "empty_reply": "missing"}
    want_form |= {"cut_by_token_limit": "unclosed"}
    assert attempt.stats.thoughts == want_form.get(case["name"].split("/")[0], "closed")
    assert case["printed"] == [[str([case["summary_reply"]])]]  # the release's answer: the summary's decoded text


def test_the_trajectory_names_each_agent():
    ep = iv.InsightVEpisode(
        "Q?", "A. x\nB. y", {"type": "image", "image": {"path": "p", "region": [0, 0, 2, 2], "size": [2, 2]}}
    )
    ep.note_chain("<thoughts>a</thoughts>", "stop")
    ep.note_summary("B", "stop")
    traj = ep.trajectory()
    assert [(m["role"], m["name"]) for m in traj] == [
        ("system", "reasoner"),
        ("user", "reasoner"),
        ("assistant", "reasoner"),
        ("system", "summary"),
        ("user", "summary"),
        ("assistant", "summary"),
    ]
    assert ep.stats().to_dict() == {
        "chain": iv.reason_chain("<thoughts>a</thoughts>"),
        "reasoner_finish_reason": "stop",
        "thoughts": "closed",
        "judge_also": {"chain": {"text": "a", "finish_reason": "stop"}},
        "requests": 2,
    }
    assert list(ep.stats(lost=InsightVAgent.SUMMARY).to_dict()) == [
        "chain",
        "reasoner_finish_reason",
        "thoughts",
        "lost",
    ]
