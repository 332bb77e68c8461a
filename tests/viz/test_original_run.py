"""Run directories written by the original release's harness are read by the report, the viz readers
(and so the notebooks) and gather_eval_results, side by side with runs of this project."""

from __future__ import annotations

import json

import pytest

from insight_o3.scripts import evaluate
from insight_o3.scripts import gather_eval_results as gather
from insight_o3.scripts import report as report_cli
from insight_o3.viz import run_view as rv
from insight_o3.viz.draw import ImageResolver
from insight_o3.viz.original_run import convert_record, data_url_size, is_original_record, original_keys
from tests.support import eval_bench as eb
from tests.support.original_run import ORIGINAL_KEY, write_original_run

#: per trial, per question of eval_bench (q0..q7)
OUTCOMES = [
    ["correct", "wrong", "correct", "truncated", "lost", "correct", "judge_failed", "wrong"],
    ["correct", "correct", "wrong", "correct", "wrong", "correct", "correct", "wrong"],
]


@pytest.fixture
def old_run(tmp_path):
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    return (
        write_original_run(tmp_path / "old", "old-model/o3_bench", ann, img_dir, OUTCOMES, max_pixels=3000),
        ann,
        img_dir,
    )


def test_original_records_read_as_ours(old_run):
    eval_dir, ann, img_dir = old_run
    run = rv.load_run(eval_dir)
    assert [t.index for t in run.trials] == [0, 1] and run.name == "old-model/o3_bench"
    assert not any("key" in k for k in run.args) and ORIGINAL_KEY not in json.dumps(run.args)
    t0 = run.trial(0)
    assert [r.key for r in t0.results] == list(eb.QUESTIONS)  # unique question_ids are the keys
    status = {r.key: r.status for r in t0.results}
    assert status == {
        "q0": "correct",
        "q1": "wrong",
        "q2": "correct",
        "q3": "incomplete",
        "q4": "failed",
        "q5": "correct",
        "q6": "failed",
        "q7": "wrong",
    }
    q6 = next(r for r in t0.results if r.key == "q6")
    assert q6.fail_reason == "judge: judge_failed" and q6.record["eval_result"]["fail_stage"] == "judge"
    # the image reference: the whole source image (its file size), sent at the size the data URL holds
    q0 = next(r for r in t0.results if r.key == "q0")
    refs = [ref for t in rv.conversation(q0) for ref in t.images]
    assert len(refs) == 1 and refs[0].region == (0, 0, 96, 64) and refs[0].size[0] * refs[0].size[1] <= 3000
    assert rv.crop_refs(q0, ImageResolver(run.image_roots())) == []  # the whole image, not a crop
    assert "base64" not in json.dumps(q0.trajectory)
    # accuracy per trial equals the original's own eval_metrics.json
    acc = rv.accuracy_by_category(run)
    for t in run.trials:
        assert acc.loc["overall", f"trial_{t.index}"] == pytest.approx(100 * t.metrics["overall_accuracy"])
    assert not rv.failure_table(run).empty
    html = rv.conversation_html(q0, ImageResolver(run.image_roots()))
    assert "<b>q0</b>" in html and "whole image" in html


def test_duplicate_question_ids_key_by_position():
    recs = [{"question_id": 7, "eval_result": {"sample_index": i, "inference_result": {}}} for i in range(3)]
    assert all(is_original_record(r) for r in recs) and original_keys(recs) == ["#0", "#1", "#2"]
    rec = convert_record(
        {
            "question": "Q",
            "answer": "A",
            "eval_result": {
                "sample_index": 0,
                "success": False,
                "fail_reason": "inference_failed",
                "inference_result": {"success": False, "fail_reason": "api_error"},
            },
        },
        "#0",
    )
    assert rec["eval_result"]["status"] == "failed" and rec["eval_result"]["trajectory"] is None
    assert data_url_size("data:image/png;base64,not-an-image") is None


def test_new_run_compares_with_the_original_run_side_by_side(old_run, tmp_path, openai_server):
    eval_dir, ann, img_dir = old_run
    main_srv, judge_srv = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "new"
    assert (
        evaluate.main(
            [
                "--eval_name",
                "new-model/o3_bench",
                "--model",
                "scripted-vlm",
                "--api_base_url",
                main_srv.base_url,
                "--api_key",
                "k",
                "--judge_model",
                "scripted-judge",
                "--judge_api_base_url",
                judge_srv.base_url,
                "--judge_api_key",
                "k",
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
    old, new = rv.load_run(eval_dir), rv.load_run(out / "new-model/o3_bench")
    frame = rv.compare_frame(old.trial(0), new.trial(0))
    assert list(frame["key"]) == list(eb.QUESTIONS)  # the same keys in both runs
    changes = dict(zip(frame["key"], frame["change"]))
    # q4 (the query the original lost) and q6 (its judge failed) were lost to API errors: no flips
    assert changes["q4"] == changes["q6"] == "lost" and changes["q0"] == "same"
    # the report takes the original run, compared with the new one; no key leaks into it
    page = tmp_path / "r.html"
    assert report_cli.main([str(eval_dir), "--out", str(page), "--compare", str(out / "new-model/o3_bench")]) == 0
    text = page.read_text()
    assert "q0" in text and ORIGINAL_KEY not in text


def test_gather_eval_results_reads_original_summaries(old_run, tmp_path, capsys):
    eval_dir, _, _ = old_run
    assert (
        gather.main(["--settings", "old-model", "--datasets", "o3_bench", "--output_dir", str(eval_dir.parent.parent)])
        == 0
    )
    out = capsys.readouterr().out
    summary = json.loads((eval_dir / "summary_metrics.json").read_text())
    mean, std = summary["overall_accuracy"]["mean"], summary["overall_accuracy"]["std"]
    assert f"{100 * mean:.1f}±{100 * std:.1f} @2" in out
    assert "success rate" in out  # the original's own rates are checked too (the lost query)
