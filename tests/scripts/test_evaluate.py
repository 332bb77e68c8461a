"""End-to-end tests of ``python -m insight_o3.scripts.evaluate`` against real local HTTP servers."""

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
from tests.support.waiting import wait_for_lines

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


@pytest.mark.smoke
def test_full_run_metrics_layout_and_skip(bench, tmp_path, openai_server, capsys):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench, out, main_srv.base_url, judge_srv.base_url, "--num_trials", "2", "--sys_prompt", "think"
    )
    assert evaluate.main(argv) == 0
    eb.assert_expected(out, 2)
    # one request per sample with n=2; image sent once-encoded, options in the prompt, system prompt set
    assert main_srv.count == 8
    # requests arrive in any order: q0's (a multiple-choice question) is found by its marker
    req = next(r for r in main_srv.requests if "[q0]" in r["messages"][1]["content"][1]["text"])
    assert all(
        r["n"] == 2
        and r["max_completion_tokens"] == 16384
        and r["model"] == "scripted-vlm"
        and r["messages"][0]["role"] == "system"
        for r in main_srv.requests
    )
    user = req["messages"][1]["content"]  # image first, as the released evaluate.py
    assert user[1]["type"] == "text" and "F. No right choice" in user[1]["text"]
    assert user[0]["image_url"]["detail"] == "high"
    # judge, per trial: only q0's span equals its ground truth; q1 q2 q4 extraction, q5 q6 q7 extraction + verdict
    assert judge_srv.count == 2 * 9
    assert all(r["model"] == "scripted-judge" for r in judge_srv.requests)
    rec = eb.read_records(out / eb.EVAL, 0)[0]
    assert rec["eval_result"]["image"] == {
        "path": str(bench[1] / "images/img0.png"),
        "region": [0, 0, 96, 64],
        "size": [96, 64],
    }
    assert rec["subset"] == "chart" and rec["target_layouts"] == [1] and rec["category"] == "chart"
    summary = json.loads((out / "m/o3_bench/summary_metrics.json").read_text())
    assert summary["num_trials"] == 2
    assert summary["overall_accuracy"] == {"mean": 0.5, "std": 0.0}
    assert summary["category_accuracy"]["map"]["mean"] == 0.5
    args = json.loads((out / "m/o3_bench/args.json").read_text())
    assert args["model"] == "scripted-vlm" and "api_key" not in args and "judge_api_key" not in args
    eb.assert_no_secrets(out)
    # rerun: all trials done -> no request at all, same summary
    assert evaluate.main(argv) == 0
    assert main_srv.count == 8 and judge_srv.count == 18
    assert json.loads((out / "m/o3_bench/summary_metrics.json").read_text()) == summary


def test_fault_injection_nothing_lost(bench, tmp_path, openai_server):
    ref = {}
    main_srv = ref["srv"] = openai_server(eb.faulty_model_script(ref))
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench, out, main_srv.base_url, judge_srv.base_url, "--num_trials", "2", "--client_timeout", "1"
    )
    assert evaluate.main(argv) == 1  # INCOMPLETE: some sample-trials failed
    for k in range(2):
        recs = {r["sample_key"]: r["eval_result"] for r in eb.read_records(out / eb.EVAL, k)}
        assert len(recs) == 8
        failed = {q for q, r in recs.items() if r["status"] == "failed"}
        assert failed == {"q4", "q6"}  # malformed body and a non-retryable 400; retried faults recovered
        assert "APIResponseValidationError" in recs["q4"]["fail_reason"] or "JSON" in recs["q4"]["fail_reason"]
        assert "***" in recs["q6"]["fail_reason"] and eb.MAIN_KEY not in recs["q6"]["fail_reason"]
        m = eb.read_metrics(out / eb.EVAL, k)
        assert m["overall_stats"]["failed"] == 2 and m["critical_failure_ratio"] == pytest.approx(2 / 8)
    eb.assert_no_secrets(out)
    n_before = main_srv.count
    assert evaluate.main(argv + ["--retry_failed"]) == 0
    assert main_srv.count == n_before + 2  # only q4 and q6, each one n=2 request
    eb.assert_expected(out, 2)
    eb.assert_no_secrets(out)


def test_separate_trial_requests(bench, tmp_path, openai_server):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench,
        out,
        main_srv.base_url,
        judge_srv.base_url,
        "--num_trials",
        "3",
        "--separate_trial_requests",
        "--img_max_pixels",
        "1000",
    )
    assert evaluate.main(argv) == 0
    eb.assert_expected(out, 3)
    assert main_srv.count == 24 and all(r["n"] == 1 for r in main_srv.requests)  # the original always sends n
    size = eb.read_records(out / eb.EVAL, 0)[0]["eval_result"]["image"]["size"]
    assert size[0] * size[1] <= 1000


