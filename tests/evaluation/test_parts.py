"""Evaluation building blocks: record log, judge, metrics, image reuse, solver hook."""

from __future__ import annotations

import asyncio
import json

import pytest

from insight_o3.agents.single_model import SingleModelSolver
from insight_o3.endpoints.client import make_client
from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.evaluation.judge import (
    CROP_MARK,
    DEFAULT_JUDGE_RETRIES,
    AnswerJudge,
    crop_for_judge,
    verification_says_correct,
)
from insight_o3.evaluation.metrics import compute_metrics, summarize
from insight_o3.evaluation.runner import RunConfig, run_evaluation
from insight_o3.evaluation.samples import load_samples
from insight_o3.imaging.images import ImageStore, Resize
from insight_o3.jobs.controls import RunControls
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.attempt_stats import InSightO3Stats
from insight_o3.storage.record_log import RecordFileError, RecordLog
from tests.support import eval_bench as eb
from tests.support.openai_server import chat, error


# ----------------------------------------------------------------------------- record log
def test_record_log_drops_torn_tail_and_keeps_last_per_key(tmp_path):
    p = tmp_path / "r.jsonl"
    lg = RecordLog.open(str(p))
    lg.append({"sample_key": "a", "v": 1})
    lg.append({"sample_key": "b", "v": 1})
    lg.append({"sample_key": "a", "v": 2})
    lg.close()
    with open(p, "ab") as f:
        f.write(b'{"sample_key": "c", "v"')  # killed mid-write
    lg = RecordLog.open(str(p))
    assert {k: r["v"] for k, r in lg.records.items()} == {"a": 2, "b": 1}
    lg.append({"sample_key": "c", "v": 3})
    lg.compact(["a", "b", "c"])
    lg.close()
    assert [json.loads(x) for x in p.read_text().splitlines()] == [
        {"sample_key": "a", "v": 2},
        {"sample_key": "b", "v": 1},
        {"sample_key": "c", "v": 3},
    ]
    # a complete but unparsable last line is also a torn write
    with open(p, "ab") as f:
        f.write(b'{"sample_key": "d"\n')
    assert set(RecordLog.open(str(p)).records) == {"a", "b", "c"}
    assert p.read_text().count("\n") == 3


