"""insight_o3.evaluation.run_dir.RunDir: the one reader/writer of an evaluation run directory —
format_version in what it writes, a clear error for a newer one, runs written before versioning still load."""

from __future__ import annotations

import json

import pytest

from insight_o3.evaluation.run_dir import FORMAT_VERSION, NewerFormatError, RunDir, RunDirError
from insight_o3.scripts import gather_eval_results, rejudge, report

pytestmark = pytest.mark.smoke

REC = {
    "index": 0,
    "sample_key": "q0",
    "question": "Q?",
    "answer": "A",
    "trial": 0,
    "eval_result": {"status": "correct", "is_correct": True, "response": "A", "finish_reason": "stop"},
}


def _old_run(path, with_card=False):
    """A run as this project wrote it before run directories were versioned."""
    (path / "trial_0").mkdir(parents=True)
    (path / "trial_0" / "eval_records.jsonl").write_text(json.dumps(REC) + "\n")
    (path / "trial_0" / "eval_metrics.json").write_text(json.dumps({"overall_accuracy": 1.0}))
    (path / "trial_0" / "done").write_text('{"done": true}\n')
    (path / "args.json").write_text(json.dumps({"eval_name": "m/o3_bench", "model": "m"}))
    (path / "summary_metrics.json").write_text(json.dumps({"overall_accuracy": {"mean": 1.0, "std": 0.0}}))
    if with_card:
        (path / "run_card.json").write_text(json.dumps({"model": "m"}))
    return RunDir(path)


def test_runs_written_before_versioning_load(tmp_path):
    rd = _old_run(tmp_path / "run")
    assert rd.format_version() == 1 and rd.check_format() is rd
    assert rd.trials() == [0] and rd.is_done(0)
    assert rd.records(0)["q0"].status == "correct"
    assert rd.args()["model"] == "m" and rd.summary()["overall_accuracy"]["mean"] == 1.0
    assert rd.trial_metrics(0) == {"overall_accuracy": 1.0} and rd.run_card() is None


def test_the_card_it_writes_carries_the_format_version(tmp_path):
    rd = RunDir(tmp_path)
    rd.write_run_card({"model": "m", "format_version": 0})
    card = json.loads((tmp_path / "run_card.json").read_text())
    assert list(card)[0] == "format_version" and card["format_version"] == FORMAT_VERSION and card["model"] == "m"


def test_a_torn_last_line_is_skipped_and_nothing_is_modified(tmp_path):
    rd = _old_run(tmp_path)
    path = tmp_path / "trial_0" / "eval_records.jsonl"
    path.write_text(path.read_text() + '{"sample_key": "q1", "eval')
    before = path.read_bytes()
    assert list(rd.records(0)) == ["q0"]
    assert path.read_bytes() == before
    path.write_text('{"bad\n' + json.dumps(REC) + "\n")
    with pytest.raises(RunDirError, match=r"eval_records.jsonl:1: malformed JSON"):
        rd.records(0)


def _newer(tmp_path):
    rd = _old_run(tmp_path / "m" / "o3_bench", with_card=True)
    (tmp_path / "m" / "o3_bench" / "run_card.json").write_text(json.dumps({"format_version": FORMAT_VERSION + 1}))
    return rd


def test_a_newer_format_is_a_clear_error(tmp_path):
    rd = _newer(tmp_path)
    with pytest.raises(NewerFormatError, match=rf"run_card.json: format_version {FORMAT_VERSION + 1} .* newer"):
        rd.check_format()


def test_every_reader_refuses_a_newer_format(tmp_path, capsys):
    rd = _newer(tmp_path)
    assert rejudge.main([rd.path, "--judge_model", "j", "--no_progress"]) == 2
    assert "newer insight_o3" in capsys.readouterr().err
    assert report.main([rd.path, "--out", str(tmp_path / "r.html")]) == 2
    assert "newer insight_o3" in capsys.readouterr().err
    assert gather_eval_results.main(["--settings", "m", "--datasets", "o3_bench", "--output_dir", str(tmp_path)]) == 2
    assert "newer insight_o3" in capsys.readouterr().err
