"""HTML views are rendered through autoescaping Jinja2 templates (insight_o3.viz.templating): text
from records, args and run cards cannot inject markup, and the templates ship with the package."""

from __future__ import annotations

import ast
import fnmatch
import json
import os
import subprocess
import sys
from pathlib import Path

from insight_o3.viz import report
from insight_o3.viz import run_view as rv

ROOT = Path(__file__).resolve().parents[2]
EVIL = "<script>alert(1)</script> \"double\" 'single'"
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt; &quot;double&quot; &#x27;single&#x27;"


def _write_run(root: Path) -> Path:
    run = root / "evil-run"
    trial = run / "trial_0"
    trial.mkdir(parents=True)
    base = {"question_id": "q1", "image": "missing.png", "options": None, "answer": "A", "subset": EVIL}
    records = [
        {
            **base,
            "sample_key": "k1",
            "question": "Q1 " + EVIL,
            "eval_result": {
                "success": True,
                "status": "wrong",
                "response": "R1 " + EVIL,
                "finish_reason": "stop",
                "extracted_answer": "B",
                "is_correct": False,
            },
        },
        {
            **base,
            "question_id": "q2",
            "sample_key": "k2",
            "question": "Q2 " + EVIL,
            "eval_result": {"success": False, "status": "failed", "fail_reason": "F2 " + EVIL},
        },
    ]
    (trial / "eval_records.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "args.json").write_text(json.dumps({"eval_name": "evil", "model": "M " + EVIL}))
    (run / "run_card.json").write_text(json.dumps({"version": "V " + EVIL, "model": "C " + EVIL}))
    return run


def test_untrusted_text_is_escaped_in_the_conversation_view_and_the_report(tmp_path):
    run_dir = _write_run(tmp_path)
    results = rv.load_run(run_dir).trial().by_key()
    views = {k: rv.conversation_html(r) for k, r in results.items()}
    assert "Q1 " + ESCAPED in views["k1"] and "R1 " + ESCAPED in views["k1"]
    assert "F2 " + ESCAPED in views["k2"] and "<div class='fail'>failure: F2 " in views["k2"]
    for view in views.values():
        assert "<script" not in view and "'single'" not in view and '"double"' not in view
    compared = rv.compare_html(results["k1"], None, labels=(EVIL, "other"))
    assert "<h4>" + ESCAPED + "</h4>" in compared and "<script" not in compared

    page = report.build_report(run_dir)
    for text in ("Q1 ", "R1 ", "F2 ", "M ", "V ", "C "):  # question, response, fail reason, args, run card
        assert text + ESCAPED in page, text
    assert f"data-category='{ESCAPED}'" in page  # attribute values cannot be broken out of either
    assert page.count("<script") == 1 and "alert(1)</script>" not in page  # only the report's own filter script


def test_templates_are_found_from_another_working_directory(tmp_path):
    code = (
        "import insight_o3.viz.templating as t, insight_o3.viz.run_view as rv; print(t.__file__); "
        "print(rv.compare_html(None, None, labels=('<a>', 'b')))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith(str(ROOT / "insight_o3" / "viz")) and "<h4>&lt;a&gt;</h4>" in out
    assert out.count("(not in this run)") == 2


def test_every_template_is_declared_as_package_data():
    text = (ROOT / "pyproject.toml").read_text().split("[tool.setuptools.package-data]", 1)[1]
    globs = ast.literal_eval(text.split("insight_o3 =", 1)[1].split("\n", 1)[0].strip())  # py3.10: no tomllib
    templates = sorted((ROOT / "insight_o3" / "viz" / "templates").iterdir())
    assert templates
    for path in templates:
        rel = path.relative_to(ROOT / "insight_o3").as_posix()
        assert any(fnmatch.fnmatch(rel, g) for g in globs), rel


def test_benchmark_sample_card_escapes_its_text():
    from insight_o3.protocol.sample import Sample
    from insight_o3.viz import bench_view as bv

    s = Sample(
        index=0,
        question_id=7,
        image="a.png",
        image_path="/nonexistent/a.png",
        question="Q " + EVIL,
        options="A. " + EVIL,
        answer="A",
        category=EVIL,
        extra={"explanation": "E " + EVIL},
        key="7",
        line=1,
        image_field="image",
        category_field="subset",
    )
    card = bv.sample_html(s, 64)
    assert "Q " + ESCAPED in card and "A. " + ESCAPED in card and "E " + ESCAPED in card
    assert f"data-category='{ESCAPED}'" in card and "<script" not in card
