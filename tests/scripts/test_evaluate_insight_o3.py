"""InSight-o3 mode of ``evaluate`` (vReasoner + vSearcher) under the same fault-injection and
SIGKILL/resume tests as single-model mode (tests/scripts/test_evaluate.py), on the same scripted benchmark.

Every episode: the vReasoner asks for one region, the vSearcher answers a box, the vReasoner then
gives a boxed final answer (:data:`FINAL`), judged by the fork's in-loop check (the default judge flow
in this mode), so every episode makes exactly one search call and the expected metrics are known:
correct q0 q2 q5 q6, wrong q1 q4 q7, and q3 — whose replies are truncated and never box an answer —
runs out of format retries and has no answer (``invalid``, never judged).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from insight_o3.scripts import evaluate
from tests.scripts.test_evaluate import JUDGE_KEY, MAIN_KEY, REPO, _no_secrets, _wait_total_lines
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat, error, request_text

SEARCH_KEY = "sk-vsearch-SECRET-7777wxyz"
EVAL = "m/o3_bench"
FINAL = {  # marker: the vReasoner's final turn (the judge script decides q1 q2 q4-q7, see eval_bench.JUDGE)
    "q0": ("<think>seen</think>Answer: \\boxed{C}", "stop"),
    "q1": ("So the result is \\boxed{(D)}.", "stop"),
    "q2": ("The road bends north: \\boxed{the first one}", "stop"),
    "q3": ("Let me count the stations one by one: 1, 2, 3, 4", "length"),
    "q4": ("\\boxed{cannot tell}", "stop"),
    "q5": ("\\boxed{white}", "stop"),
    "q6": ("The distance is \\boxed{forty-two kilometres}.", "stop"),
    "q7": ("\\boxed{blue}", "stop"),
}
EXPECTED_STATS = {"correct": 4, "wrong": 3, "incomplete": 0, "invalid": 1, "failed": 0, "total": 8}


def _is_first_turn(req: dict) -> bool:
    return not any(m["role"] == "assistant" for m in req["messages"])


def reasoner_script(delay: float = 0.0, faults: bool = False, server_ref: dict | None = None):
    """Turn 1: one region description; turn 2: the benchmark's scripted answer for the question.
    With ``faults``, the first request of each question fails as in the single-model test."""
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(request_text(req))
        first = _is_first_turn(req)
        if faults and first:
            with lock:
                k = seen[q] = seen.get(q, 0) + 1
            if k == 1:
                if q == "q3":  # slower than --client_timeout
                    return Reply(body=chat("<tool_call>region_description={x}</tool_call>").body, delay=2.5)
                fault = eb.first_request_fault(q, call, server_ref)
                if fault is not None:
                    return fault
        if first:
            reply = chat(
                f"<think>need a closer look</think><tool_call>region_description={{the legend of [{q}]}}</tool_call>"
            )
        else:
            text, finish = FINAL[q]
            reply = chat(text, finish_reason=finish)
        reply.delay = delay
        return reply

    return script


def searcher_script(faults: bool = False, down: set | None = None):
    """Answers a box; with ``faults``, q5's first request gets a 503 (recovered by the SDK); every
    request for a marker in ``down`` gets a 500 (the search is lost, and so is the episode)."""
    seen: dict[str, int] = {}
    lock = threading.Lock()
    down = down if down is not None else set()

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(request_text(req))
        with lock:
            k = seen[q] = seen.get(q, 0) + 1
        if faults and q == "q5" and k == 1:
            return error(503, "warming up", retry_after=0.1)
        if q in down:
            return error(500, "searcher down")
        return chat("<think>the legend is at the top left</think> <answer>[2, 2, 40, 30]</answer>")

    return script


def _argv(out: Path, ann, img_dir, reasoner_url: str, searcher_url: str, judge_url: str, *extra) -> list[str]:
    return [
        "--eval_name",
        EVAL,
        "--model",
        "scripted-reasoner",
        "--api_base_url",
        reasoner_url,
        "--api_key",
        MAIN_KEY,
        "--judge_model",
        "scripted-judge",
        "--judge_api_base_url",
        judge_url,
        "--judge_api_key",
        JUDGE_KEY,
        "--vsearcher_model",
        "scripted-searcher",
        "--vsearcher_api_base_url",
        searcher_url,
        "--vsearcher_api_key",
        SEARCH_KEY,
        "--ann_file",
        str(ann),
        "--img_dir",
        str(img_dir),
        "--output_dir",
        str(out),
        "--no_progress",
        "--max_retries",
        "3",
        *extra,
    ]


def _records(out: Path, k: int) -> list[dict]:
    return eb.read_records(out / EVAL, k)


def _metrics(out: Path, k: int) -> dict:
    return eb.read_metrics(out / EVAL, k)


def _assert_expected(out: Path, trials: int, searches_found: float = 1.0):
    for k in range(trials):
        m = _metrics(out, k)
        assert m["overall_stats"] == EXPECTED_STATS
        assert m["overall_accuracy"] == pytest.approx(0.5)
        assert m["critical_failure_ratio"] == 0
        assert m["has_answer"] == pytest.approx(7 / 8)
        assert m["category_accuracy"] == pytest.approx(eb.EXPECTED_CATEGORY_ACC)
        recs = _records(out, k)
        assert [r["sample_key"] for r in recs] == list(eb.QUESTIONS)  # exactly one record per pair
        assert all(r["eval_result"]["stats"]["n_search_calls"] == 1 for r in recs)
        assert m["mean_search_calls"] == pytest.approx(1.0)
        assert (out / EVAL / f"trial_{k}" / "done").exists()


def _no_keys(out: Path):
    _no_secrets(out)
    for p in out.rglob("*"):
        if p.is_file():
            assert SEARCH_KEY.encode() not in p.read_bytes(), p


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def test_insight_o3_fault_injection_nothing_lost(bench, tmp_path, openai_server):
    ref = {}
    reasoner = ref["srv"] = openai_server(reasoner_script(faults=True, server_ref=ref))
    down = {"q7"}
    searcher = openai_server(searcher_script(faults=True, down=down))
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = _argv(
        out, *bench, reasoner.base_url, searcher.base_url, judge.base_url, "--num_trials", "2", "--client_timeout", "1"
    )
    assert evaluate.main(argv) == 1  # INCOMPLETE: some sample-trials failed

    failed = []
    for k in range(2):
        recs = {r["sample_key"]: r["eval_result"] for r in _records(out, k)}
        assert len(recs) == 8
        failed += [(q, r["fail_reason"]) for q, r in recs.items() if r["status"] == "failed"]
    # the malformed body and the non-retryable 400 each cost exactly one episode, and so does the
    # vSearcher that stays down for q7 (its episode cannot go on); the rest recovered
    assert sorted(q for q, _ in failed) == ["q4", "q6", "q7", "q7"]
    reason = dict(failed)
    assert "***" in reason["q6"] and MAIN_KEY not in reason["q6"] and "vSearcher" in reason["q7"]
    assert sum(_metrics(out, k)["critical_failure_ratio"] for k in range(2)) == pytest.approx(4 / 8)
    _no_keys(out)

    down.clear()  # the vSearcher is back
    first_turns = sum(_is_first_turn(r) for r in reasoner.requests)
    assert evaluate.main(argv + ["--retry_failed"]) == 0
    assert sum(_is_first_turn(r) for r in reasoner.requests) - first_turns == 4  # only the 4 failed episodes
    for k in range(2):
        m = _metrics(out, k)
        assert m["overall_stats"] == EXPECTED_STATS and m["critical_failure_ratio"] == 0
        recs = {r["sample_key"]: r["eval_result"] for r in _records(out, k)}
        assert list(recs) == list(eb.QUESTIONS)
        # q3 never boxes an answer: after 5 replies in its round (the fork's validation setting) the
        # episode has no answer; it is not judged and is not a critical failure
        q3 = recs["q3"]
        assert q3["stats"]["status"] == "format_failed" and q3["stats"]["n_format_retries"] == 4
        assert q3["status"] == "invalid" and not q3["has_answer"] and q3["judge_outputs"] == []
    _no_keys(out)


def test_insight_o3_sigkill_then_resume(bench, tmp_path, openai_server):
    # the vReasoner answers 8 turns and holds the rest: the first two questions finish (concurrency 2,
    # both trials of a question run together, two turns each), then the run is stuck until killed
    slow = openai_server(reasoner_script(), block_after=8)
    searcher = openai_server(searcher_script())
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    kwargs = ["--vsearcher_chat_completion_kwargs", '{"max_tokens": 77}']  # fixed by the first run
    argv = _argv(
        out,
        *bench,
        slow.base_url,
        searcher.base_url,
        judge.base_url,
        "--num_trials",
        "2",
        "--concurrency",
        "2",
        *kwargs,
    )
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "insight_o3.scripts.evaluate", *argv],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        slow.wait_blocked(2, timeout=90)
        _wait_total_lines([out / EVAL / f"trial_{k}" / "eval_records.jsonl" for k in range(2)], 1, timeout=90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open(out / EVAL / "trial_1" / "eval_records.jsonl", "ab") as f:
        f.write(b'{"sample_key": "q7", "eval_result": {"sta')  # a torn half-written line
    done = sum(len(_records_lines(out, k)) for k in range(2))
    assert 0 < done < 16 and not (out / EVAL / "trial_0" / "done").exists()

    fast = openai_server(reasoner_script())
    argv_fast = _argv(
        out,
        *bench,
        fast.base_url,
        searcher.base_url,
        judge.base_url,
        "--num_trials",
        "2",
        *kwargs,
    )
    n_search_before = searcher.count
    assert evaluate.main(argv_fast) == 0
    resumed = searcher.requests[n_search_before:]
    assert resumed and all(r["max_tokens"] == 77 and r["temperature"] == 0 for r in resumed)
    assert sum(_is_first_turn(r) for r in fast.requests) == 16 - done  # only unfinished pairs re-run
    _assert_expected(out, 2)
    summary = json.loads((out / EVAL / "summary_metrics.json").read_text())
    assert summary["overall_accuracy"] == {"mean": 0.5, "std": 0.0}
    _no_keys(out)


def _records_lines(out: Path, k: int) -> list[str]:
    """Complete record lines (a torn last line without its newline is not a record)."""
    data = (out / EVAL / f"trial_{k}" / "eval_records.jsonl").read_text()
    return [x for x in data.split("\n")[:-1] if x.strip()]
