"""``python -m insight_o3.scripts.export`` on a real InSight-o3 run (scripted vReasoner, vSearcher and judge
on local servers): the trajectories Parquet loaded back by pyarrow and by ``datasets.load_dataset`` equals
the records (conversation text, image references, vSearcher calls, verdicts, usage), and the leaderboard
entry agrees with the run's own metrics and card."""

from __future__ import annotations

import hashlib
import json

import pyarrow.parquet as pq
import pytest

from insight_o3.agents.records import expand_messages
from insight_o3.analysis.export import TRAJECTORY_SCHEMA, trajectory_rows
from insight_o3.analysis.run_records import read_run
from insight_o3.evaluation.schema import EvalRecord
from insight_o3.protocol.trajectory import message_text
from insight_o3.scripts import export
from tests.support.stacks import require_module


def _raw_records(eval_dir):
    out = []
    for k in (0, 1):
        lines = (eval_dir / f"trial_{k}" / "eval_records.jsonl").read_text().splitlines()
        out += sorted((json.loads(x) for x in lines), key=lambda r: r["index"])
    return out


@pytest.fixture(scope="module")
def exported(demo_eval_run, tmp_path_factory):
    out = tmp_path_factory.mktemp("export")
    assert export.main([str(demo_eval_run.eval_dir), "--out_dir", str(out)]) == 0
    return demo_eval_run, out


