"""What a newcomer following the README and ``--help`` tripped on: one flag name per concept, help
that says what a flag does, a wrong flag answered with its closest names, a missing benchmark pointing to the data
root and data/README.md, a missing key naming the variable to set."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.endpoints.endpoint import Endpoint
from insight_o3.endpoints.preflight import EndpointError, check_endpoints
from insight_o3.evaluation.benchmarks import DATA_ROOT_ENV, resolve_layout
from insight_o3.scripts import build_o3_bench, compare, evaluate, export, report
from insight_o3.scripts._shared import HIDDEN_ALIASES

REPO = Path(__file__).resolve().parents[1]


def _help(main, argv: list[str], capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main([*argv, "--help"])
    assert e.value.code == 0
    return " ".join(capsys.readouterr().out.split())  # argparse wraps lines: compare the words


# ------------------------------------------------------------------------------------------------ item 4: flag names
def test_export_report_and_compare_use_the_one_output_flag_name(capsys):
    assert "--output_dir" in _help(export.main, ["x"], capsys)
    assert vars(export.build_parser().parse_args(["e", "--output_dir", "o"]))["out_dir"] == "o"
    assert vars(export.build_parser().parse_args(["e", "--out_dir", "o"]))["out_dir"] == "o"  # the hidden alias
    for mod, argv in ((report, ["e"]), (compare, ["a", "b"])):
        text = _help(mod.main, argv, capsys)
        assert "--output_file" in text and "--out " not in text and "--out," not in text
        assert mod.build_parser().parse_args([*argv, "--output_file", "p.html"]).out == "p.html"
        assert mod.build_parser().parse_args([*argv, "--out", "p.html"]).out == "p.html"  # the hidden alias
    assert {"--out", "--out_dir"} <= HIDDEN_ALIASES


def test_help_texts_are_whole_sentences_and_say_when_eval_name_is_required(capsys):
    text = _help(evaluate.main, [], capsys)
    assert "required with --ann_file" in text
    with pytest.raises(SystemExit) as e:
        evaluate.parse_args(["--ann_file", "a.jsonl", "--img_dir", "d", "--model", "m"])
    assert e.value.code == 2 and "--eval_name is required" in capsys.readouterr().err
    text = _help(build_o3_bench.main, ["filter"], capsys)
    assert "a model solves an item when any of its answers is judged correct" in text
    for step in ("extract", "synthesize"):
        text = _help(build_o3_bench.main, [step], capsys)
        assert "records.jsonl" in text and "resumes where it stopped" in text  # a description, not only flags


# ------------------------------------------------------------------------------------------------ item 7: wrong flag
@pytest.mark.parametrize(
    ("module", "argv", "wrong", "suggested"),
    [
        ("evaluate", ["--model", "m", "--num_trails", "3"], "--num_trails", "--num_trials"),
        ("export", ["x", "--ouput_dir", "o"], "--ouput_dir", "--output_dir"),
        (
            "build_o3_bench",
            ["filter", "--output_dir", "w", "--solver", "m", "--atempts", "2"],
            "--atempts",
            "--attempts",
        ),
        ("report", ["x", "--out_file", "r.html"], "--out_file", "--output_file"),
    ],
)
def test_a_wrong_flag_is_an_error_first_with_the_closest_names(module, argv, wrong, suggested):
    r = subprocess.run(
        [sys.executable, "-m", f"insight_o3.scripts.{module}", *argv],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = r.stderr.splitlines()
    assert r.returncode == 2
    assert lines[0].endswith(f"error: unrecognized arguments: {' '.join(argv[argv.index(wrong) :])}"), r.stderr
    assert lines[1].startswith(f"  {wrong}: did you mean {suggested}"), r.stderr
    assert len(lines) <= 4 and "usage:" not in r.stderr  # no page of usage before (or after) the error
    assert f"insight_o3.scripts.{module}" in lines[-1] and "--help" in lines[-1]


# ------------------------------------------------------------------------------------------------ item 5: data root
def test_a_missing_benchmark_names_the_data_root_and_data_readme(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    assert evaluate.main(["--benchmark", "o3_bench", "--model", "m", "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / "data" / "O3-Bench" / "test" / "metadata.jsonl") in err
    assert "data/README.md" in err and "--data_root" in err and DATA_ROOT_ENV in err


def test_the_data_root_comes_from_the_flag_or_the_environment(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    root = tmp_path / "elsewhere"
    (root / "vstar_bench").mkdir(parents=True)
    (root / "vstar_bench" / "vstar_bench.jsonl").write_text("")
    monkeypatch.delenv(DATA_ROOT_ENV, raising=False)
    a = evaluate.parse_args(["--benchmark", "vstar", "--model", "m", "--data_root", str(root)])
    assert (a.ann_file, a.img_dir) == (str(root / "vstar_bench" / "vstar_bench.jsonl"), str(root / "vstar_bench"))
    monkeypatch.setenv(DATA_ROOT_ENV, str(root))
    assert resolve_layout("vstar").ann_file == str(root / "vstar_bench" / "vstar_bench.jsonl")
    assert resolve_layout("visual_probe_hard").img_dir == str(root)  # its images are named under the root itself
    monkeypatch.delenv(DATA_ROOT_ENV)
    assert resolve_layout("vstar").ann_file == "data/vstar_bench/vstar_bench.jsonl"  # unchanged by default


# ------------------------------------------------------------------------------------------------ item 11: the key
@pytest.mark.parametrize(
    ("role", "variables"),
    [("model", "$OPENAI_API_KEY"), ("judge", "$JUDGE_API_KEY or $OPENAI_API_KEY"), ("vSearcher", "$VSEARCHER_API_KEY")],
)
def test_no_key_and_no_base_url_names_the_variable_to_set(role, variables):
    with pytest.raises(EndpointError) as e:
        check_endpoints([(role, Endpoint(base_url=None, api_key=None))])
    assert f"set {variables}" in str(e.value)


def test_evaluate_without_key_or_url_says_to_set_openai_api_key(tmp_path, monkeypatch, capsys):
    from tests.support import eval_bench as eb

    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "JUDGE_API_KEY", "JUDGE_API_BASE_URL", "JUDGE_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    ann, img = eb.make_bench(tmp_path / "bench")
    argv = ["--ann_file", str(ann), "--img_dir", str(img), "--model", "m", "--eval_name", "e"]
    assert evaluate.main([*argv, "--output_dir", str(tmp_path / "out"), "--no_progress"]) == 4
    assert "set $OPENAI_API_KEY" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ defect 3
def test_a_run_stopped_before_its_first_record_fixes_no_settings(tmp_path, openai_server, capsys):
    """A run stopped by the endpoint check (no record) does not fix the directory's settings: the retry with the
    URL fixed and another --img_max_pixels runs; once a record exists, a change is refused as before."""
    from tests.support import eval_bench as eb
    from tests.support.openai_server import closed_port_url

    bench = eb.make_bench(tmp_path / "bench")
    out = tmp_path / "out"
    srv, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    assert evaluate.main(eb.evaluate_argv(*bench, out, closed_port_url(), judge.base_url, max_retries=0)) == 4
    assert "is unreachable" in capsys.readouterr().err
    retry = eb.evaluate_argv(*bench, out, srv.base_url, judge.base_url, "--img_max_pixels", "50000")
    assert evaluate.main(retry) == 0, capsys.readouterr().err
    card = json.loads((out / "m" / "o3_bench" / "run_card.json").read_text())
    assert card["fixed_settings"]["img_max_pixels"] == 50000 and len(card["history"]) == 2
    again = eb.evaluate_argv(*bench, out, srv.base_url, judge.base_url, "--img_max_pixels", "60000")
    assert evaluate.main(again) == 2
    assert "img_max_pixels: first run 50000, this run 60000" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ item 8
def test_a_resumed_run_says_where_it_is_per_trial(tmp_path, openai_server, caplog):
    from tests.support import eval_bench as eb

    bench = eb.make_bench(tmp_path / "bench", n_images=4)
    out = tmp_path / "out"
    srv, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    argv = eb.evaluate_argv(*bench, out, srv.base_url, judge.base_url, "--num_trials", "2")
    caplog.set_level("INFO", logger="insight_o3.jobs.execute")
    assert evaluate.main([*argv, "--limit", "1"]) == 0  # (a subset of its own: a fresh directory)
    assert evaluate.main(argv) == 0
    first = [r.getMessage() for r in caplog.records if r.name == "insight_o3.jobs.execute"]
    n = len(eb.read_records(out / "m" / "o3_bench", 0))
    assert f"trial_0: 0 of {n} samples done, {n} left" in first and f"trial_1: 0 of {n} samples done, {n} left" in first
    # drop two records of trial 1: the resumed run says so before it starts
    log = out / "m" / "o3_bench" / "trial_1" / "eval_records.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines[:-2]) + "\n")
    (out / "m" / "o3_bench" / "trial_1" / "done").unlink(missing_ok=True)
    caplog.clear()
    assert evaluate.main(argv) == 0
    said = [r.getMessage() for r in caplog.records if r.name == "insight_o3.jobs.execute"]
    assert said[:2] == [f"trial_0: {n} of {n} samples done, 0 left", f"trial_1: {n - 2} of {n} samples done, 2 left"]
