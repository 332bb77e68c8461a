"""InSight-o3 end to end against two real scripted OpenAI-compatible servers (vReasoner, vSearcher)."""

from __future__ import annotations

import asyncio
import base64
import io
import json
from dataclasses import dataclass

import numpy as np
import pytest
from PIL import Image

from insight_o3.agents.config import InSightO3Config, ReasonerSettings, SearcherSettings
from insight_o3.agents.drivers import InSightO3, VSearcher
from insight_o3.agents.records import expand_messages
from insight_o3.agents.solver import InSightO3Solver
from insight_o3.base.redaction import Redactor
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.imaging.geometry import smart_resize
from insight_o3.imaging.images import ImageStore
from insight_o3.protocol import prompts
from insight_o3.protocol.attempt_stats import InSightO3Stats
from tests.support.openai_server import chat, error, last_user_text, user_message_text

W, H = 420, 300
BUDGET = 100 * 28 * 28  # < W*H: the vSearcher sees a real smart_resize of the image
SECRET = "sk-test-secret-0123456789"


@pytest.fixture
def img(tmp_path):
    p = tmp_path / "noise.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 256, (H, W, 3), dtype=np.uint8)).save(p)
    return str(p)


@pytest.fixture
def store():
    s = ImageStore(fmt="PNG", workers=2)
    yield s
    s.close()


def n_assistant(req):
    return sum(m["role"] == "assistant" for m in req["messages"])


