"""InSight-o3 mode of ``evaluate`` (vReasoner + vSearcher) under the same fault-injection and
SIGKILL/resume tests as single-model mode (tests/scripts/test_evaluate.py), on the same scripted benchmark
(the scripts and the expected metrics: :mod:`tests.support.insight_o3_bench`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb
from tests.support import insight_o3_bench as io3
from tests.support.stacks import REPO
from tests.support.waiting import wait_for_lines


def _assert_expected(out: Path, trials: int, searches_found: float = 1.0):
    for k in range(trials):
        m = eb.read_metrics(out / eb.EVAL, k)
        assert m["overall_stats"] == io3.EXPECTED_STATS
        assert m["overall_accuracy"] == pytest.approx(0.5)
        assert m["critical_failure_ratio"] == 0
        assert m["has_answer"] == pytest.approx(7 / 8)
        assert m["category_accuracy"] == pytest.approx(eb.EXPECTED_CATEGORY_ACC)
        recs = eb.read_records(out / eb.EVAL, k)
        assert [r["sample_key"] for r in recs] == list(eb.QUESTIONS)  # exactly one record per pair
        assert all(r["eval_result"]["stats"]["n_search_calls"] == 1 for r in recs)
        assert m["mean_search_calls"] == pytest.approx(1.0)
        assert (out / eb.EVAL / f"trial_{k}" / "done").exists()


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def test_insight_o3_fault_injection_nothing_lost(bench, tmp_path, openai_server):
    ref = {}
    reasoner = ref["srv"] = openai_server(io3.reasoner_script(faults=True, server_ref=ref))
    down = {"q7"}
    searcher = openai_server(io3.searcher_script(faults=True, down=down))
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = io3.argv(
        out, *bench, reasoner.base_url, searcher.base_url, judge.base_url, "--num_trials", "2", "--client_timeout", "1"
    )
    assert evaluate.main(argv) == 1  # INCOMPLETE: some sample-trials failed

    failed = []
    for k in range(2):
        recs = {r["sample_key"]: r["eval_result"] for r in eb.read_records(out / eb.EVAL, k)}
        assert len(recs) == 8
        failed += [(q, r["fail_reason"]) for q, r in recs.items() if r["status"] == "failed"]
    # the malformed body and the non-retryable 400 each cost exactly one episode, and so does the
    # vSearcher that stays down for q7 (its episode cannot go on); the rest recovered
    assert sorted(q for q, _ in failed) == ["q4", "q6", "q7", "q7"]
    reason = dict(failed)
    assert "***" in reason["q6"] and eb.MAIN_KEY not in reason["q6"] and "vSearcher" in reason["q7"]
    assert sum(eb.read_metrics(out / eb.EVAL, k)["critical_failure_ratio"] for k in range(2)) == pytest.approx(4 / 8)
    eb.assert_no_secrets(out, io3.SEARCH_KEY)

    down.clear()  # the vSearcher is back
    first_turns = sum(io3.is_first_turn(r) for r in reasoner.requests)
    assert evaluate.main(argv + ["--retry_failed"]) == 0
    assert sum(io3.is_first_turn(r) for r in reasoner.requests) - first_turns == 4  # only the 4 failed episodes
    for k in range(2):
        m = eb.read_metrics(out / eb.EVAL, k)
        assert m["overall_stats"] == io3.EXPECTED_STATS and m["critical_failure_ratio"] == 0
        recs = {r["sample_key"]: r["eval_result"] for r in eb.read_records(out / eb.EVAL, k)}
        assert list(recs) == list(eb.QUESTIONS)
        # q3 never boxes an answer: after 5 replies in its round (the fork's validation setting) the
        # episode has no answer; it is not judged and is not a critical failure
        q3 = recs["q3"]
        assert q3["stats"]["status"] == "format_failed" and q3["stats"]["n_format_retries"] == 4
        assert q3["status"] == "invalid" and not q3["has_answer"] and q3["judge_outputs"] == []
    eb.assert_no_secrets(out, io3.SEARCH_KEY)


def test_insight_o3_sigkill_then_resume(bench, tmp_path, openai_server):
    # the vReasoner answers 8 turns and holds the rest: the first two questions finish (concurrency 2,
    # both trials of a question run together, two turns each), then the run is stuck until killed
    slow = openai_server(io3.reasoner_script(), block_after=8)
    searcher = openai_server(io3.searcher_script())
    judge = openai_server(eb.judge_script())
    out = tmp_path / "out"
    kwargs = ["--vsearcher_chat_completion_kwargs", '{"max_tokens": 77}']  # fixed by the first run
    argv = io3.argv(
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
        wait_for_lines(1, *(out / eb.EVAL / f"trial_{k}" / "eval_records.jsonl" for k in range(2)), timeout=90)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    with open(out / eb.EVAL / "trial_1" / "eval_records.jsonl", "ab") as f:
        f.write(b'{"sample_key": "q7", "eval_result": {"sta')  # a torn half-written line
    done = sum(len(_records_lines(out, k)) for k in range(2))
    assert 0 < done < 16 and not (out / eb.EVAL / "trial_0" / "done").exists()

    fast = openai_server(io3.reasoner_script())
    argv_fast = io3.argv(
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
    assert sum(io3.is_first_turn(r) for r in fast.requests) == 16 - done  # only unfinished pairs re-run
    _assert_expected(out, 2)
    summary = json.loads((out / eb.EVAL / "summary_metrics.json").read_text())
    assert summary["overall_accuracy"] == {"mean": 0.5, "std": 0.0}
    eb.assert_no_secrets(out, io3.SEARCH_KEY)


def _records_lines(out: Path, k: int) -> list[str]:
    """Complete record lines (a torn last line without its newline is not a record)."""
    data = (out / eb.EVAL / f"trial_{k}" / "eval_records.jsonl").read_text()
    return [x for x in data.split("\n")[:-1] if x.strip()]
