"""The collage difficulty filter (``generate_collages filter``) against a real scripted server:
pass@3 with the evaluation's solver and judge, error records retried, SIGKILL then resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from insight_o3.scripts import filter_difficulty as difficulty
from tests.support.difficulty_bench import ITEMS, KEY, TAG, argv, make_collages, script
from tests.support.openai_server import request_text
from tests.support.records import by_key
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


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
    recs = by_key(out / "difficulty.jsonl")
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
    recs = by_key(out / "difficulty.jsonl")
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
    assert sorted(a["status"] for a in by_key(out / "difficulty.jsonl")["c1"]["attempts"]) == [
        "correct",
        "wrong",
        "wrong",
    ]


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
        wait_until(lambda: len(by_key(out / "difficulty.jsonl")) >= 2, 30, "2 records")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    done = set(by_key(out / "difficulty.jsonl"))
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
