"""insight_o3.viz on a real InSight-o3 run (scripted servers, demo benchmark) and on bad input."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from PIL import Image

from insight_o3.scripts import report as report_cli
from insight_o3.viz import bench_view as bv
from insight_o3.viz import run_view as rv
from insight_o3.viz.draw import ImageResolver
from insight_o3.viz.report import build_report


# ---------------------------------------------------------------------------- benchmark
def test_bench_layouts_table_plots_and_drawing(demo_eval_run):
    samples = bv.load_bench(demo_eval_run.ann_file)
    assert len(samples) == len(demo_eval_run.samples) == 4
    s, row = samples[0], demo_eval_run.samples[0]
    lay = bv.layouts(s)
    assert len(lay) == len(row["layout_infos"])
    assert {x.layout_id for x in lay if x.is_target} == {str(t) for t in row["target_layouts"]}
    table = bv.bench_table(samples)
    assert list(table["n_layouts"]) == [len(r["layout_infos"]) for r in demo_eval_run.samples]
    assert list(table["width"]) == [r["img_width"] for r in demo_eval_run.samples]
    summary = bv.category_summary(table)
    assert summary.loc["all", "questions"] == 4 and set(summary.index) == {"chart", "map", "all"}
    for fig in (bv.plot_category_counts(table), bv.plot_layout_counts(table), bv.plot_resolution(table)):
        assert fig.axes and fig.axes[0].has_data()
    # the first target box is drawn in red at its place on the full-size image
    img = bv.draw_sample(s, max_px=10_000)
    assert img.size == (row["img_width"], row["img_height"])
    x1, y1, x2, y2 = row["layout_infos"][str(row["target_layouts"][0])]["bbox"]
    edge = np.asarray(img)[int(y1) + 8 : int(y2) - 8, int(x1)].astype(int)  # left edge, below the label
    assert ((edge[:, 0] > 200) & (edge[:, 1] < 80) & (edge[:, 2] < 80)).mean() > 0.9
    page = bv.sample_html(s, 256)
    assert s.question.replace("'", "&#x27;") in page and "data:image/jpeg;base64," in page


# ---------------------------------------------------------------------------- runs
def test_load_run_statuses_filters_and_accuracy(demo_eval_run):
    run = rv.load_run(demo_eval_run.eval_dir)
    assert [t.index for t in run.trials] == [0, 1] and run.args["model"] == "scripted-reasoner"
    expected = {
        "search_right": "correct",
        "search_twice_wrong": "wrong",
        "direct_right": "correct",
        "api_error": "failed",
    }
    for t in run.trials:
        assert {r.key: r.status for r in t.results} == {k: expected[v] for k, v in demo_eval_run.plan.items()}
        calls = {r.key: r.n_search_calls for r in t.results}
        assert calls == {
            k: {"search_right": 1, "search_twice_wrong": 2}.get(v, 0) for k, v in demo_eval_run.plan.items()
        }
    trial = run.trial(0)
    assert {r.status for r in rv.filter_results(trial.results, "wrong")} == {"wrong"}
    assert len(rv.filter_results(trial.results, ["correct", "failed"])) == 3
    assert all(r.category == "map" for r in rv.filter_results(trial.results, category="map"))
    with pytest.raises(ValueError, match="unknown status"):
        rv.filter_results(trial.results, "great")
    acc = rv.accuracy_by_category(run)
    metrics = json.loads((demo_eval_run.eval_dir / "trial_0" / "eval_metrics.json").read_text())
    for cat, v in metrics["category_accuracy"].items():
        assert acc.loc[cat, "trial_0"] == pytest.approx(100 * v)
    assert acc.loc["overall", "mean"] == pytest.approx(100 * metrics["overall_accuracy"])
    fails = rv.failure_table(run)
    assert int(fails[fails["status"] == "failed"]["count"].sum()) == 2  # one per trial
    assert rv.load_run(demo_eval_run.eval_dir / "trial_1").trials[0].index == 1  # a trial dir works too


def test_conversation_and_crops_redrawn_from_source(demo_eval_run):
    run = rv.load_run(demo_eval_run.eval_dir)
    key = next(k for k, v in demo_eval_run.plan.items() if v == "search_twice_wrong")
    result = run.trial(0).by_key()[key]
    turns = rv.conversation(result)
    assert [t.role for t in turns] == ["system", "user", "assistant", "user", "assistant", "user", "assistant"]
    assert "<tool_call>" in turns[0].text or turns[0].text  # system prompt expanded from its name
    calls = rv.search_calls(result)
    assert [c["found"] for c in calls] == [True, False]
    assert calls[0]["trajectory"] and "Locate" in rv.turns(calls[0]["trajectory"])[1].text  # filled prompt
    resolver = ImageResolver(run.image_roots())
    crops = rv.crop_refs(result, resolver)
    assert len(crops) == 1
    ref = crops[0]
    original = Image.open(result.image_path).convert("RGB")
    x1, y1, x2, y2 = (int(v) for v in ref.region)
    redrawn = resolver.crop(ref)
    assert redrawn.size == tuple(ref.size) == (x2 - x1, y2 - y1)
    assert np.array_equal(np.asarray(redrawn), np.asarray(original.crop((x1, y1, x2, y2))))
    page = rv.conversation_html(result, resolver, 256)
    assert page.count("class='crop'") == 1 and "vSearcher call" in page and "not_found" in page
    overview = rv.draw_result(result, resolver, max_px=400)
    assert max(overview.size) == 400
    cmp = rv.compare_frame(run.trial(0), run.trial(1))
    assert set(cmp["change"]) == {"same", "lost"} and len(cmp) == 4  # the sample lost in both trials is no flip
    assert rv.compare_html(result, run.trial(1).by_key()[key], resolver, 128).count("compare-col") == 2


def test_missing_source_image_degrades_to_placeholder(demo_eval_run, tmp_path):
    run = rv.load_run(demo_eval_run.eval_dir)
    result = rv.pick_result(run.trial(0).results)
    result.rec.image_path = str(tmp_path / "gone.png")
    for t in result.trajectory:
        for p in t["content"]:
            if p.get("type") == "image":
                p["image"] = {**p["image"], "path": str(tmp_path / "gone.png")}
    page = rv.conversation_html(result, ImageResolver([tmp_path]), 128)
    assert "source image not found" in page or "data:image/jpeg" in page
    assert rv.draw_result(result, ImageResolver([tmp_path])).size == (320, 80)


# ---------------------------------------------------------------------------- report
def test_report_content_and_self_contained(demo_eval_run, tmp_path):
    page = build_report(demo_eval_run.eval_dir, thumb_px=192)
    assert "id=\"category-table\"" in page and "id=\"failure-table\"" in page
    assert page.count("<svg") >= 3  # per-category, per-trial, vSearcher-calls charts
    assert "vSearcher calls" in page and "scripted refusal" in page
    assert page.count("<details class='sample'") == 4 and "data-status='failed'" in page
    assert "class='crop'" in page and "data:image/jpeg;base64," in page
    # nothing is fetched: no external src/href/url(), no <link>, no remote scripts
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(http" not in page and "<link" not in page and "@import" not in page
    assert "sk-test" not in page
    # compare mode + max_samples
    page2 = build_report(
        demo_eval_run.eval_dir, compare_dir=demo_eval_run.eval_dir / "trial_1", max_samples=2, thumb_px=128
    )
    assert page2.count("<details class='sample'") == 2 and "compare-col" in page2 and "id='compare'" in page2


def test_report_cli_writes_file_and_clear_errors(demo_eval_run, tmp_path, capsys):
    out = tmp_path / "r" / "report.html"
    assert (
        report_cli.main([str(demo_eval_run.eval_dir), "--out", str(out), "--thumb_px", "128", "--max_samples", "1"])
        == 0
    )
    assert out.read_text().startswith("<!DOCTYPE html>")
    assert report_cli.main([str(tmp_path / "nope"), "--out", str(tmp_path / "x.html")]) == 2
    assert "nope: evaluation directory not found" in capsys.readouterr().err
    empty = tmp_path / "empty_eval"
    empty.mkdir()
    assert report_cli.main([str(empty), "--out", str(tmp_path / "x.html")]) == 2
    assert "no trial_<k>/eval_records.jsonl" in capsys.readouterr().err
    (empty / "trial_0").mkdir()
    (empty / "trial_0" / "eval_records.jsonl").write_text("")
    assert report_cli.main([str(empty), "--out", str(tmp_path / "x.html")]) == 2
    assert "no records yet" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()


def test_trial_reader_tolerates_torn_line_and_names_bad_lines(demo_eval_run, tmp_path):
    src = demo_eval_run.eval_dir / "trial_0"
    dst = tmp_path / "trial_0"
    shutil.copytree(src, dst)
    with open(dst / "eval_records.jsonl", "a") as f:
        f.write('{"sample_key": "torn", "eval_res')  # a run killed mid-write
    assert len(rv.load_trial(dst).results) == 4
    lines = (src / "eval_records.jsonl").read_text().splitlines()
    (dst / "eval_records.jsonl").write_text(lines[0] + "\n{not json\n" + lines[1] + "\n")
    with pytest.raises(rv.RunError, match=r"eval_records.jsonl:2: malformed JSON"):
        rv.load_trial(dst)
    (dst / "eval_records.jsonl").write_text(json.dumps({"sample_key": "x"}) + "\n")
    with pytest.raises(rv.RunError, match=r"eval_records.jsonl:1: record has no 'eval_result'"):
        rv.load_trial(dst)
    # old-style record without status/trajectory still reads
    (dst / "eval_records.jsonl").write_text(
        json.dumps(
            {
                "question_id": 7,
                "question": "q?",
                "answer": "A",
                "image": "a.png",
                "eval_result": {"success": True, "is_correct": False, "response": "B", "finish_reason": "length"},
            }
        )
        + "\n"
    )
    r = rv.load_trial(dst).results[0]
    assert (r.key, r.status, r.n_search_calls) == ("7", "incomplete", 0)
    assert [t.role for t in rv.conversation(r)] == ["user", "assistant"]
