"""``python -m insight_o3.scripts.rejudge``: new verdicts from stored responses, no model calls."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.scripts import rejudge
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, error, last_user_text
from tests.support.rejudge_bench import evaluate_judge_a, lenient_judge

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def finished(tmp_path, openai_server):
    bench = eb.make_bench(tmp_path / "bench")
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    evaluate_judge_a(bench, out, main_srv.base_url, judge_srv.base_url, "--num_trials", "2")
    return out, main_srv, bench


def test_rejudge_writes_new_eval_dir_without_model_calls(finished, openai_server, capsys):
    out, main_srv, _ = finished
    asked = main_srv.count
    src = out / "m/o3_bench"
    before = {p: p.read_bytes() for p in src.rglob("*") if p.is_file() and p.name != ".lock"}
    judge_b = openai_server(lenient_judge())
    rc = rejudge.main([str(src), "--judge_model", "judge-b", "--judge_api_base_url", judge_b.base_url, "--no_progress"])
    assert rc == 0
    assert main_srv.count == asked  # no model calls
    new = out / "m/o3_bench@rejudge-judge-b"
    assert all(r["model"] == "judge-b" for r in judge_b.requests)
    # q1 (D vs B) and q4 ('F' now) by extraction, q5 q6 q7 by extraction + verification; asked once for 2 trials
    assert judge_b.count == 3 + 2 * 3
    for k in range(2):
        m = json.loads((new / f"trial_{k}/eval_metrics.json").read_text())
        # q4 and q7 become correct; q1 stays wrong (D != B); q3 stays incomplete
        assert m["overall_stats"] == {"correct": 6, "wrong": 1, "incomplete": 1, "invalid": 0, "failed": 0, "total": 8}
        old, recs = eb.records_by_key(src, k), eb.records_by_key(new, k)
        assert recs.keys() == old.keys()
        for key, r in recs.items():
            assert r["eval_result"]["response"] == old[key]["eval_result"]["response"]
            assert r["usage"]["model"] == old[key]["usage"]["model"]  # carried over
            assert r["subset"] == old[key]["subset"] and r["target_layouts"] == old[key]["target_layouts"]
        assert recs["q7"]["eval_result"]["judge_outputs"] == ["blue", "<correct>"]
    card = json.loads((new / "run_card.json").read_text())
    assert card["judge"]["model"] == "judge-b" and card["rejudged_from"] == str(src.resolve())
    assert card["benchmark_sha256"] == json.loads((src / "run_card.json").read_text())["benchmark_sha256"]
    assert {p: p.read_bytes() for p in src.rglob("*") if p.is_file() and p.name != ".lock"} == before
    # rerun: everything done, nothing asked
    assert (
        rejudge.main([str(src), "--judge_model", "judge-b", "--judge_api_base_url", judge_b.base_url, "--no_progress"])
        == 0
    )
    assert judge_b.count == 9
    # the two runs differ in their judge: gather refuses to put them in one column unless asked
    from insight_o3.scripts import gather_eval_results as g

    capsys.readouterr()
    assert (
        g.main(["--settings", "m", "--datasets", "o3_bench", "o3_bench@rejudge-judge-b", "--output_dir", str(out)]) == 2
    )
    assert "judge.model" in capsys.readouterr().err


def test_rejudge_same_judge_reproduces_metrics(finished, openai_server):
    out, main_srv, _ = finished
    judge_a = openai_server(eb.judge_script())
    assert (
        rejudge.main(
            [
                str(out / "m/o3_bench"),
                "--judge_model",
                "judge-a",
                "--judge_api_base_url",
                judge_a.base_url,
                "--eval_name",
                "m/o3_bench_again",
                "--no_progress",
            ]
        )
        == 0
    )
    a = json.loads((out / "m/o3_bench/summary_metrics.json").read_text())
    b = json.loads((out / "m/o3_bench_again/summary_metrics.json").read_text())
    assert b["overall_accuracy"] == a["overall_accuracy"] and b["overall_stats"] == a["overall_stats"]


def test_rejudge_refuses_unfinished_or_missing_source(tmp_path, finished, capsys):
    out, _, _ = finished
    (out / "m/o3_bench/trial_1/done").unlink()
    assert rejudge.main([str(out / "m/o3_bench"), "--judge_model", "j", "--no_progress"]) == 2
    assert "trial_1: trial not finished" in capsys.readouterr().err
    assert rejudge.main([str(tmp_path / "nope"), "--judge_model", "j"]) == 2
    assert "no such eval directory" in capsys.readouterr().err


def test_rejudge_cli_help():
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.rejudge", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "--judge_model" in r.stdout


def test_judge_failures_exit_1_and_retry_failed_finishes(finished, openai_server, capsys):
    """A judging lost to an API error is a ``failed`` record: exit 1 (INCOMPLETE); ``--retry_failed``
    with the judge back asks only for those and exits 0."""
    out, _, _ = finished
    src = out / "m/o3_bench"
    healthy = lenient_judge()

    def flaky(req: dict, call: Call) -> Reply:
        if eb.marker(last_user_text(req)) == "q2":
            return error(400, "judge refuses this one")
        return healthy(req, call)

    judge_b = openai_server(flaky)
    argv = [
        str(src),
        "--judge_model",
        "judge-b",
        "--judge_api_base_url",
        judge_b.base_url,
        "--no_progress",
        "--max_retries",
        "0",
        "--eval_name",
        "m/o3_bench_b",
    ]
    assert rejudge.main(argv) == 1
    assert "could not be judged" in capsys.readouterr().err
    failed = {
        k
        for t in range(2)
        for k, r in eb.records_by_key(out / "m/o3_bench_b", t).items()
        if r["eval_result"]["status"] == "failed"
    }
    assert failed == {"q2"}
    judge_c = openai_server(healthy)
    argv[argv.index(judge_b.base_url)] = judge_c.base_url
    assert rejudge.main(argv + ["--retry_failed"]) == 0
    assert 0 < judge_c.count <= 2  # only q2's judgings are asked again (one per trial at most)
    assert not [
        k
        for t in range(2)
        for k, r in eb.records_by_key(out / "m/o3_bench_b", t).items()
        if r["eval_result"]["status"] == "failed"
    ]