def test_trajectories_load_back_equal_to_the_records(exported):
    run, out = exported
    table = pq.read_table(out / "trajectories.parquet")
    assert table.schema.equals(TRAJECTORY_SCHEMA)
    rows = table.to_pylist()
    assert rows == trajectory_rows(read_run(run.eval_dir))
    raw = _raw_records(run.eval_dir)
    assert len(rows) == len(raw) == 8
    card = json.loads((run.eval_dir / "run_card.json").read_text())
    sha = hashlib.sha256(json.dumps(card, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    searched = 0
    for row, rec in zip(rows, raw):
        er = rec["eval_result"]
        assert (row["sample_key"], row["trial"], row["run_card_sha256"]) == (rec["sample_key"], rec["trial"], sha)
        assert (row["status"], row["response"], row["extracted_answer"]) == (
            er["status"],
            er["response"],
            er["extracted_answer"],
        )
        assert row["judge_outputs"] == er["judge_outputs"] and row["answer"] == rec["answer"]
        model_usage = rec.get("usage", {}).get("model")  # the column has unreported_requests always, records when > 0
        assert row["usage"]["model"] == (model_usage and {"unreported_requests": 0, **model_usage})
        assert row["cost_usd"] == rec.get("cost_usd")
        # the conversation: every message's text as the model saw it, every image as a reference (read through
        # EvalRecord: on disk the trajectory refers to the response instead of repeating it)
        traj = expand_messages(EvalRecord.from_dict(rec).eval_result.trajectory or [])
        assert [m["role"] for m in row["messages"]] == [m["role"] for m in traj]
        for got, want in zip(row["messages"], traj):
            text = "".join(p["text"] for p in got["content"] if p["type"] == "text")
            assert text == message_text(want)
        refs = [p["image"] for m in traj for p in m["content"] if p.get("type") == "image"]
        assert [(i["path"], i["region"], i["size"]) for i in row["images"]] == [
            (r["path"], [float(v) for v in r["region"]], r["size"]) for r in refs
        ]
        calls = [m["search"] for m in er["trajectory"] or [] if "search" in m]
        assert [(s["description"], s["status"], s["box_original"]) for s in row["searches"]] == [
            (c["description"], c["status"], c["box_original"]) for c in calls
        ]
        for s, c in zip(row["searches"], calls):
            assert len(s["messages"]) == len(c["trajectory"]) and s["images"]  # the vSearcher saw the image
            searched += 1
    assert searched >= 4  # the demo run's searching questions, in both trials
    by_key = {(r["sample_key"], r["trial"]): r for r in rows}
    failed = [r for r in rows if r["status"] == "failed"]
    assert failed and all(r["attribution"] == "lost" and r["blame"] is None for r in failed)
    assert {r["attribution"] for r in rows} >= {"correct", "lost"}
    assert all(by_key[(k, 0)]["question"] == by_key[(k, 1)]["question"] for k, _ in by_key)


def test_trajectories_load_with_datasets(exported, tmp_path, monkeypatch):
    datasets = require_module("datasets")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    run, out = exported
    ds = datasets.load_dataset(
        "parquet", data_files=str(out / "trajectories.parquet"), split="train", cache_dir=str(tmp_path / "hf")
    )
    assert ds.num_rows == 8
    assert ds.to_list() == trajectory_rows(read_run(run.eval_dir))
    first_search = next(r for r in ds if r["searches"])
    assert first_search["searches"][0]["messages"][0]["role"] == "system"


def test_leaderboard_agrees_with_the_run(exported, tmp_path):
    run, out = exported
    board = json.loads((out / "leaderboard.json").read_text())
    summary = json.loads((run.eval_dir / "summary_metrics.json").read_text())
    assert board["format"] == "insight_o3.leaderboard/1" and board["num_trials"] == 2 and board["num_samples"] == 4
    # items lost to API errors are left out (and counted); each sample's trials averaged
    recs = _raw_records(run.eval_dir)
    status = {}
    for r in recs:
        status.setdefault(r["sample_key"], []).append(r["eval_result"]["status"])
    lost = sum(v.count("failed") for v in status.values())
    other = board["failed"].pop("accuracy_other_rule")
    assert lost and board["failed"] == {
        "items": lost,
        "samples_without_a_judged_trial": sum(all(x == "failed" for x in v) for v in status.values()),
        "counted_as": "excluded",
    }
    judged = [[x == "correct" for x in v if x != "failed"] for v in status.values()]
    assert board["accuracy"]["mean"] == pytest.approx(
        sum(sum(v) / len(v) for v in judged if v) / sum(map(bool, judged))
    )
    lo, hi = board["accuracy"]["ci"]
    assert lo < board["accuracy"]["mean"] <= hi + 1e-12 and board["ci"]["confidence"] == 0.95
    # counted as wrong, it is the run's own accuracy
    as_wrong = tmp_path / "as-wrong"
    assert export.main([str(run.eval_dir), "--out_dir", str(as_wrong), "--failed_as_wrong"]) == 0
    wrong = json.loads((as_wrong / "leaderboard.json").read_text())
    assert wrong["accuracy"]["mean"] == pytest.approx(summary["overall_accuracy"]["mean"])
    for cat, acc in summary["category_accuracy"].items():
        assert wrong["categories"][cat]["mean"] == pytest.approx(acc["mean"])
    assert other["mean"] == wrong["accuracy"]["mean"] and wrong["failed"]["accuracy_other_rule"][
        "mean"
    ] == pytest.approx(board["accuracy"]["mean"])  # each rule's figure beside the other's
    # tokens per episode as compare counts them: the model's and the vSearcher's, the judge's apart
    assert board["tokens"]["total"] == summary["run_totals"]["tokens_total"]
    system = sum(
        u.get("prompt_tokens", 0) + u.get("completion_tokens", 0)
        for r in recs
        for role, u in (r.get("usage") or {}).items()
        if role != "judge"
    )
    assert board["tokens"]["per_episode"] == pytest.approx(system / len(recs))
    assert board["tokens"]["judge_per_episode"] > 0
    assert board["judge"]["model"] == "scripted-judge" and board["vsearcher_model"] == "scripted-searcher"
    assert board["run_card_sha256"] == read_run(run.eval_dir).card_sha256
    assert sum(board["attribution"].values()) == pytest.approx(1.0) and board["error_split"] is not None


def test_one_standard_deviation_over_trials():
    """The summary's std (gather's mean±std), the leaderboard's and the report's error bars are one number: np.std
    with ddof 0, as the released summary computes it (the leaderboard used ddof 1). Three trials at 50, 75 and
    25 % correct."""
    from pathlib import Path

    import numpy as np

    from insight_o3.analysis.export import leaderboard
    from insight_o3.analysis.run_records import RunRecords
    from insight_o3.evaluation.metrics import compute_metrics, summarize
    from insight_o3.viz.run_view import EvalRun, SampleResult, Trial, accuracy_by_category
    from tests.support.planted import outcome_trials

    correct = np.array([[True, True, False], [False, True, False], [True, True, False], [False, False, True]])
    trials = outcome_trials(correct, ["x"] * 4)
    summary = summarize([compute_metrics(t) for t in trials])
    board = leaderboard(RunRecords("/r", "r", trials, None))["accuracy"]
    assert board["per_trial"] == [0.5, 0.75, 0.25]
    assert board["std_over_trials"] == pytest.approx(summary["overall_accuracy"]["std"])
    assert board["std_over_trials"] == pytest.approx(np.std([0.5, 0.75, 0.25]))  # ddof 0
    view = EvalRun(
        Path("/r"),
        "r",
        [Trial(Path("/r"), k, [SampleResult(r, k) for r in t], {}, True) for k, t in enumerate(trials)],
        {},
        {},
    )
    bars = accuracy_by_category(view)
    assert bars.loc["overall", "std"] == pytest.approx(100 * board["std_over_trials"], abs=0.006)


def test_export_refuses_an_unfinished_run(tmp_path, capsys):
    (tmp_path / "e" / "trial_0").mkdir(parents=True)
    (tmp_path / "e" / "trial_0" / "eval_records.jsonl").write_text("")
    assert export.main([str(tmp_path / "e"), "--out_dir", str(tmp_path / "x")]) == 2
    assert "trial not finished" in capsys.readouterr().err


def test_export_and_compare_refuse_a_run_without_samples(tmp_path, capsys):
    """A finished run whose records file is empty: exit 2 naming it, nothing written (no NaN in JSON, no
    0-row Parquet)."""
    from insight_o3.scripts import compare

    run = tmp_path / "empty"
    (run / "trial_0").mkdir(parents=True)
    (run / "trial_0" / "eval_records.jsonl").write_text("")
    (run / "trial_0" / "done").write_text("")
    assert export.main([str(run), "--out_dir", str(tmp_path / "x")]) == 2
    assert "holds no samples" in capsys.readouterr().err and not (tmp_path / "x").exists()
    js = tmp_path / "c.json"
    assert compare.main([str(run), str(run), "--out", str(tmp_path / "c.html"), "--json", str(js)]) == 2
    assert "holds no samples" in capsys.readouterr().err and not js.exists()


def test_report_states_the_lost_items_and_tokens_per_episode(demo_eval_run, tmp_path):
    from insight_o3.viz.report import build_report

    page = build_report(demo_eval_run.eval_dir, max_samples=1, thumb_px=64)
    assert "were lost to API errors" in page and "leave them out of the accuracy and the paired test" in page
    assert "Tokens per episode:" in page and "(model + vSearcher; the judge" in page


def test_export_prints_the_samples_its_accuracy_counts_and_both_failure_rules():
    """A sample whose every trial was lost leaves the accuracy: the line says "3 of 4 samples", not 4, and gives
    the accuracy with the lost items counted as wrong beside."""
    import numpy as np

    from insight_o3.analysis.clusters import Cluster
    from insight_o3.analysis.export import leaderboard
    from insight_o3.analysis.run_records import RunRecords
    from tests.support.planted import outcome_trials

    correct = np.array([[True, True], [True, False], [False, False], [True, True]])
    trials = outcome_trials(correct, ["x"] * 4, failed={(3, 0), (3, 1)})
    entry = leaderboard(RunRecords("/r", "r", trials, None))
    lines = export.summary_lines("r", entry, 0.95, False, Cluster.IMAGE)
    assert "accuracy 50.0% " in lines[0] and "3 of 4 samples on 3 image(s) x 2 trial(s)" in lines[0]
    assert "2 item(s) lost to API errors: excluded (1 sample(s) without a judged trial)" in lines[1]
    assert "counted as wrong instead: 37.5% " in lines[1] and "on 4 samples" in lines[1]
