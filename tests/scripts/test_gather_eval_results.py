"""gather_eval_results over hand-written summary_metrics.json files (the evaluate CLI's format)."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd

from insight_o3.scripts import gather_eval_results as g


def ms(mean, std=0.0):
    return {"mean": mean, "std": std}


def write_summary(root, setting, dataset, acc, std=0.0, trials=3, success=1.0, completion=1.0, failed=0.0, cats=None):
    d = root / setting / dataset
    d.mkdir(parents=True)
    data = {
        "num_trials": trials,
        "overall_accuracy": ms(acc, std),
        "overall_success_rate": ms(success),
        "overall_completion_rate": ms(completion),
        "critical_failure_ratio": ms(failed),
        "has_answer": ms(1.0),
        "overall_stats": {"correct": ms(10), "total": ms(20)},
    }
    if cats:
        data["category_accuracy"] = {k: ms(*v) for k, v in cats.items()}
    (d / "summary_metrics.json").write_text(json.dumps(data))


def test_settings_by_datasets_table_with_missing_and_warnings(tmp_path, capsys):
    write_summary(tmp_path, "gpt-5-mini", "o3_bench", 0.39, 0.012)
    write_summary(tmp_path, "gpt-5-mini", "vstar", 0.738, 0.0, success=0.98, failed=0.02)
    write_summary(tmp_path, "Qwen/Qwen3-VL-8B", "o3_bench", 0.436, 0.02, trials=1, completion=0.95)
    csv, md = tmp_path / "t.csv", tmp_path / "t.md"
    rc = g.main(
        [
            "--settings",
            "gpt-5-mini",
            "Qwen/Qwen3-VL-8B",
            "--datasets",
            "o3_bench",
            "vstar",
            "--output_dir",
            str(tmp_path),
            "--csv",
            str(csv),
            "--markdown",
            str(md),
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    assert "39.0±1.2 @3" in out and "73.8±0.0 @3" in out and "43.6±2.0 @1" in out
    assert "56.4" in out  # average of 39.0 and 73.8
    assert "note: Qwen/Qwen3-VL-8B/vstar: no results" in out
    assert "warning: gpt-5-mini/vstar: success rate 98.0% < 100%" in out
    assert "warning: gpt-5-mini/vstar: 2.0% of queries lost to API errors" in out
    assert "warning: Qwen/Qwen3-VL-8B/o3_bench: completion rate 95.0% < 100%" in out
    df = pd.read_csv(csv, index_col=0)
    assert df.loc["Qwen/Qwen3-VL-8B", "vstar"] == "—" and df.loc["Qwen/Qwen3-VL-8B", "average"] == "—"
    assert df.loc["gpt-5-mini", "o3_bench"] == "39.0±1.2 @3"
    lines = md.read_text().splitlines()
    assert lines[0] == "| setting | o3_bench | vstar | average |"
    assert lines[2].startswith("| gpt-5-mini | 39.0±1.2 @3 | 73.8±0.0 @3 | 56.4 |")


def test_one_dataset_gives_category_columns(tmp_path, capsys):
    write_summary(tmp_path, "a", "o3_bench", 0.5, 0.01, cats={"chart": (0.4, 0.02), "map": (0.6, 0.0)})
    write_summary(tmp_path, "b", "o3_bench", 0.3, cats={"chart": (0.3, 0.0)})
    table, notes = g.gather(str(tmp_path), ["a", "b"], ["o3_bench"])
    assert list(table.columns) == ["overall", "chart", "map"]
    assert table.loc["a"].tolist() == ["50.0±1.0 @3", "40.0±2.0", "60.0±0.0"]
    assert table.loc["b", "map"] == "—"
    assert notes == []


def test_corrupt_or_invalid_summary_is_a_clear_error(tmp_path):
    d = tmp_path / "a" / "vstar"
    d.mkdir(parents=True)
    f = d / "summary_metrics.json"
    f.write_text('{"overall_accuracy": {"mean": 0.5,')
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "insight_o3.scripts.gather_eval_results",
            "--settings",
            "a",
            "--datasets",
            "vstar",
            "--output_dir",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2
    assert str(f) in r.stderr and "not valid JSON" in r.stderr and "line 1" in r.stderr
    f.write_text('{"num_trials": 3}')
    assert g.main(["--settings", "a", "--datasets", "vstar", "--output_dir", str(tmp_path)]) == 2
    f.write_text('{"overall_accuracy": {"mean": "x"}}')
    try:
        g.load_summary(str(f))
    except g.SummaryError as e:
        assert "'overall_accuracy'" in str(e) and str(f) in str(e)
    else:
        raise AssertionError("no error")


def test_csv_cells_cannot_be_formulas_and_markdown_cells_cannot_shift(tmp_path):
    """A setting or category name that a spreadsheet would run (``=cmd|...``, ``=HYPERLINK``, ``+``, ``-``, ``@``)
    is written as text; a ``|`` or a line break in a name does not shift the Markdown table's columns."""
    setting = "=cmd|calc!A1"
    cats = {'=HYPERLINK("http://x","y")': (0.5,), "@SUM(1)": (0.25,), "a|b\nc": (0.75,)}
    write_summary(tmp_path, setting, "o3_bench", 0.5, cats=cats)
    csv, md = tmp_path / "t.csv", tmp_path / "t.md"
    argv = ["--settings", setting, "--datasets", "o3_bench", "--output_dir", str(tmp_path)]
    assert g.main([*argv, "--csv", str(csv), "--markdown", str(md)]) == 0
    df = pd.read_csv(csv, index_col=0, keep_default_na=False)
    cells = [str(c) for c in [*df.index, *df.columns, *df.to_numpy().ravel()]]
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")], cells
    assert "'=cmd|calc!A1" in cells and "'=HYPERLINK(\"http://x\",\"y\")" in cells and "'@SUM(1)" in cells
    lines = md.read_text().splitlines()
    assert len(lines) == 3  # header, rule, one row: no line break inside a cell
    widths = {len(line.replace("\\|", "").split("|")) for line in lines}
    assert len(widths) == 1, lines  # every line has the same number of cells
    assert g.csv_cell("-0.5") == "-0.5"  # a number stays a number
