"""``evaluate --agent deepeyes|mini_o3|pixel_reasoner`` end to end against scripted endpoints that speak each
protocol (valid, out-of-range and malformed tool calls, a reply with neither call nor answer, the protocols' limits),
and the agent registry."""

from __future__ import annotations

import base64
import io
import json

import pytest
from PIL import Image

from insight_o3.agents import deepeyes, mini_o3, pixel_reasoner
from insight_o3.evaluation.agent_registry import BUILTIN, agent_names, get_agent
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat

# marker: the first reply (None: answer at once)
FIRST = {
    "q0": '<think>look</think><tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [10, 8, 50.6, 40]}}</tool_call>',
    "q1": "<think>look</think><tool_call>{'name': 'image_zoom_in_tool', 'arguments': {'bbox_2d': [1, 2, 3]}}</tool_call>",
    "q2": '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [500, 500, 600, 600]}}</tool_call>',
    "q3": "<think>still thinking</think>",  # neither a call nor an answer: sent again, 11 requests in all
    "q4": '<tool_call>{"name": "image_zoom_in_tool", "arguments": {"bbox_2d": [-20, -5, 40, 30]}}</tool_call>',
    "q6": "<tool_call>not json at all</tool_call>",
}


def _table_script(table: dict[str, list[str]], answer: str, tokens=lambda q, turn: 10):
    """A scripted model: question ``q``'s replies from ``table[q]`` by the number of assistant turns in the request,
    then ``answer`` formatted with the ground truth; ``tokens(q, turn)``: the prompt tokens the reply reports."""

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(json.dumps(req["messages"][1]))
        turns = sum(m["role"] == "assistant" for m in req["messages"])
        replies = table.get(q, [])
        if turns < len(replies):
            return chat(replies[turns], prompt_tokens=tokens(q, turns))
        return chat(answer.format(eb.QUESTIONS[q][3]))

    return script


def _script():  # a reply without a call or an answer is not added: q3's request is always the first one
    return _table_script({q: [r] for q, r in FIRST.items()}, "<think>seen</think> <answer>{}</answer>")


def _png_size(url: str) -> tuple[int, int]:
    return Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def _run_agent(agent: str, script, bench, tmp_path, openai_server):
    """``evaluate --agent AGENT`` on the demo benchmark against ``script`` and the scripted judge: the run
    directory, its records by sample and the model's requests by question; the run card names the agent."""
    main_srv = openai_server(script)
    judge_srv = openai_server(eb.judge_script())
    argv = eb.evaluate_argv(*bench, tmp_path / "out", main_srv.base_url, judge_srv.base_url, "--agent", agent)
    assert evaluate.main(argv) == 0
    run = tmp_path / "out" / "m/o3_bench"
    recs = {r["sample_key"]: r for r in eb.read_records(run, 0)}
    assert set(recs) == set(eb.QUESTIONS)
    card = json.loads((run / "run_card.json").read_text())
    assert card["agent"] == {"name": agent, "protocol": get_agent(agent).protocol_version}
    by_q: dict[str, list[dict]] = {}
    for req in main_srv.requests:
        by_q.setdefault(eb.marker(json.dumps(req["messages"][1])), []).append(req)
    return run, recs, by_q


