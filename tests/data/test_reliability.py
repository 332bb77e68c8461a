"""The C.1 MLLM reliability check (``check_reliability``) against a real scripted server: two checker
MLLMs must both answer right, with the evaluation's solver and judge; error records retried on the
next run (only the lost answers asked again); secrets never written."""

from __future__ import annotations

import json

from insight_o3.data.reliability import CHECKED_SOURCES, parse_checker
from insight_o3.scripts import check_reliability
from insight_o3.scripts.check_reliability import main
from tests.support.reliability_bench import KEY, QWEN_KEY, make_pool, script


def _run(pool, out, srv, monkeypatch) -> int:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("QWEN_KEY", QWEN_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    return main(
        [
            "--source_pool",
            str(pool),
            "--out_dir",
            str(out),
            "--checker",
            f"qwen,{srv.base_url},QWEN_KEY",
            "--checker",
            "nano",
            "--judge_model",
            "judge",
            "--max_retries",
            "0",
            "--no_progress",
        ]
    )


def test_two_checkers_must_both_answer_right_and_errors_resume(tmp_path, openai_server, monkeypatch, capsys):
    pool, out = make_pool(tmp_path), tmp_path / "out"
    state = {"fail_checker": ("qwen", "i4"), "fail_judge": "i5"}
    srv = openai_server(script(state))
    assert _run(pool, out, srv, monkeypatch) == 1  # two items lost to API errors
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    # honest counts: 5 to check, 3 of them checked (1 passed, 2 discarded), 2 lost; the OCR item kept unchecked
    assert summary == {
        "items": 6,
        "to_check": 5,
        "checked": 3,
        "passed": 1,
        "discarded": 2,
        "errors": 2,
        "kept_unchecked": 1,
        "kept": 2,
    }
    recs = {r["sample_key"]: r for r in map(json.loads, (out / "reliability.jsonl").read_text().splitlines())}
    assert "viscot/textvqa/i0" not in recs  # the OCR stream is not checked
    assert recs["viscot/gqa/i1"]["reliable"] is True
    assert recs["viscot/gqa/i2"]["reliable"] is False and recs["viscot/gqa/i2"]["checks"]["nano"]["status"] == "wrong"
    i3 = recs["vstar/i3"]
    assert i3["reliable"] is False and list(i3["checks"]) == ["qwen"]  # stopped at the first wrong checker
    # the original's extract flow: an answer other than the GT letter goes to the MCQ extraction judge
    assert i3["checks"]["qwen"]["judge_method"] == "judge" and i3["checks"]["qwen"]["extracted_answer"] == "B"
    assert "error" in recs["viscot/v7w/i4"] and recs["viscot/v7w/i4"]["checks"]["qwen"]["fail_stage"] == "solver"
    i5 = recs["viscot/flickr30k/i5"]
    assert (
        "error" in i5 and i5["checks"]["qwen"]["status"] == "correct" and i5["checks"]["nano"]["fail_stage"] == "judge"
    )
    kept = [json.loads(x)["id"] for x in (out / "pool_reliable.jsonl").read_text().splitlines()]
    assert kept == ["viscot/textvqa/i0", "viscot/gqa/i1"]
    assert ("nano", "i3") not in state["asked"]

    # second run, API healthy: only the lost answer (qwen on i4) is asked again; i5's stored answer re-judged
    state.clear()
    assert _run(pool, out, srv, monkeypatch) == 0
    checker_calls = [(m, k) for m, k in state["asked"] if m != "judge"]
    assert sorted(checker_calls) == [("nano", "i4"), ("qwen", "i4")]
    kept = [json.loads(x)["id"] for x in (out / "pool_reliable.jsonl").read_text().splitlines()]
    assert kept == ["viscot/textvqa/i0", "viscot/gqa/i1", "viscot/v7w/i4", "viscot/flickr30k/i5"]
    lines = (out / "reliability.jsonl").read_text().splitlines()
    assert len(lines) == 5  # compacted: one record per checked item
    # a third run asks nothing
    state.clear()
    assert _run(pool, out, srv, monkeypatch) == 0 and "asked" not in state
    for f in out.iterdir():
        text = f.read_text()
        assert KEY not in text and QWEN_KEY not in text
    # per-checker credentials: qwen's requests carried QWEN_KEY, nano's and the judge's the default key
    auth = {(r["model"], h.get("authorization")) for r, h in zip(srv.requests, srv.headers)}
    assert ("qwen", f"Bearer {QWEN_KEY}") in auth and ("nano", f"Bearer {KEY}") in auth
    assert ("judge", f"Bearer {KEY}") in auth


def test_checker_spec_and_cli(tmp_path, capsys):
    assert parse_checker("gpt-5-nano") == ("gpt-5-nano", None, "OPENAI_API_KEY")
    assert parse_checker("q,http://h/v1,K") == ("q", "http://h/v1", "K")
    assert "viscot/gqa" in CHECKED_SOURCES and "viscot/textvqa" not in CHECKED_SOURCES
    (tmp_path / "bad.jsonl").write_text('{"id": "a"}\n')
    assert (
        check_reliability.main(
            ["--source_pool", str(tmp_path / "bad.jsonl"), "--out_dir", str(tmp_path / "o"), "--checker", "m"]
        )
        == 2
    )
    assert "bad.jsonl:1" in capsys.readouterr().err
