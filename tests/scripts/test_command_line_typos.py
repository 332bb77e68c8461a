"""What a typo or an unset shell variable on a command line does: no abbreviation is taken for a flag, an unknown
flag is named even when a required one is missing, a subcommand points to its own ``--help``, an output name stays
below its output directory, an empty model name is refused, and a benchmark name is found whatever its case and
dashes."""

from __future__ import annotations

import argparse
import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.base.paths import BadOutputName, check_output_name
from insight_o3.evaluation.benchmarks import canonical_name
from insight_o3.scripts import build_o3_bench, evaluate, evaluate_vsearch, rejudge

REPO = Path(__file__).resolve().parents[2]


def _exit(main, argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(argv)
    return int(e.value.code or 0), capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ abbreviations
@pytest.mark.smoke
def test_an_abbreviated_flag_is_unknown_not_taken_for_the_longer_one(capsys):
    code, err = _exit(evaluate.parse_args, ["--benchmark", "vstar", "--model", "m", "--num_trial", "2"], capsys)
    assert code == 2
    assert "unrecognized arguments: --num_trial 2" in err and "did you mean --num_trials" in err
    code, err = _exit(build_o3_bench.build_parser().parse_args, ["filter", "--output_dir", "w", "--solv", "m"], capsys)
    assert code == 2 and "--solv" in err  # subcommands too


def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def test_every_command_and_subcommand_parser_takes_no_abbreviation():
    for path in sorted((REPO / "insight_o3" / "scripts").glob("[a-z]*.py")):
        mod = importlib.import_module(f"insight_o3.scripts.{path.stem}")
        builders = [getattr(mod, n) for n in dir(mod) if n.startswith("build") and n.endswith("parser")]
        if not builders:  # a parser made inside main: from the factory, whose class forces allow_abbrev=False
            text = path.read_text(encoding="utf-8")
            assert "new_parser(" in text and "ArgumentParser(" not in text, path
        for build in builders:
            for parser in _parsers(build()):
                assert parser.allow_abbrev is False, (path.name, parser.prog)


def test_every_plain_argument_parser_of_the_repository_turns_abbreviations_off():
    """Each ``argparse.ArgumentParser(...)`` (and ``add_parser`` of a plain one) outside the commands' factory passes
    ``allow_abbrev=False``: the developer scripts, the recipe's tools and the test helpers."""
    offenders = []
    for top in ("insight_o3", "scripts", "data", "tests", "training", "verl/recipe"):
        for path in (REPO / top).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            if path.name == "_shared.py" or path.name == Path(__file__).name or "new_parser" in text:
                continue
            for node in ast.walk(ast.parse(text)):
                f = node.func if isinstance(node, ast.Call) else None
                name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
                if name in ("ArgumentParser", "add_parser") and not any(
                    k.arg == "allow_abbrev" and isinstance(k.value, ast.Constant) and k.value.value is False
                    for k in node.keywords  # type: ignore[attr-defined]
                ):
                    offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")  # type: ignore[attr-defined]
    assert not offenders


# ------------------------------------------------------------------------------------------------ unknown + missing
def test_a_misspelt_required_flag_is_named_with_the_missing_one(capsys):
    code, err = _exit(evaluate.parse_args, ["--modle", "x", "--benchmark", "vstar"], capsys)
    lines = err.splitlines()
    assert code == 2
    assert "unrecognized arguments: --modle" in lines[0] and "required: --model" in lines[0]
    assert lines[1].strip() == "--modle: did you mean --model or --judge_model?"


def test_a_subcommands_unknown_flag_points_to_the_subcommands_help():
    r = subprocess.run(
        [sys.executable, "-m", "insight_o3.scripts.build_o3_bench", "extract", "--output_dir", "w", "--modle", "x"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == "(all flags: python -m insight_o3.scripts.build_o3_bench extract --help)"
    assert "--modle: did you mean --model" in r.stderr


# ------------------------------------------------------------------------------------------------ --ann_file message
def test_a_missing_ann_file_is_named_as_such_not_as_a_benchmark(tmp_path, capsys):
    missing = tmp_path / "mine.jsonl"
    rc = evaluate.main(["--ann_file", str(missing), "--img_dir", str(tmp_path), "--eval_name", "e", "--model", "m"])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"--ann_file {missing}: annotation file not found" in err and "--benchmark" not in err


# ------------------------------------------------------------------------------------------------ benchmark names
@pytest.mark.parametrize(
    "written, name",
    [
        ("O3-Bench", "o3_bench"),
        ("o3bench", "o3_bench"),
        ("HR-Bench-4K", "hr_bench_4k"),
        ("VisualProbe_Hard", "visual_probe_hard"),
        ("MME-RealWorld-Lite", "mme_realworld_lite"),
        ("VStar", "vstar"),
    ],
)
def test_a_benchmark_name_is_found_whatever_its_case_and_dashes(written, name):
    assert canonical_name(written) == name
    assert evaluate.parse_args(["--benchmark", written, "--model", "m"]).run.eval_name == f"m/{name}"


def test_an_unknown_benchmark_lists_the_choices(capsys):
    code, err = _exit(evaluate.parse_args, ["--benchmark", "o4_bench", "--model", "m"], capsys)
    assert code == 2 and "unknown benchmark 'o4_bench'" in err and "o3_bench" in err


# ------------------------------------------------------------------------------------------------ output names
@pytest.mark.parametrize("name", ["", "  ", "/o3_bench", "../x", "a/../../b", "a//b", "./x", "~/x"])
def test_an_output_name_that_leaves_its_directory_or_names_nothing_is_refused(name):
    with pytest.raises(BadOutputName):
        check_output_name(name)


@pytest.mark.parametrize("name", ["gpt-5/o3_bench", "openai/gpt-5-mini+deepeyes/vstar", "x@subset-1a2b"])
def test_an_ordinary_output_name_is_kept(name):
    assert check_output_name(name) == name


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--eval_name", "/o3_bench", "--model", "m", "--ann_file", "a", "--img_dir", "i"], "--eval_name"),
        (["--eval_name", "../up", "--model", "m", "--ann_file", "a", "--img_dir", "i"], "--eval_name"),
        (["--eval_name", "", "--model", "m", "--ann_file", "a", "--img_dir", "i"], "--eval_name"),
        (["--eval_name", "e", "--model", "", "--ann_file", "a", "--img_dir", "i"], "--model"),
        (["--benchmark", "vstar", "--model", "../.."], "--eval_name"),  # the default name <model>/<benchmark>
        (["--benchmark", "vstar", "--model", "m", "--vsearcher_model", ""], "--vsearcher_model"),
        (["--benchmark", "vstar", "--model", "m", "--judge_model", ""], "--judge_model"),
    ],
)
def test_evaluate_refuses_an_output_name_outside_output_dir_and_empty_names(argv, flag, capsys):
    code, err = _exit(evaluate.parse_args, argv, capsys)
    assert code == 2 and flag in err


def test_the_readme_command_with_model_unset_writes_nothing_at_the_filesystem_root(tmp_path, capsys):
    """``--eval_name "$MODEL/o3_bench" --model "$MODEL"`` with ``$MODEL`` unset: refused before anything is written."""
    argv = ["--eval_name", "/o3_bench", "--model", "", "--ann_file", "a.jsonl", "--img_dir", str(tmp_path)]
    code, err = _exit(evaluate.main, argv, capsys)
    assert code == 2 and "must be relative" in err or "must not be empty" in err
    assert not os.path.exists("/o3_bench")


def test_rejudge_and_evaluate_vsearch_check_their_output_names_too(capsys):
    code, err = _exit(rejudge.main, ["outputs/eval/x", "--judge_model", "j", "--eval_name", "/abs"], capsys)
    assert code == 2 and "--eval_name" in err
    code, err = _exit(evaluate_vsearch.main, ["--model", "..", "--ann_file", "a", "--img_dir", "i"], capsys)
    assert code == 2 and "--model" in err
