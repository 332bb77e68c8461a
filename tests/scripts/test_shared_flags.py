"""Shared flag names are really shared (defined once in insight_o3.scripts._shared): one spelling in every command, the
older spellings still parsed (and left out of --help), the original README's command lines still work, one
default output root."""

from __future__ import annotations

import argparse
import os
import re
import shlex
from pathlib import Path

import pytest

from insight_o3.scripts import (
    check_reliability,
    evaluate,
    evaluate_vsearch,
    filter_difficulty,
    gather_eval_results,
)
from insight_o3.scripts._shared import OUTPUT_ROOT
from tests.support.commands import api_commands, command_parsers

REPO = Path(__file__).resolve().parents[2]


def _options(p: argparse.ArgumentParser) -> dict[str, str]:
    return {s: a.dest for a in p._actions for s in a.option_strings}


# (command, old spelling, current spelling, dest)
ALIASES = [
    ("filter_difficulty", "--max_pixels", "--img_max_pixels", "img_max_pixels"),
    ("check_reliability", "--max_pixels", "--img_max_pixels", "img_max_pixels"),
    ("build_region_localization", "--max_pixels", "--img_max_pixels", "img_max_pixels"),
    ("build_o3_bench extract", "--max_pixels", "--img_max_pixels", "img_max_pixels"),
    ("evaluate_vsearch", "--max_pixels", "--vsearcher_max_pixels", "vsearcher_max_pixels"),
    ("evaluate_vsearch", "--prompt", "--vsearcher_prompt", "vsearcher_prompt"),
    ("filter_difficulty", "--separate_attempt_requests", "--separate_trial_requests", "separate_trial_requests"),
    ("build_o3_bench filter", "--separate_attempt_requests", "--separate_trial_requests", "separate_trial_requests"),
    ("filter_difficulty", "--judge_base_url", "--judge_api_base_url", "judge_api_base_url"),
    ("check_reliability", "--judge_base_url", "--judge_api_base_url", "judge_api_base_url"),
    ("evaluate", "--judge_base_url", "--judge_api_base_url", "judge_api_base_url"),
]


@pytest.mark.parametrize("command, old, new, dest", ALIASES)
def test_old_spellings_parse_to_the_same_setting_and_are_hidden(command, old, new, dest):
    p = command_parsers()[command]
    opts = _options(p)
    assert opts[old] == opts[new] == dest
    help_text = p.format_help()
    assert new in help_text and f"{old} " not in help_text and f"{old}," not in help_text


@pytest.mark.parametrize(
    "flags",
    [
        ("--judge_model", "--judge_api_base_url", "--judge_api_key"),
        ("--skip_endpoint_check", "--client_timeout", "--max_retries"),
    ],
)
def test_the_judge_and_client_flags_are_spelled_alike_everywhere(flags):
    judging = {c: p for c, p in api_commands().items() if any("judge" in o for o in _options(p))}
    assert {"evaluate", "rejudge", "filter_difficulty", "check_reliability", "build_o3_bench filter"} <= judging.keys()
    for command, p in judging.items():
        opts = _options(p)
        assert all(f in opts for f in flags), (command, [f for f in flags if f not in opts])


def test_the_image_budget_and_vsearcher_flags_are_spelled_alike():
    ev, vs = _options(evaluate.build_parser()), _options(evaluate_vsearch.build_parser())
    assert {"--vsearcher_max_pixels", "--vsearcher_prompt"} <= ev.keys() & vs.keys()
    for command in ("evaluate", "filter_difficulty", "check_reliability", "build_region_localization"):
        assert _options(command_parsers()[command])["--img_max_pixels"] == "img_max_pixels"
    assert ev["--separate_trial_requests"] == _options(filter_difficulty.build_parser())["--separate_trial_requests"]


def test_check_reliability_has_the_run_flags_and_the_older_key_variable_flag():
    p = check_reliability.build_parser()
    opts = _options(p)
    assert {"--max_failure_ratio", "--image_workers", "--judge_api_key", "--judge_api_key_env"} <= opts.keys()
    assert "--judge_api_key_env" not in p.format_help()


def test_gather_output_dir_has_help_and_every_default_root_is_outputs():
    p = gather_eval_results.build_parser()
    action = next(a for a in p._actions if "--output_dir" in a.option_strings)
    assert action.help and action.default == os.path.join(OUTPUT_ROOT, "eval")
    ev = next(a for a in evaluate.build_parser()._actions if "--output_dir" in a.option_strings)
    assert ev.default == action.default  # gather reads where evaluate writes
    assert OUTPUT_ROOT == "outputs"
    vs = next(a for a in evaluate_vsearch.build_parser()._actions if "--output_dir" in a.option_strings)
    assert f"{OUTPUT_ROOT}/vsearch/<model>" in vs.help


def test_the_original_readme_command_still_parses(reference_text):
    text = reference_text("seeds", "insight_o3_readme.txt").read_text()
    start = text.index("python -m insight_o3.scripts.evaluate")
    end = text.index('--img_dir "data/O3-Bench/test"', start) + len('--img_dir "data/O3-Bench/test"')
    argv = shlex.split(text[start:end].replace("\\\n", " "))[3:]
    values = {"$MODEL": "m", "$API_BASE_URL": "http://x/v1", "$API_KEY": "k", "$JUDGE_MODEL": "j"}
    values |= {"$JUDGE_API_BASE_URL": "http://y/v1", "$JUDGE_API_KEY": "jk"}
    argv = [values.get(x, x.replace("$MODEL", "m")) for x in argv]
    a = evaluate.build_parser().parse_args([*argv, "--num_trials", "3"])
    assert (a.model, a.judge_model, a.judge_api_base_url, a.num_trials) == ("m", "j", "http://y/v1", 3)
    assert a.output_dir == os.path.join("outputs", "eval")  # "saved under outputs/eval/<eval_name>"


def test_run_flags_come_from_one_definition():
    """The same help text everywhere: each command adds them through cli.add_run_flags / add_client_flags."""

    def helps(p: argparse.ArgumentParser) -> dict[str, str | None]:  # a command may pick its own default
        return {s: re.sub(r" \(default: [^)]*\)$", "", a.help or "") for a in p._actions for s in a.option_strings}

    shared = ("--max_failure_ratio", "--no_progress", "--skip_endpoint_check", "--client_timeout")
    seen: dict[str, set] = {f: set() for f in shared}
    for p in api_commands().values():
        h = helps(p)
        for f in shared:
            seen[f].add(h[f])
    assert all(len(v) == 1 for v in seen.values()), seen
