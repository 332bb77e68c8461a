"""How many trials a run directory holds, and every reader agreeing on it.

The rule: a rerun with more ``--num_trials`` extends the run (trial_<k> added; the card's history records each
run's count); a rerun with fewer is refused (status 2, nothing written), naming what the directory holds and what
was asked. Every reader counts trials with :meth:`RunDir.trial_count`: the summary, ``gather_eval_results``, the
report, ``compare``/``export`` (``read_run``), ``rejudge`` and the resume line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from insight_o3.analysis.run_records import read_run
from insight_o3.evaluation.run_dir import RunDir, StaleSummary
from insight_o3.scripts import evaluate, export, gather_eval_results, rejudge
from insight_o3.viz.run_view import load_run
from tests.support import eval_bench as eb


def _snapshot(d: Path) -> dict[str, bytes]:
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file() and p.name != ".lock"}


@pytest.fixture
def servers(openai_server):
    return openai_server(eb.model_script()), openai_server(eb.judge_script())


def _argv(tmp_path, servers, trials: int) -> list[str]:
    srv, judge = servers
    if not (tmp_path / "bench").exists():
        eb.make_bench(tmp_path / "bench")
    bench = tmp_path / "bench" / "test" / "metadata.jsonl", tmp_path / "bench" / "test"
    return eb.evaluate_argv(*bench, tmp_path / "out", srv.base_url, judge.base_url, "--num_trials", str(trials))


def test_more_trials_extend_the_run_and_fewer_are_refused_naming_both(tmp_path, servers, caplog, capsys):
    eval_dir = tmp_path / "out" / "m" / "o3_bench"
    assert evaluate.main(_argv(tmp_path, servers, 2)) == 0
    n = len(eb.read_records(eval_dir, 0))
    caplog.set_level("INFO", logger="insight_o3.jobs.execute")
    assert evaluate.main(_argv(tmp_path, servers, 3)) == 0  # an extension: trial_2 added
    said = [r.getMessage() for r in caplog.records if r.name == "insight_o3.jobs.execute"]
    assert said[:3] == [
        f"trial_0: {n} of {n} samples done, 0 left",
        f"trial_1: {n} of {n} samples done, 0 left",
        f"trial_2: 0 of {n} samples done, {n} left",
    ]
    card = json.loads((eval_dir / "run_card.json").read_text())
    assert [h["settings"]["num_trials"] for h in card["history"]] == [2, 3]
    assert json.loads((eval_dir / "summary_metrics.json").read_text())["num_trials"] == 3

    before = _snapshot(eval_dir)
    capsys.readouterr()
    assert evaluate.main(_argv(tmp_path, servers, 2)) == 2
    err = capsys.readouterr().err
    assert "num_trials" in err and "holds 3" in err and "this run 2" in err, err
    assert _snapshot(eval_dir) == before  # nothing written: not the card, not the summary
    assert evaluate.main(_argv(tmp_path, servers, 1)) == 2

    # every reader agrees on 3
    assert RunDir(eval_dir).trial_count() == 3 and RunDir(eval_dir).summary()["num_trials"] == 3
    assert len(read_run(eval_dir).trials) == 3  # compare, export, judge agreement
    assert len(load_run(eval_dir).trials) == 3  # report, viewer
    assert export.main([str(eval_dir), "--output_dir", str(tmp_path / "exp")]) == 0
    assert json.loads((tmp_path / "exp" / "leaderboard.json").read_text())["num_trials"] == 3
    capsys.readouterr()
    rc = gather_eval_results.main(["--settings", "m", "--datasets", "o3_bench", "--output_dir", str(tmp_path / "out")])
    assert rc == 0 and "@3" in capsys.readouterr().out
    judge = servers[1]
    rj = [str(eval_dir), "--judge_model", "scripted-judge", "--judge_api_base_url", judge.base_url]
    assert rejudge.main([*rj, "--judge_api_key", "k", "--no_progress"]) == 0
    rejudged = json.loads(
        (tmp_path / "out" / "m" / "o3_bench@rejudge-scripted-judge" / "summary_metrics.json").read_text()
    )
    assert rejudged["num_trials"] == 3


def _stale(tmp_path, servers) -> Path:
    """A directory as the code before the rule left it: 3 trials, then a rerun with 2 rewrote the summary."""
    eval_dir = tmp_path / "out" / "m" / "o3_bench"
    assert evaluate.main(_argv(tmp_path, servers, 2)) == 0
    two = (eval_dir / "summary_metrics.json").read_bytes()
    assert evaluate.main(_argv(tmp_path, servers, 3)) == 0
    (eval_dir / "summary_metrics.json").write_bytes(two)
    return eval_dir


def test_a_summary_over_fewer_trials_than_the_directory_holds_is_not_shown_as_the_run(tmp_path, servers, capsys):
    eval_dir = _stale(tmp_path, servers)
    with pytest.raises(StaleSummary, match=r"summary_metrics.json covers 2 trial\(s\); the directory holds 3"):
        RunDir(eval_dir).summary()
    capsys.readouterr()
    rc = gather_eval_results.main(["--settings", "m", "--datasets", "o3_bench", "--output_dir", str(tmp_path / "out")])
    out = capsys.readouterr().out
    assert rc == 0 and "@2" not in out and "covers 2 trial(s); the directory holds 3" in out, out
    assert load_run(eval_dir).summary == {}  # the report shows its 3 trials, not the stale numbers
    assert evaluate.main(_argv(tmp_path, servers, 3)) == 0  # resuming with the directory's count rewrites it
    assert RunDir(eval_dir).summary()["num_trials"] == 3


def test_a_summary_without_trial_directories_is_read_as_it_is(tmp_path):
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "summary_metrics.json").write_text(json.dumps({"num_trials": 3, "overall_accuracy": 0.5}))
    assert RunDir(tmp_path / "r").trial_count() == 0 and RunDir(tmp_path / "r").summary()["num_trials"] == 3


def test_a_trial_directory_without_a_record_is_not_a_trial(tmp_path, servers, caplog):
    """A run stopped before its first record (e.g. at the endpoint check) left trial directories with empty
    logs: they hold nothing, so a rerun with fewer trials is not refused, and no reader counts them."""
    eval_dir = tmp_path / "out" / "m" / "o3_bench"
    assert evaluate.main(_argv(tmp_path, servers, 2)) == 0
    (eval_dir / "trial_2").mkdir()
    (eval_dir / "trial_2" / "eval_records.jsonl").write_text("")
    (eval_dir / "trial_3").mkdir()
    assert RunDir(eval_dir).trial_count() == 2
    assert evaluate.main(_argv(tmp_path, servers, 2)) == 0
    assert len(read_run(eval_dir).trials) == 2 and len(load_run(eval_dir).trials) == 2
    assert RunDir(eval_dir).summary()["num_trials"] == 2


def test_a_gap_in_the_trials_is_counted_and_named(tmp_path, servers):
    eval_dir = tmp_path / "out" / "m" / "o3_bench"
    assert evaluate.main(_argv(tmp_path, servers, 3)) == 0
    shutil.rmtree(eval_dir / "trial_1")
    assert RunDir(eval_dir).trial_count() == 3
    with pytest.raises(ValueError, match=r"trial_1"):
        read_run(eval_dir)
