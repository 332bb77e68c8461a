"""The collage difficulty filter (``generate_collages filter``) against a real scripted server:
pass@3 with the evaluation's solver and judge, error records retried, SIGKILL then resume."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from PIL import Image

from insight_o3.data.schema import CollageRow, TileRow
from insight_o3.scripts import filter_difficulty as difficulty
from tests.support.openai_server import chat, error, last_user_text, request_text

REPO = Path(__file__).resolve().parents[2]
KEY = "sk-difficulty-SECRET-13572468"
TAG = re.compile(r"\[(c\d+)\]")

# item -> (options, answer, vReasoner answers of the 3 attempts)
ITEMS = {
    "c0": (None, "red", ["blue", "blue", "blue"]),  # 0 of 3 (judge model says <wrong>)
    "c1": (None, "red", ["blue", "a crimson red", "blue"]),  # 1 of 3 (judge model says <correct>)
    "c2": (["cat", "dog", "bird"], "B", ["B", "B", "B"]),  # 3 of 3 (rule: the span is the letter)
    "c3": (["cat", "dog", "bird"], "C", ["A", "A", "(B)"]),  # 0 of 3 (judge extracts the letters)
    "c4": (None, "7", ["8", "8", "8"]),  # vReasoner API error on the first run
    "c5": (None, "blue", ["navy", "navy", "navy"]),  # judge API error on the first run
}


def make_collages(out_dir: Path, items: dict) -> list[dict]:
    """Rows in the collages.jsonl schema with small real images."""
    (out_dir / "images").mkdir(parents=True)
    rows = []
    for i, (key, (options, answer, _)) in enumerate(items.items()):
        image = f"images/collage-{i:08d}.jpg"
        Image.new("RGB", (64, 48), (40 * i % 255, 90, 160)).save(out_dir / image)
        tile = TileRow(
            id=3,
            source_id=f"src-{i}",
            image=f"/pool/{i}.jpg",
            box_on_canvas=[0, 0, 64, 48],
            crop_box_in_source=[0, 0, 64, 48],
            scale=[1.0, 1.0],
            label_box=[0, 0, 8, 8],
            is_target=True,
        )
        rows.append(
            CollageRow(
                sample_key=key,
                index=i,
                image=image,
                width=64,
                height=48,
                question=f"Look at image #3 in the collage. [{key}] What is shown?",
                source_question=f"[{key}] What is shown?",
                options=options,
                answer=answer,
                target_bbox=[10.0, 10.0, 20.0, 20.0],
                target_tile_id=3,
                tiles=[tile],
                source_ids=[f"src-{i}"],
                target_source_id=f"src-{i}",
                source="test/pool",
                seed=0,
                attempts=1,
            ).to_dict()
        )
    (out_dir / "collages.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def script(state: dict, items: dict = ITEMS):
    """vReasoner (model "vr") and judge (model "judge") on one endpoint; ``state`` switches faults."""

    def reply(req, call):
        text = request_text(req)
        key = TAG.search(text).group(1)
        if req["model"] == "vr":
            if state.get("fail_reasoner") == key:
                return error(400, "scripted vReasoner failure")
            texts = [f"<think>looking</think><answer>{a}</answer>" for a in items[key][2]]
            if call.n == 1:  # one attempt per request: the k-th request of this item gets the k-th answer
                k = state.setdefault("asked", {}).get(key, 0)
                state["asked"][key] = k + 1
                texts = [texts[k % len(texts)]]
            return chat(texts[: call.n])
        prompt = last_user_text(req)
        if prompt.startswith("You are given a question and a model-generated response"):  # open-answer extraction
            return chat(prompt.split("Model Response: ", 1)[1].split("\n\n### Output", 1)[0])
        if prompt.startswith("You are given a multiple-choice question"):  # option-letter extraction
            return chat(prompt.split("Model Answer: ", 1)[1].split("  \n", 1)[0].strip("() "))
        if "GT Answer:" in prompt:  # the paper's judge prompt
            if state.get("fail_judge") == key:
                return error(400, "scripted judge failure")
            gt = prompt.split("GT Answer:", 1)[1].split("\n", 1)[0].strip()
            model_answer = prompt.split("Model Answer:", 1)[1]
            return chat("<correct>" if gt in model_answer else "<wrong>")
        return error(400, f"unexpected judge prompt: {prompt[:80]}")

    return reply


def argv(out_dir: Path, url: str, *extra) -> list[str]:
    return [
        "--out_dir",
        str(out_dir),
        "--model",
        "vr",
        "--judge_model",
        "judge",
        "--base_url",
        url,
        "--api_key",
        KEY,
        "--max_retries",
        "0",
        "--no_progress",
        *extra,
    ]


def records(out_dir: Path) -> dict[str, dict]:
    path = out_dir / "difficulty.jsonl"
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    recs = {}
    for line in lines:
        try:
            rec = json.loads(line)
        except ValueError:  # a torn last line
            continue
        recs[rec["sample_key"]] = rec
    return recs


def hard_keys(out_dir: Path) -> list[str]:
    return [json.loads(line)["sample_key"] for line in (out_dir / "collages_hard.jsonl").read_text().splitlines()]


def reasoner_keys(reqs: list[dict]) -> list[str]:
    return [TAG.search(request_text(r)).group(1) for r in reqs if r["model"] == "vr"]


def test_pass_at_3_keeps_unsolved_and_retries_only_failed_items(openai_server, tmp_path):
    out = tmp_path / "collages"
    rows = make_collages(out, ITEMS)
    state = {"fail_reasoner": "c4", "fail_judge": "c5"}
    srv = openai_server(script(state))
    assert difficulty.main(argv(out, srv.base_url)) == 1  # two collages are still errors
    recs = records(out)
    assert {k: r.get("solved") for k, r in recs.items()} == {
        "c0": False,
        "c1": True,
        "c2": True,
        "c3": False,
        "c4": None,
        "c5": None,
    }
    assert [a["status"] for a in recs["c1"]["attempts"]] == ["wrong", "correct", "wrong"]
    assert recs["c1"]["attempts"][1]["judge_method"] == "judge"
    assert [a["status"] for a in recs["c2"]["attempts"]] == ["correct"] * 3
    assert [a["extracted_answer"] for a in recs["c3"]["attempts"]] == ["A", "A", "B"]
    assert "400" in recs["c4"]["error"] and recs["c5"]["attempts"][0]["fail_stage"] == "judge"
    # all attempts of a collage in one request with n=3, the evaluation's think prompt and the image
    vr = [r for r in srv.requests if r["model"] == "vr"]
    assert sorted(reasoner_keys(vr)) == sorted(ITEMS) and all(r["n"] == 3 for r in vr)
    assert vr[0]["messages"][0]["role"] == "system" and "<answer>" in vr[0]["messages"][0]["content"]
    img = [p["image_url"] for p in vr[0]["messages"][1]["content"] if p["type"] == "image_url"]
    assert len(img) == 1 and img[0]["url"].startswith("data:image/") and img[0]["detail"] == "high"
    c2 = next(r for r in vr if "[c2]" in request_text(r))
    assert "A. cat\nB. dog\nC. bird" in request_text(c2)
    assert hard_keys(out) == ["c0", "c3"]
    assert [json.loads(l) for l in (out / "collages_hard.jsonl").read_text().splitlines()] == [rows[0], rows[3]]

    state.clear()
    first = srv.count
    assert difficulty.main(argv(out, srv.base_url)) == 0
    again = srv.requests[first:]
    assert reasoner_keys(again) == ["c4"]  # c5's stored responses are only re-judged
    assert {TAG.search(request_text(r)).group(1) for r in again} == {"c4", "c5"}
    recs = records(out)
    assert recs["c4"]["solved"] is False and recs["c5"]["solved"] is False and "error" not in recs["c5"]
    assert [a["extracted_answer"] for a in recs["c5"]["attempts"]] == ["navy"] * 3
    assert hard_keys(out) == ["c0", "c3", "c4", "c5"]
    assert len((out / "difficulty.jsonl").read_text().splitlines()) == len(ITEMS)  # compacted: one per key
    for f in ("difficulty.jsonl", "collages_hard.jsonl"):
        assert KEY not in (out / f).read_text()


def test_separate_attempt_requests_same_verdicts(openai_server, tmp_path):
    out = tmp_path / "collages"
    make_collages(out, {k: ITEMS[k] for k in ("c0", "c1", "c3")})
    srv = openai_server(script({}))
    assert difficulty.main(argv(out, srv.base_url, "--separate_attempt_requests")) == 0
    vr = [r for r in srv.requests if r["model"] == "vr"]
    assert len(vr) == 9 and all(r.get("n") == 1 for r in vr)  # n always sent, as the original
    assert hard_keys(out) == ["c0", "c3"]
    assert sorted(a["status"] for a in records(out)["c1"]["attempts"]) == ["correct", "wrong", "wrong"]


def test_sigkill_mid_run_resumes_only_unfinished(openai_server, tmp_path):
    # 8 multiple-choice collages (rule-judged); odd ones are solved on one attempt of three
    items = {f"c{i}": (["cat", "dog", "bird"], "B", ["A", "B", "C"] if i % 2 else ["A", "C", "A"]) for i in range(8)}
    out = tmp_path / "collages"
    make_collages(out, items)
    # the vReasoner endpoint answers two collages, then holds; the judge has its own endpoint
    srv = openai_server(script({}, items), block_after=2)
    judge = openai_server(script({}, items))
    env = {k: v for k, v in os.environ.items() if not k.endswith(("_API_KEY", "_BASE_URL"))}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "insight_o3.scripts.generate_collages",
            "filter",
            *argv(out, srv.base_url, "--judge_base_url", judge.base_url, "--concurrency", "1"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        srv.wait_blocked(1, timeout=30)
        end = time.time() + 30
        while time.time() < end and len(records(out)) < 2:
            time.sleep(0.02)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = set(records(out))
    assert 2 <= len(done) < len(items), done
    assert not (out / "collages_hard.jsonl").exists()
    with open(out / "difficulty.jsonl", "ab") as f:  # the worst case too: a torn half-written line
        f.write(b'{"sample_key": "c7", "solv')

    srv.release()
    first = srv.count
    assert difficulty.main(argv(out, srv.base_url)) == 0
    again = reasoner_keys(srv.requests[first:])
    assert sorted(again) == sorted(set(items) - done)  # each unfinished collage asked exactly once
    assert len((out / "difficulty.jsonl").read_text().splitlines()) == len(items)
    assert hard_keys(out) == ["c0", "c2", "c4", "c6"]  # as an uninterrupted run