def test_evaluate_agent_deepeyes_scripted(bench, tmp_path, openai_server):
    run, recs, by_q = _run_agent("deepeyes", _script(), bench, tmp_path, openai_server)
    assert deepeyes.PROTOCOL_VERSION == get_agent("deepeyes").protocol_version
    assert json.loads((run / "args.json").read_text())["agent"] == "deepeyes"
    # every request: the release's settings, its system prompt, [image, text] first user message
    for q, reqs in by_q.items():
        for req in reqs:
            assert req["temperature"] == 0.0 and req["max_tokens"] == 10240 and req["stop"] == ["<|im_end|>"]
            assert req["messages"][0] == {"role": "system", "content": deepeyes.SYSTEM_PROMPT}
            first = req["messages"][1]["content"]
            assert [p["type"] for p in first] == ["image_url", "text"]
            assert first[1]["text"].startswith(f"Question: [{q}] What does the figure show?\nOptions: \n")
            assert first[1]["text"].endswith(deepeyes.USER_PROMPT_V2)
            assert _png_size(first[0]["image_url"]["url"]) == Image.open(bench[1] / "images" / eb.QUESTIONS[q][0]).size

    # q0: a valid zoom; the crop is [10, 8, 51, 40] (PIL rounds), sent at the release's smart_resize of 40.6 x 32
    zoom_turn = by_q["q0"][1]["messages"]
    assert zoom_turn[2] == {"role": "assistant", "content": FIRST["q0"]}
    parts = zoom_turn[3]["content"]
    assert [p.get("text", p["type"]) for p in parts] == [
        "<tool_response>",
        "image_url",
        deepeyes.USER_PROMPT_V2,
        "</tool_response>",
    ]
    assert _png_size(parts[1]["image_url"]["url"]) == (84, 56)  # 40.6x32: 28x28 < 4*28*28, so scaled up, ceil
    crops = [
        p["image"] for m in recs["q0"]["eval_result"]["trajectory"] for p in m["content"] if p.get("type") == "image"
    ]
    assert [c["region"] for c in crops][1] == [10, 8, 51, 40]
    assert recs["q0"]["eval_result"]["stats"]["zooms"] == 1
    assert recs["q0"]["eval_result"]["response"] == "C"

    # q2 (a box wholly outside the image): a black crop, and the loop goes on (as the release's PIL crop does)
    assert len(by_q["q2"]) == 2 and "stop_reason" not in recs["q2"]["eval_result"]["stats"]
    black = by_q["q2"][1]["messages"][3]["content"][1]["image_url"]["url"]
    assert Image.open(io.BytesIO(base64.b64decode(black.split(",", 1)[1]))).getextrema() == ((0, 0),) * 3
    # q1 (3 coordinates), q6 (no literal): the episode ends, the reply is the answer
    for q in ("q1", "q6"):
        er = recs[q]["eval_result"]
        assert len(by_q[q]) == 1
        assert er["stats"]["stop_reason"].startswith("tool call error"), er["stats"]
        assert er["response"] == FIRST[q]
    # q3: sent again unchanged until the 11th request, then the whole last reply is the answer
    assert len(by_q["q3"]) == deepeyes.MAX_REQUESTS
    assert all(r["messages"] == by_q["q3"][0]["messages"] for r in by_q["q3"])
    assert "no </answer>" in recs["q3"]["eval_result"]["stats"]["stop_reason"]
    # q4: a box partly outside the image: the record's region is clamped to it (the pixels are the release's: black
    # padding, docs/fidelity.md B8)
    crops = [
        p["image"] for m in recs["q4"]["eval_result"]["trajectory"] for p in m["content"] if p.get("type") == "image"
    ]
    assert crops[1]["region"] == [0, 0, 40, 30]
    # no pixels in the records
    assert b"base64" not in (run / "trial_0" / "eval_records.jsonl").read_bytes()


@pytest.mark.parametrize(
    "reply, box, size",
    [
        ('<tool_call>{"name": "x", "arguments": {"bbox_2d": [0, 0, 28, 28]}}</tool_call>', (0, 0, 28, 28), (56, 56)),
        ('<tool_call>{"arguments": {"bbox_2d": [2.5, 3.5, 90, 60]}}</tool_call>', (2, 4, 90, 60), (84, 56)),
        ("<tool_call>{'arguments': {'bbox_2d': (0, 0, 96, 64), 'label': 'all'}}</tool_call>", (0, 0, 96, 64), (84, 56)),
    ],
)
def test_deepeyes_zoom_rules(reply, box, size):
    assert deepeyes.parse_zoom(reply, (96, 64)) == (tuple(float(v) for v in box), box, size)


@pytest.mark.parametrize(
    "reply",
    [
        "<tool_call>[1, 2]</tool_call>",
        '<tool_call>{"arguments": {"bbox_2d": [5, 5, 1, 9]}}</tool_call>',
        '<tool_call>{"arguments": {"bbox_2d": [5, 5, 5, 9]}}</tool_call>',  # zero width: smart_resize divides by 0
        '<tool_call>{"arguments": {"bbox_2d": ["1", 2, 3, 4]}}</tool_call>',
        '<tool_call>{"arguments": {"bbox_2d": [0, 0, 1e999, 4]}}</tool_call>',
        "<tool_call>__import__('os').getcwd()</tool_call>",  # the release evals this; we never run model output
    ],
)
def test_deepeyes_malformed_calls(reply):
    with pytest.raises(deepeyes.ToolCallError):
        deepeyes.parse_zoom(reply, (96, 64))


def test_registry_lists_the_builtin_agents():
    assert {"single_model", "insight_o3", "deepeyes", "mini_o3", "pixel_reasoner"} <= set(agent_names())
    assert get_agent("pixel_reasoner").alpha == "white"
    assert get_agent("deepeyes") is BUILTIN["deepeyes"]
    with pytest.raises(KeyError, match="known: .*deepeyes"):
        get_agent("no_such_agent")