def images_in(req, which=-1):
    """Decoded images of one message of a request (default: the last one)."""
    out = []
    for p in req["messages"][which]["content"]:
        if isinstance(p, dict) and p.get("type") == "image_url":
            data = p["image_url"]["url"].split(",", 1)[1]
            out.append(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB"))
    return out


def tool(b):
    return f'<think>zoom</think> <tool_call>{{"name": "image_zoom_in_tool", "arguments": {{"bbox_2d": {json.dumps(b)}}}}}</tool_call>'


def answer(b):
    return f"<think>there</think> <answer>{json.dumps(b)}</answer>"


def searcher_script(turns):
    """vSearcher replying ``turns[k]`` to its k-th turn of every episode."""
    return lambda req, call: chat(turns[min(n_assistant(req), len(turns) - 1)])


def reasoner_script(turns):
    return lambda req, call: chat(turns[min(n_assistant(req), len(turns) - 1)])


def build(openai_server, r_script, s_script, store, retries=0, **kw):
    rs, ss = openai_server(r_script), openai_server(s_script)
    searcher = VSearcher(
        make_client(Endpoint(api_key=SECRET, base_url=ss.base_url, timeout=10, max_retries=retries)),
        "vs",
        store,
        max_pixels=BUDGET,
        redactor=Redactor(SECRET),
    )
    system = InSightO3(
        make_client(Endpoint(api_key=SECRET, base_url=rs.base_url, timeout=10, max_retries=retries)),
        "vr",
        searcher,
        store,
        redactor=Redactor(SECRET),
        **kw,
    )
    return system, rs, ss


SEARCH = "<think>need detail</think><tool_call>region_description={the top-left block}</tool_call>"
FINAL = "<think>seen</think>Answer: \\boxed{B}"


def test_search_crop_answer_pixels_and_sizes(openai_server, img, store):
    mh, mw = smart_resize(H, W, max_pixels=BUDGET)
    model_box = [13, 27, 101, 88]
    system, rs, ss = build(
        openai_server,
        reasoner_script([SEARCH, FINAL]),
        searcher_script([tool([5, 5, 150, 120]), answer(model_box)]),
        store,
    )
    res = asyncio.run(system.answer(img, "Which letter?"))
    assert res.error is None and res.status == "answered" and res.answer == "B" and res.text == FINAL
    assert res.n_search_calls == 1 and res.n_search_not_found == 0 and res.finish_reason == "stop"
    # the vSearcher saw the image at exactly the smart_resize size, and the crop at its own
    first = images_in(ss.requests[0], 1)[0]
    assert first.size == (mw, mh)
    # the zoom-in tool's crop (the fork's image_zoom_in_tool): the box in the tool's image (the original
    # smart_resize-d with qwen's defaults), PIL-rounded, shown smart_resize-d with min_pixels 28*28
    th, tw = smart_resize(H, W)
    tb = [round(v * t / m) for v, t, m in zip((5, 5, 150, 120), (tw, th, tw, th), (mw, mh, mw, mh))]
    ch, cw = smart_resize(tb[3] - tb[1], tb[2] - tb[0], min_pixels=28 * 28, max_pixels=BUDGET)
    assert images_in(ss.requests[1])[0].size == (cw, ch)
    assert "<tool_response>" in last_user_text(ss.requests[1]).strip()
    assert last_user_text(ss.requests[1]).strip().endswith(prompts.VSEARCHER_TOOL_RESPONSE_PROMPT)
    # the vReasoner got the original-image region of the returned box (the fork's round()), enlarged
    # as the fork does for small crops: here the area is under 112x112, so it grows to that area
    sent = images_in(rs.requests[1])[0]
    original = Image.open(img).convert("RGB")
    expect = tuple(round(v * t / s) for v, t, s in zip(model_box, (W, H, W, H), (mw, mh, mw, mh)))
    cw, ch = expect[2] - expect[0], expect[3] - expect[1]
    assert min(cw, ch) >= 56 and cw * ch < 112 * 112
    k = (112 * 112 / (cw * ch)) ** 0.5
    up = (int(cw * k), int(ch * k))
    assert sent.size == up
    assert np.array_equal(np.asarray(sent), np.asarray(original.crop(expect).resize(up, Image.LANCZOS)))
    assert user_message_text(rs.requests[1]) == prompts.VREASONER_INFER_CONTINUE_PROMPT
    assert rs.requests[1]["messages"][-1]["content"][0]["type"] == "image_url"  # crop before the text
    assert images_in(rs.requests[0], 1)[0].size == (W, H)
    # records: compact, no pixels, the searcher sub-trajectory on the calling message
    dumped = json.dumps(res.trajectory)
    assert "base64" not in dumped and "data:image" not in dumped
    search = [m for m in res.trajectory if "search" in m][0]["search"]
    assert search["status"] == "found" and search["n_tool_calls"] == 1 and search["format_ok"]
    assert search["box_original"] == list(expect)  # resize_bbox: whole pixels
    full = expand_messages(res.trajectory)
    assert full[0]["content"][0]["text"] == prompts.VREASONER_INFER_SYSTEM_PROMPT
    # each view encoded once for the whole run
    assert store.stats["decoded"] == 1


def test_not_found_path(openai_server, img, store):
    system, rs, ss = build(
        openai_server, reasoner_script([SEARCH, FINAL]), searcher_script([answer([0, 0, 0, 0])]), store
    )
    res = asyncio.run(system.answer(img, "Q"))
    assert res.answer == "B" and res.n_search_calls == 1 and res.n_search_not_found == 1
    assert user_message_text(rs.requests[1]) == prompts.VREASONER_INFER_NOT_FOUND_PROMPT
    assert images_in(rs.requests[1]) == []


def test_limit_path_six_calls(openai_server, img, store):
    system, rs, ss = build(
        openai_server, reasoner_script([SEARCH] * 6 + [FINAL]), searcher_script([answer([10, 10, 60, 60])]), store
    )
    res = asyncio.run(system.answer(img, "Q"))
    assert res.answer == "B" and res.n_search_calls == 6 and rs.count == 7 and ss.count == 6
    texts = [user_message_text(r) for r in rs.requests[1:]]
    assert texts[:5] == [prompts.VREASONER_INFER_CONTINUE_PROMPT] * 5
    assert texts[5] == prompts.VREASONER_INFER_LIMIT_PROMPT


def test_vsearcher_tool_call_limit(openai_server, img, store):
    system, rs, ss = build(
        openai_server,
        reasoner_script([SEARCH, FINAL]),
        searcher_script([tool([0, 0, 50 + k, 50]) for k in range(6)] + [answer([1, 1, 40, 40])]),
        store,
    )
    res = asyncio.run(system.answer(img, "Q"))
    assert ss.count == 7 and user_message_text(ss.requests[6]).endswith(
        "</tool_response>\n" + prompts.VSEARCHER_LIMIT_PROMPT
    )
    assert [m for m in res.trajectory if "search" in m][0]["search"]["n_tool_calls"] == 6
    assert res.n_search_not_found == 0


def test_format_retry_path_train_mode_feedback(openai_server, img, store):
    turns = [
        "<think>hm</think>no action here",
        "<think>a</think><tool_feedback>NA</tool_feedback>" + SEARCH.split("</think>")[1],
        "<think>b</think><tool_feedback>unhelpful</tool_feedback>" + SEARCH.split("</think>")[1],
        "<think>c</think><tool_feedback>helpful</tool_feedback>Answer: \\boxed{C}",
    ]
    system, rs, ss = build(
        openai_server, reasoner_script(turns), searcher_script([answer([10, 10, 60, 60])]), store, mode="train"
    )
    res = asyncio.run(system.answer(img, "Q"))
    assert user_message_text(rs.requests[1]) == prompts.VREASONER_TRAIN_FORMAT_RETRY_PROMPT
    assert res.n_format_retries == 1 and res.answer == "C" and res.feedback == ["unhelpful", "helpful"]
    assert prompts.VREASONER_TRAIN_SYSTEM_PROMPT == rs.requests[0]["messages"][0]["content"]


@pytest.mark.parametrize(
    "bad",
    [
        "<think>x</think><tool_call>{\"name\": \"image_zoom_in_tool\", \"arguments\": {\"bbox_2d\": [1, 2,</tool_call>",
        tool([float("nan"), 1, 5, 9]).replace("NaN", "NaN"),
        tool([200, 200, 20, 20]),
        tool([3, 3, 3, 3]),
        '<tool_call>{"name": "crop", "arguments": {"bbox_2d": [1, 2, 30, 40]}}</tool_call>',
        answer([1, 2, 3]),
    ],
)
def test_malformed_vsearcher_output_ends_the_episode_without_answer(openai_server, img, store, bad):
    """The fork stops the vReasoner when the vSearcher's answer is not a valid box (``final_bbox`` None)."""
    system, rs, ss = build(openai_server, reasoner_script([SEARCH, FINAL]), searcher_script([bad]), store)
    res = asyncio.run(system.answer(img, "Q"))
    assert res.status == "search_invalid" and res.answer is None and not res.has_answer and res.error is None
    assert res.protocol_error and rs.count == 1
    assert [m for m in res.trajectory if "search" in m][0]["search"]["status"] == "invalid"


def test_api_failures_are_results_with_redacted_reasons(openai_server, img, store):
    system, rs, ss = build(
        openai_server,
        reasoner_script([SEARCH, FINAL]),
        lambda req, call: error(500, f"vsearcher down, key {SECRET}"),
        store,
    )
    res = asyncio.run(system.answer(img, "Q"))
    search = [m for m in res.trajectory if "search" in m][0]["search"]
    assert search["status"] == "failed" and SECRET not in search["error"] and "***" in search["error"]
    # a vSearcher lost to the API loses the episode (a critical failure, re-run by --retry_failed)
    assert res.status == "failed" and res.text is None and SECRET not in res.error and rs.count == 1
    system, rs, ss = build(
        openai_server, lambda req, call: error(503, f"bad {SECRET}"), searcher_script([answer([0, 0, 0, 0])]), store
    )
    res = asyncio.run(system.answer(img, "Q"))
    assert res.text is None and res.status == "failed" and res.error and SECRET not in res.error
    assert SECRET not in json.dumps(res.trajectory)


def test_programming_errors_raise_instead_of_failed_results(openai_server, img, store):
    """Only API, image and value errors become ``failed`` results; a bug (here a TypeError: a
    completion keyword the SDK does not take) propagates out of the driver."""
    system, rs, ss = build(
        openai_server,
        reasoner_script([SEARCH, FINAL]),
        searcher_script([answer([1, 1, 9, 9])]),
        store,
        completion_kwargs={"no_such_sdk_kwarg": 1},
    )
    with pytest.raises(TypeError, match="no_such_sdk_kwarg"):
        asyncio.run(system.answer(img, "Q"))
    assert rs.count == 0
    searcher = VSearcher(
        make_client(Endpoint(api_key=SECRET, base_url=ss.base_url, timeout=10, max_retries=0)),
        "vs",
        store,
        max_pixels=BUDGET,
        completion_kwargs={"no_such_sdk_kwarg": 1},
    )
    with pytest.raises(TypeError, match="no_such_sdk_kwarg"):
        asyncio.run(searcher.locate(img, "the top-left block"))
    # an unreadable image is an expected error: a failed result naming the file, not an exception
    bad = img.replace(".png", "-corrupt.png") if img.endswith(".png") else img + "-corrupt.png"
    with open(bad, "wb") as f:
        f.write(b"not an image")
    res = asyncio.run(searcher.locate(bad, "the top-left block"))
    assert res.status == "failed" and "corrupt" in res.error


@dataclass
class _Sample:
    image_path: str
    question: str
    options: str = "A. x\nB. y"


def test_solver_from_config_runs_n_episodes(openai_server, img, store):
    rs, ss = openai_server(reasoner_script([SEARCH, FINAL])), openai_server(searcher_script([answer([1, 1, 30, 30])]))
    config = InSightO3Config(
        reasoner=ReasonerSettings(model="vr", completion_kwargs={"max_tokens": 64}),
        searcher=SearcherSettings(model="vs", max_pixels=BUDGET),
        reasoner_api=Endpoint(base_url=rs.base_url, api_key=SECRET, timeout=10, max_retries=0),
        searcher_api=Endpoint(base_url=ss.base_url, timeout=10, max_retries=0),
    )

    async def go():
        solver = InSightO3Solver.build(config, store)
        try:
            return await solver.solve(_Sample(img, "Which?"), 3)
        finally:
            await solver.aclose()

    attempts = asyncio.run(go())
    assert len(attempts) == 3 and all(a.text == FINAL and a.error is None for a in attempts)
    assert all(isinstance(a.stats, InSightO3Stats) for a in attempts)
    assert all(a.stats.n_search_calls == 1 and a.stats.n_search_not_found == 0 for a in attempts)
    assert rs.count == 6 and ss.count == 3 and rs.requests[0]["max_tokens"] == 64
    assert ss.requests[0]["temperature"] == 0.0 and ss.requests[0]["max_tokens"] == 1024
    assert user_message_text(rs.requests[0]) == "Which?\nA. x\nB. y"


def test_records_of_a_345_question_run_stay_under_10_mb(openai_server, img, store):
    """A 6-call episode with verbose turns (vReasoner ~800 chars of reasoning per turn, vSearcher ~300
    chars, one zoom-in per vSearcher episode as InSight-o3-vS does) must fit 345 times in 10 MB."""
    r_think = "<think>" + "I compare the legend with the bars and need the exact label text here. " * 11 + "</think>"
    s_think = "<think>" + "The legend sits at the top right; zoom in to verify it. " * 5 + "</think>"
    r_turns = [
        r_think + "<tool_call>region_description={the legend box in the top-right corner of the chart}</tool_call>"
    ] * 6 + [r_think + "Answer: \\boxed{B}"]
    s_turns = [
        s_think + tool([10, 10, 120, 90])[len("<think>zoom</think>") :],
        s_think + "<answer>[12, 14, 118, 88]</answer>",
    ]
    system, rs, ss = build(openai_server, reasoner_script(r_turns), searcher_script(s_turns), store)
    res = asyncio.run(system.answer(img, "Which city has the largest share in 2019? " * 3 + "\nA. a\nB. b\nC. c"))
    assert res.n_search_calls == 6 and ss.count == 12
    record = json.dumps(
        {
            "key": "q1",
            "attempts": [
                {
                    "text": res.text,
                    "finish_reason": res.finish_reason,
                    "trajectory": res.trajectory,
                    "stats": res.stats.to_dict(),
                }
            ],
        }
    )
    assert "base64" not in record
    print(f"record size of a 6-call episode: {len(record)} bytes; x345 = {len(record) * 345 / 2**20:.2f} MiB")
    assert len(record) * 345 < 10 * 2**20, f"{len(record)} bytes per record"