def test_record_log_corrupt_middle_line_names_file_and_line(tmp_path):
    p = tmp_path / "r.jsonl"
    p.write_text('{"sample_key": "a"}\ngarbage\n{"sample_key": "b"}\n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2: corrupt result record"):
        RecordLog.open(str(p))


# ----------------------------------------------------------------------------- judge
def test_crop_and_verification_reading():
    assert crop_for_judge("abc", 10) == "abc"
    assert crop_for_judge("x" * 50 + "tail", 4) == CROP_MARK + "tail"
    assert crop_for_judge("long", 0) == "long"
    # the original's `"correct" in reply.lower()` took "incorrect" for correct (documented bug fix)
    assert verification_says_correct("<correct>") and verification_says_correct("Correct")
    assert not verification_says_correct("incorrect") and not verification_says_correct("<wrong>")
    assert not verification_says_correct("The answer is not correct.")
    assert not verification_says_correct("<correct> or <wrong>") and not verification_says_correct("")


@pytest.fixture
def samples(tmp_path):
    ann, img_dir = eb.make_bench(tmp_path)
    return {s.key: s for s in load_samples(ann, img_dir)}


def _judge_with(script, openai_server, max_len=1000):
    srv = openai_server(script)
    return srv, AnswerJudge(
        make_client(Endpoint(api_key="k", base_url=srv.base_url, timeout=5, max_retries=0)), "j", max_len
    )


@pytest.mark.parametrize(
    "text,letter",
    [
        ("<answer>C</answer>", "C"),
        ("<answer> C </answer>", "C"),
        ("<answer>\\boxed{C}</answer>", "C"),
        ("so \\boxed{ C }", "C"),
        ("C", "C"),
    ],
)
def test_only_an_exact_span_skips_the_judge(samples, openai_server, text, letter):
    srv, judge = _judge_with(lambda r, c: error(500), openai_server)
    v = asyncio.run(judge.check(samples["q0"], Attempt(text, "stop")))
    assert (v.status, v.extracted_answer, v.method, v.has_answer) == ("correct", letter, "rule", True)
    assert srv.count == 0


@pytest.mark.parametrize(
    "text,span", [("(C)", "(C)"), ("Answer: C", "Answer: C"), ("C\n", "C\n"), ("\\boxed{\\text{C}}", "\\text{C}")]
)
def test_other_spans_go_to_the_extraction_judge(samples, openai_server, text, span):
    """As the released evaluate.py: no letter-matching rules of our own, the judge decides."""
    srv, judge = _judge_with(lambda r, c: chat("C"), openai_server)
    v = asyncio.run(judge.check(samples["q0"], Attempt(text, "stop")))
    assert (v.status, v.extracted_answer, v.method) == ("correct", "C", "judge") and srv.count == 1
    assert srv.requests[0]["messages"][0]["content"][0]["text"].count(f"Model Answer: {span}  \n") == 1


def test_judge_failures_and_cropping(samples, openai_server):
    seen = []

    def script(req, call):
        seen.append(req["messages"][0]["content"][0]["text"])
        return chat("maybe" if call.index == 0 else "<correct> or <wrong>")

    _, judge = _judge_with(script, openai_server, max_len=20)
    long = "blah " * 100 + "I pick the second one"

    async def go():  # one event loop for the client's connections
        return [
            await judge.check(samples["q0"], Attempt(long, "stop")),
            await judge.check(samples["q7"], Attempt("long words here", "stop")),
            await judge.check(samples["q7"], Attempt("x", "length")),
            await judge.check(samples["q7"], Attempt(None, None, error="boom")),
        ]

    mcq, open_qa, truncated, lost = asyncio.run(go())
    assert mcq.status == "wrong" and mcq.judge_outputs == ["maybe"]  # not the GT letter
    assert CROP_MARK + long[-20:] in seen[0] and "blah blah blah blah blah" not in seen[0]
    # extraction "<correct> or <wrong>", then an ambiguous verdict: a judge failure, never a score
    assert (open_qa.status, open_qa.fail_stage) == ("failed", "judge")
    # truncated responses are never judged; solver errors stay critical failures
    assert truncated.status == "incomplete" and lost.status == "failed"
    # the MCQ asked once; the open question's extraction + verdict asked again --judge_retries (2) times
    assert len(seen) == 1 + 2 * (1 + DEFAULT_JUDGE_RETRIES) and judge.rejudged == DEFAULT_JUDGE_RETRIES


def test_judge_api_error_is_a_recorded_failure(samples, openai_server):
    _, judge = _judge_with(lambda r, c: error(503, "down"), openai_server)
    v = asyncio.run(judge.check(samples["q2"], Attempt("the first one", "stop")))
    assert v.status == "failed" and v.fail_stage == "judge" and "503" in v.fail_reason


# ----------------------------------------------------------------------------- metrics
def _rec(cat, status, has=True, stats=None):
    return {"category": cat, "eval_result": {"status": status, "has_answer": has, "stats": stats or {}}}


def test_metrics_definitions_and_summary():
    recs = [
        _rec("a", "correct"),
        _rec("a", "wrong"),
        _rec("a", "incomplete", False),
        _rec("b", "failed", False),
        _rec("b", "invalid", False),
        _rec("b", "correct"),
    ]
    m = compute_metrics(recs)
    assert m["overall_stats"] == {"correct": 2, "wrong": 1, "incomplete": 1, "invalid": 1, "failed": 1, "total": 6}
    assert m["overall_accuracy"] == pytest.approx(2 / 6)
    assert m["overall_success_rate"] == pytest.approx(3 / 6)
    assert m["overall_completion_rate"] == pytest.approx(3 / 4)
    assert m["critical_failure_ratio"] == pytest.approx(1 / 6)
    assert m["has_answer"] == pytest.approx(3 / 6)
    assert m["category_accuracy"] == {"a": pytest.approx(1 / 3), "b": pytest.approx(1 / 3)}
    assert m["category_completion_rate"]["b"] == 1.0 and "mean_search_calls" not in m
    m2 = compute_metrics(
        [
            _rec("a", "correct", stats={"n_search_calls": 3, "n_search_not_found": 1}),
            _rec("a", "wrong", stats={"n_search_calls": 1, "n_search_not_found": 0}),
        ]
    )
    assert m2["mean_search_calls"] == 2.0 and m2["search_not_found_ratio"] == 0.25
    s = summarize([m2, {**m2, "overall_accuracy": 0.0}])
    assert s["num_trials"] == 2 and s["overall_accuracy"] == {"mean": 0.25, "std": 0.25}
    assert s["category_stats"]["a"]["total"] == {"mean": 2.0, "std": 0.0}


# ----------------------------------------------------------------------------- runner
def test_each_image_encoded_once_across_questions_and_trials(tmp_path, openai_server, samples):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    store = ImageStore()

    async def go():
        client = make_client(Endpoint(api_key="k", base_url=main_srv.base_url, timeout=10))
        jclient = make_client(Endpoint(api_key="k", base_url=judge_srv.base_url, timeout=10))
        solver = SingleModelSolver(client, "m", store, Resize.fit(3000), separate_trial_requests=True)
        cfg = RunConfig(
            output_dir=str(tmp_path / "out"),
            eval_name="e",
            num_trials=3,
            group_trials=False,
            controls=RunControls(concurrency=16, progress=False),
        )
        try:
            return await run_evaluation(list(samples.values()), solver, AnswerJudge(jclient, "j"), cfg)
        finally:
            await client.close()
            await jclient.close()

    summary = asyncio.run(go())
    store.close()
    assert summary["overall_accuracy"]["mean"] == 0.5
    assert main_srv.count == 24  # 8 questions x 3 trials on 3 images
    assert store.stats["encoded"] == 3 and store.stats["decoded"] == 3
    urls = {r["messages"][-1]["content"][0]["image_url"]["url"] for r in main_srv.requests}  # image first
    assert len(urls) == 3


class _StatsSolver:
    """A solver that reports InSight-o3-style stats and, for one sample, breaks the contract."""

    async def solve(self, sample, n):
        if sample.key == "q1":
            raise RuntimeError("bug in solver")
        if sample.key == "q2":
            return [Attempt("<answer>A</answer>", "stop")]  # one attempt for n trials
        return [
            Attempt(
                eb.QUESTIONS[sample.key][4],
                eb.QUESTIONS[sample.key][5],
                stats=InSightO3Stats(n_search_calls=2, n_search_not_found=1),
            )
            for _ in range(n)
        ]

    async def aclose(self):
        pass


def test_solver_hook_stats_and_contract_violations_recorded(tmp_path, openai_server, samples):
    judge_srv = openai_server(eb.judge_script())

    async def go():
        jclient = make_client(Endpoint(api_key="k", base_url=judge_srv.base_url, timeout=10))
        cfg = RunConfig(
            output_dir=str(tmp_path / "out"), eval_name="e", num_trials=2, controls=RunControls(progress=False)
        )
        try:
            return await run_evaluation(list(samples.values()), _StatsSolver(), AnswerJudge(jclient, "j"), cfg)
        finally:
            await jclient.close()

    asyncio.run(go())
    for k in range(2):
        m = json.loads((tmp_path / f"out/e/trial_{k}/eval_metrics.json").read_text())
        assert m["overall_stats"]["failed"] == 2 and m["overall_stats"]["total"] == 8
        assert m["mean_search_calls"] == 2.0 and m["search_not_found_ratio"] == 0.5
        recs = {
            json.loads(x)["sample_key"]: json.loads(x)
            for x in (tmp_path / f"out/e/trial_{k}/eval_records.jsonl").read_text().splitlines()
        }
        assert "bug in solver" in recs["q1"]["eval_result"]["fail_reason"]
        assert "1 attempts for 2 trials" in recs["q2"]["eval_result"]["fail_reason"]