def test_sigkill_then_resume(bench, tmp_path, openai_server):
    # the model server answers 2 requests and holds the rest: the client is killed at a known point
    slow = openai_server(eb.model_script(), block_after=2)
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.keyed_argv(
        *bench,
        out,
        slow.base_url,
        judge_srv.base_url,
        "--num_trials",
        "2",
        "--separate_trial_requests",
        "--concurrency",
        "2",
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
        slow.wait_blocked(2)  # both concurrency slots wait on the server: no more replies will come
        wait_for_lines(2, *(out / f"m/o3_bench/trial_{k}/eval_records.jsonl" for k in range(2)), timeout=60)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # simulate the worst case as well: a torn half-written line at the end of a records file
    with open(out / "m/o3_bench/trial_1/eval_records.jsonl", "ab") as f:
        f.write(b'{"sample_key": "q7", "eval_result": {"sta')
    before = sum(
        len((out / f"m/o3_bench/trial_{k}/eval_records.jsonl").read_text().splitlines()) - k for k in range(2)
    )  # trial_1 holds one torn line
    assert 0 < before < 16 and before == 2  # exactly the two answered pairs were kept
    assert not (out / "m/o3_bench/trial_0/done").exists()
    fast = openai_server(eb.model_script())
    argv_fast = eb.keyed_argv(
        *bench, out, fast.base_url, judge_srv.base_url, "--num_trials", "2", "--separate_trial_requests"
    )
    assert evaluate.main(argv_fast) == 0
    assert fast.count == 16 - before  # only the unfinished pairs were queried
    eb.assert_expected(out, 2)  # exactly one record per (sample, trial), metrics of an uninterrupted run
    summary = json.loads((out / "m/o3_bench/summary_metrics.json").read_text())
    assert summary["overall_accuracy"] == {"mean": 0.5, "std": 0.0}


def test_keys_from_env_and_default_eval_name(bench, tmp_path, openai_server, monkeypatch):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    monkeypatch.setenv("OPENAI_API_KEY", eb.MAIN_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", main_srv.base_url)
    monkeypatch.setenv("JUDGE_API_KEY", eb.JUDGE_KEY)
    monkeypatch.setenv("JUDGE_API_BASE_URL", judge_srv.base_url)
    out = tmp_path / "out"
    ann, img_dir = bench
    assert (
        evaluate.main(
            [
                "--benchmark",
                "o3_bench",
                "--model",
                "vlm",
                "--ann_file",
                str(ann),
                "--img_dir",
                str(img_dir),
                "--output_dir",
                str(out),
                "--no_progress",
            ]
        )
        == 0
    )
    assert (out / "vlm/o3_bench/trial_0/done").exists()
    hdrs = {k.lower(): v for k, v in main_srv.headers[0].items()}
    assert hdrs["authorization"] == f"Bearer {eb.MAIN_KEY}"
    jh = {k.lower(): v for k, v in judge_srv.headers[0].items()}
    assert jh["authorization"] == f"Bearer {eb.JUDGE_KEY}"
    eb.assert_no_secrets(out)


@pytest.mark.parametrize(
    "flag,value",
    [
        ("--chat_completion_kwargs", '{"n": 2}'),
        ("--chat_completion_kwargs", "[1]"),
        ("--image_url_extra_settings", "{bad"),
    ],
)
def test_bad_flags_rejected(bench, tmp_path, flag, value, capsys):
    with pytest.raises(SystemExit) as e:
        evaluate.main(eb.keyed_argv(*bench, tmp_path, "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1", flag, value))
    assert e.value.code == 2
    assert flag in capsys.readouterr().err


def test_corrupt_image_is_a_per_sample_error(bench, tmp_path, openai_server):
    ann, img_dir = bench
    (img_dir / "images/img2.png").write_bytes(b"\x89PNG\r\n\x1a\n not really a png")
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert (
        evaluate.main(eb.keyed_argv(ann, img_dir, out, main_srv.base_url, judge_srv.base_url)) == 1
    )  # INCOMPLETE: some sample-trials failed
    recs = {r["sample_key"]: r["eval_result"] for r in eb.read_records(out / eb.EVAL, 0)}
    bad = {q for q, r in recs.items() if r["status"] == "failed"}
    assert bad == {"q4", "q5", "q6"}  # the questions on img2.png
    assert "cannot decode image" in recs["q5"]["fail_reason"] and "img2.png" in recs["q5"]["fail_reason"]
    assert main_srv.count == 5


def test_insight_o3_mode_uses_the_agents_solver(bench, tmp_path, openai_server):
    """--vsearcher_model builds InSightO3Solver through the hook; search stats reach the metrics."""
    from tests.support.openai_server import chat

    def reasoner(req, call):
        searched = any(m["role"] == "assistant" for m in req["messages"])
        return chat("\\boxed{C}" if searched else "<tool_call>region_description={the legend}</tool_call>")

    r = openai_server(reasoner)
    s = openai_server(lambda req, call: chat("<answer>[1, 1, 20, 20]</answer>"))
    j = openai_server(eb.judge_script())
    out = tmp_path / "out"
    ann, img_dir = bench
    assert (
        evaluate.main(
            [
                "--eval_name",
                "m/o3_bench",
                "--model",
                "r",
                "--api_base_url",
                r.base_url,
                "--api_key",
                eb.MAIN_KEY,
                "--judge_api_base_url",
                j.base_url,
                "--vsearcher_model",
                "vs",
                "--vsearcher_api_base_url",
                s.base_url,
                "--ann_file",
                str(ann),
                "--img_dir",
                str(img_dir),
                "--output_dir",
                str(out),
                "--no_progress",
                "--num_trials",
                "2",
            ]
        )
        == 0
    )
    assert s.count > 0
    for k in range(2):
        m = eb.read_metrics(out / eb.EVAL, k)
        assert m["overall_stats"]["total"] == 8 and m["overall_stats"]["failed"] == 0
        assert m["mean_search_calls"] > 0
        assert len(eb.read_records(out / eb.EVAL, k)) == 8
    eb.assert_no_secrets(out)


def test_a_relative_output_dir_from_the_working_directory(bench, tmp_path, openai_server, monkeypatch):
    """evaluate's default --output_dir (outputs/eval) is relative: the records land under it, not under a doubled
    outputs/eval/<name>/outputs/eval/<name>."""
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    monkeypatch.chdir(tmp_path)
    argv = eb.keyed_argv(*bench, Path("outputs/eval"), main_srv.base_url, judge_srv.base_url)
    assert evaluate.main(argv) == 0
    assert len(eb.read_records(tmp_path / "outputs/eval/m/o3_bench", 0)) == 8
    assert not (tmp_path / "outputs/eval/m/o3_bench/outputs").exists()