def test_unknown_agent_is_a_usage_error(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        evaluate.main(eb.evaluate_argv(*bench, tmp_path, "http://127.0.0.1:9/v1", None, "--agent", "nope"))
    assert e.value.code == 2
    assert "no agent 'nope'" in capsys.readouterr().err


MINI_FIRST = {
    "q0": '<think>zoom</think> <grounding>{"bbox_2d": [0.1, 0.2, 0.6, 0.9], "source": "original_image"}</grounding>',
    "q1": '<think>zoom</think> <grounding>{"bbox_2d": [0.1, 0.2, 0.6], "source": "original_image"}</grounding>',
    "q2": '<grounding>{"bbox_2d": [0.1, 0.2, 0.6, 0.9], "source": "observation_3"}</grounding>',
    "q4": '<grounding>{"bbox_2d": [0.1, 0.2, 0.6, 0.9], "source": "original_image"}',  # stop string dropped
}


def _mini_script():
    table = {q: [r] for q, r in MINI_FIRST.items()} | {"q3": ["<think>no answer tags</think> it is C"]}
    return _table_script(table, "<think>seen</think> <answer>{}</answer>")


def test_evaluate_agent_mini_o3_scripted(bench, tmp_path, openai_server):
    run, recs, by_q = _run_agent("mini_o3", _mini_script(), bench, tmp_path, openai_server)
    for reqs in by_q.values():
        for req in reqs:
            assert req["temperature"] == 1.0 and req["top_p"] == 1.0 and req["max_tokens"] == 8192
            assert req["stop"] == ["</grounding>"] and req["top_k"] == -1 and req["include_stop_str_in_output"]
            assert req["messages"][0] == {"role": "system", "content": mini_o3.SYSTEM_PROMPT}
    # q0: the crop of the original (96x64): relative box -> int pixels [9, 12, 57, 57], shown at the rollout's size
    second = by_q["q0"][1]["messages"]
    assert [p["type"] for p in second[3]["content"]] == ["text", "image_url", "text"]
    assert second[3]["content"][0]["text"].startswith(
        "After the above Action 0, here is the the zoom-in image (Observation 1)"
    )
    crops = [
        p["image"] for m in recs["q0"]["eval_result"]["trajectory"] for p in m["content"] if p.get("type") == "image"
    ]
    assert crops[1]["region"] == [9, 12, 57, 57]
    assert (
        tuple(crops[1]["size"])
        == mini_o3.crop_view_steps(48, 45)[-1]
        == _png_size(second[3]["content"][1]["image_url"]["url"])
    )
    # q1, q2: the error goes back to the model, which then answers
    for q, info in (
        ("q1", "Error Information: ."),
        ("q2", 'Error in predicting the source observation: "observation_3"'),
    ):
        err = by_q[q][1]["messages"][3]["content"]
        assert info in err[0]["text"] and err[0]["text"].endswith(mini_o3.ERROR_PROMPT)
    # q3: no <answer>: no answer (the release scores 0)
    assert (
        recs["q3"]["eval_result"]["response"] == ""
        and "no <answer>" in recs["q3"]["eval_result"]["stats"]["stop_reason"]
    )
    # q4: a server that drops the stop string: the reply is kept with it
    assert by_q["q4"][1]["messages"][2]["content"].endswith("</grounding>")
    assert recs["q0"]["eval_result"]["response"] == "C"


def _pr_call(box, target=1, name="crop_image_normalized") -> str:
    args = json.dumps({"bbox_2d": box, "target_image": target})
    return f'I will look closer.\n<tool_call>\n{{"name": "{name}", "arguments": {args}}}\n</tool_call>'


#: marker: the replies in order (the last is repeated); q7's requests report a context past the release's budget
PR_REPLIES = {
    "q0": [_pr_call([0.2, 0.3, 0.5, 0.6])],
    "q1": ["<tool_call>\n{not json}\n</tool_call>"],
    "q2": [_pr_call([0.1, 0.1, 0.4, 0.4], name="zoom_in")],
    "q4": [_pr_call([100, 50, 400, 300]), _pr_call([0.0, 0.0, 0.5, 0.5], 2)],
    "q5": [_pr_call([0.1, 0.1, 0.6, 0.6])] * 6,
    "q6": [_pr_call([0.1, 0.1, 0.6, 0.6]) + "\n"],
    "q7": [_pr_call([0.1, 0.1, 0.6, 0.6])] * 3,
}


def _pr_script():
    return _table_script(
        PR_REPLIES, "Seen it.\n\n\\boxed{{{}}}", tokens=lambda q, turn: 12100 if q == "q7" and turn == 1 else 10
    )


def test_evaluate_agent_pixel_reasoner_scripted(bench, tmp_path, openai_server):
    import pyarrow.parquet as pq

    from insight_o3.scripts import export
    from insight_o3.viz.report import build_report

    run, recs, by_q = _run_agent("pixel_reasoner", _pr_script(), bench, tmp_path, openai_server)
    assert get_agent("pixel_reasoner").protocol_version == pixel_reasoner.PROTOCOL_VERSION
    for q, reqs in by_q.items():
        for req in reqs:  # the release's greedy settings, system prompt, [image, question + vcot] first message
            assert (req["temperature"], req["top_p"], req["max_tokens"], req["top_k"]) == (0.0, 1.0, 2048, -1)
            assert req["stop"] == pixel_reasoner.STOP and req["skip_special_tokens"] is False
            assert req["messages"][0] == {"role": "system", "content": pixel_reasoner.SYSTEM_PROMPT}
            first = req["messages"][1]["content"]
            assert [p["type"] for p in first] == ["image_url", "text"]
            assert first[1]["text"].startswith(f"[{q}] What does the figure show?")
            assert first[1]["text"].endswith(pixel_reasoner.USER_SUFFIX)
            w, h = Image.open(bench[1] / "images" / eb.QUESTIONS[q][0]).size
            assert _png_size(first[0]["image_url"]["url"]) == pixel_reasoner.first_view((w, h)).size

    def crops(q):
        traj = recs[q]["eval_result"]["trajectory"]
        return [p["image"] for m in traj for p in m["content"] if p.get("type") == "image"][1:]

    # q0: a relative box, padded by 0.1 and cropped from the 560x392 view of the 96x64 image, resized by smart_resize
    assert pixel_reasoner.first_view((96, 64)).size == (560, 392)
    turn = by_q["q0"][1]["messages"]
    assert turn[2] == {"role": "assistant", "content": PR_REPLIES["q0"][0]}
    parts = turn[3]["content"]
    assert [p["type"] for p in parts] == ["text", "image_url"]
    shown = _png_size(parts[1]["image_url"]["url"])
    assert parts[0]["text"] == pixel_reasoner.CROP_TEXT.format(*shown)
    box = pixel_reasoner.crop_box((560, 392), [0.2, 0.3, 0.5, 0.6])
    assert box == (56, 78, 336, 274)
    assert [c["region"] for c in crops("q0")] == [[9.6, 12.73, 57.6, 44.73]]  # the box in original pixels
    er = recs["q0"]["eval_result"]
    assert er["stats"]["zooms"] == 1 and er["status"] == "correct"
    # q1, q2: the release's execution error goes back to the model, which then answers
    assert by_q["q1"][1]["messages"][3]["content"][0]["text"].startswith("\nExecution error:\nExpecting property name")
    assert by_q["q2"][1]["messages"][3]["content"][0]["text"] == "\nExecution error:\n'zoom_in'\n"
    assert recs["q1"]["eval_result"]["status"] == "correct"
    # q3: no call: one request, the reply is the answer
    assert len(by_q["q3"]) == 1
    # q4: pixel coordinates, then a crop of that crop (target_image 2)
    assert len(crops("q4")) == 2 and recs["q4"]["eval_result"]["stats"]["zooms"] == 2
    inner, outer = crops("q4")[1]["region"], crops("q4")[0]["region"]
    assert outer[0] <= inner[0] < inner[2] <= outer[2] and outer[1] <= inner[1] < inner[3] <= outer[3]
    # q5: the fifth call ends the episode (4 calls answered); the call is the answer
    assert len(by_q["q5"]) == 5 and "tool call after 4 calls" in recs["q5"]["eval_result"]["stats"]["stop_reason"]
    assert recs["q5"]["eval_result"]["response"] == PR_REPLIES["q5"][0]
    # q6: a newline after </tool_call>: not a call
    assert len(by_q["q6"]) == 1 and recs["q6"]["eval_result"]["stats"]["zooms"] == 0
    # q7: the second request went past 12*1024-200 tokens: its call is not run
    assert len(by_q["q7"]) == 2 and recs["q7"]["eval_result"]["stats"]["zooms"] == 1
    # no pixels in the records; the report shows every crop; export writes every trajectory
    assert b"base64" not in (run / "trial_0" / "eval_records.jsonl").read_bytes()
    page = build_report(run, max_samples=0, thumb_px=64)
    assert "pixel_reasoner" in page
    n_crops = sum(len(crops(q)) for q in recs)
    assert n_crops == 1 + 0 + 0 + 2 + 4 + 0 + 1
    assert page.count("<img") >= n_crops + len(recs)
    assert all(f"crop {k}" in page for k in range(1, 5))  # q5's four crops, numbered on the source image
    assert export.main([str(run), "--out_dir", str(tmp_path / "export")]) == 0
    assert pq.read_table(tmp_path / "export" / "trajectories.parquet").num_rows == len(recs)
