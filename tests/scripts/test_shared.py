"""The command-line contract shared by every command: console scripts, ``--help``, the exit-code table,
``run_main``'s error mapping, shared flag names with hidden old spellings, and per-command exit codes
(0 ok, 1 incomplete work, 2 bad input) where the command's own test module does not already show them."""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from insight_o3.endpoints import guard as run_guard
from insight_o3.endpoints.guard import FailureRatioError
from insight_o3.protocol.limits import LIMITS
from insight_o3.scripts._shared import BadInput, ExitCode, run_main
from insight_o3.storage.atomic import OutputError
from insight_o3.storage.lock import RunLockedError
from tests.support.commands import api_commands, console_scripts, with_subcommands

REPO = Path(__file__).resolve().parents[2]
COMMANDS = sorted(p.stem for p in (REPO / "insight_o3" / "scripts").glob("*.py") if not p.stem.startswith("_"))


def test_every_command_is_a_console_script():
    expected = {f"insight-o3-{name.replace('_', '-')}": f"insight_o3.scripts.{name}:main" for name in COMMANDS}
    assert console_scripts() == expected
    assert "filter_difficulty" in COMMANDS and "evaluate" in COMMANDS


@pytest.mark.parametrize("script", sorted(console_scripts()))
def test_console_script_resolves_and_help_exits_0(script, capsys):
    module, attr = console_scripts()[script].split(":")
    main = getattr(importlib.import_module(module), attr)
    assert callable(main)
    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage:") and "--help" in out


@pytest.mark.parametrize("sub", ["pool", "filter"])
def test_generate_collages_subcommands_help_exits_0(sub, capsys):
    from insight_o3.scripts import generate_collages

    with pytest.raises(SystemExit) as e:
        generate_collages.main([sub, "--help"])
    assert e.value.code == 0
    assert f"generate_collages {sub}" in capsys.readouterr().out


def test_the_installed_console_script_runs():
    """The entry point as pip installed it (skipped only when the venv predates the new entries)."""
    exe = Path(sys.executable).with_name("insight-o3-filter-difficulty")
    if not exe.exists():
        pytest.skip("console scripts not (re)installed in this venv: pip install -e .")
    r = subprocess.run([str(exe), "--help"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "--output_dir" in r.stdout


def test_exit_codes_are_one_table():
    assert [(c.name, int(c)) for c in ExitCode] == [
        ("OK", 0),
        ("INCOMPLETE", 1),
        ("BAD_INPUT", 2),
        ("OUTPUT_ERROR", 3),
        ("STOPPED", 4),
        ("LOCKED", 5),
    ]
    assert (run_guard.EXIT_BAD_INPUT, run_guard.EXIT_OUTPUT_ERROR, run_guard.EXIT_API_STOP, run_guard.EXIT_LOCKED) == (
        ExitCode.BAD_INPUT,
        ExitCode.OUTPUT_ERROR,
        ExitCode.STOPPED,
        ExitCode.LOCKED,
    )


def _raise(e):
    def body():
        raise e

    return body


def test_run_main_maps_each_way_a_command_ends(tmp_path, capsys):
    assert run_main(lambda: ExitCode.INCOMPLETE) == 1
    assert run_main(_raise(BadInput("f.jsonl:3: field 'x' sk-SECRET"))) == 2
    assert capsys.readouterr().err == "error: f.jsonl:3: field 'x' sk-SECRET\n"
    assert run_main(_raise(KeyError("k")), bad_input=(KeyError,), redact=lambda s: s.replace("k", "*")) == 2
    assert run_main(_raise(FailureRatioError("model", None, 9, 10, 0.5, "boom")), results="out/records.jsonl") == 4
    assert "Samples finished before this are safe in out/records.jsonl" in capsys.readouterr().err
    assert run_main(_raise(OutputError.from_os_error(str(tmp_path / "x"), OSError(28, "No space"), "write"))) == 3
    assert run_main(_raise(RunLockedError(str(tmp_path), None))) == 5
    with pytest.raises(ZeroDivisionError):  # a bug stays a traceback, never a made-up exit code
        run_main(_raise(ZeroDivisionError()))


def test_old_flag_spellings_still_work_but_are_hidden():
    from insight_o3.scripts import build_region_localization, filter_difficulty

    p = build_region_localization.build_parser()
    old = p.parse_args(["--layouts", "l", "--out_dir", "o", "--base_url", "u", "--timeout", "5"])
    new = p.parse_args(["--layouts", "l", "--output_dir", "o", "--api_base_url", "u", "--client_timeout", "5"])
    assert vars(old) == vars(new)
    help_text = p.format_help()
    for shown in (
        "--output_dir",
        "--api_base_url",
        "--client_timeout",
        "--max_retries",
        "--concurrency",
        "--max_failure_ratio",
        "--no_progress",
    ):
        assert shown in help_text
    for hidden in ("--out_dir", "--base_url", "--timeout "):
        assert hidden not in help_text
    f = filter_difficulty.build_parser()
    assert vars(f.parse_args(["--out_dir", "o", "--model", "m", "--judge_base_url", "j"])) == vars(
        f.parse_args(["--output_dir", "o", "--model", "m", "--judge_api_base_url", "j"])
    )


def test_shared_concepts_have_one_flag_name():
    """Every command that talks to an API spells the shared flags the way ``evaluate`` does."""

    for name, p in api_commands().items():
        opts = {s for a in p._actions for s in a.option_strings}
        assert {"--output_dir", "--concurrency", "--max_retries", "--client_timeout"} <= opts, name
        # check_reliability: its checkers' endpoints are in --checker MODEL,URL,KEY_ENV; rejudge and
        # build_reasoning_data check and score (the two tiers): a judge or a scorer only
        if name not in ("check_reliability", "rejudge", "build_reasoning_data check", "build_reasoning_data score"):
            assert {"--api_base_url", "--api_key", "--max_failure_ratio"} <= opts, name
        assert "--no_progress" in opts, name


def test_protocol_limits_are_the_defaults_everywhere():
    from insight_o3.agents.reasoner_session import ROUND_ATTEMPTS
    from insight_o3.scripts import evaluate, evaluate_vsearch, filter_difficulty

    assert (
        LIMITS.max_search_calls,
        LIMITS.max_tool_calls,
        LIMITS.max_format_retries_train,
        LIMITS.max_format_retries_eval,
        LIMITS.difficulty_attempts,
    ) == (6, 6, 2, 4, 3)
    assert ROUND_ATTEMPTS == {"infer": 5, "train": 3}
    assert evaluate.build_parser().get_default("max_vsearch_calls") == LIMITS.max_search_calls
    assert evaluate_vsearch.build_parser().get_default("max_tool_calls") == LIMITS.max_tool_calls
    assert filter_difficulty.build_parser().get_default("attempts") == LIMITS.difficulty_attempts
    with pytest.raises(AttributeError):  # dataclasses.FrozenInstanceError
        LIMITS.max_tool_calls = 7  # frozen


# ----------------------------------------------------------------------------- per-command exit codes
def test_generate_collages_filter_exits_1_while_collages_are_lost(tmp_path, openai_server):
    """The documented contract of ``generate_collages filter`` (also ``filter_difficulty``)."""
    from insight_o3.scripts import generate_collages
    from tests.support.difficulty_bench import ITEMS, KEY, make_collages, script

    out = tmp_path / "collages"
    make_collages(out, ITEMS)
    srv = openai_server(script({"fail_reasoner": "c4"}))
    argv = [
        "filter",
        "--output_dir",
        str(out),
        "--model",
        "vr",
        "--judge_model",
        "judge",
        "--api_base_url",
        srv.base_url,
        "--api_key",
        KEY,
        "--max_retries",
        "0",
        "--no_progress",
    ]
    assert generate_collages.main(argv) == ExitCode.INCOMPLETE
    srv2 = openai_server(script({}))
    argv[argv.index("--api_base_url") + 1] = srv2.base_url
    assert generate_collages.main(argv) == ExitCode.OK


def test_bad_collages_file_is_bad_input(tmp_path, capsys):
    from insight_o3.scripts import filter_difficulty

    (tmp_path / "collages.jsonl").write_text(json.dumps({"sample_key": "k", "image": "i.png", "question": "q"}) + "\n")
    assert filter_difficulty.main(["--output_dir", str(tmp_path), "--model", "m", "--no_progress"]) == 2
    err = capsys.readouterr().err
    assert "collages.jsonl:1: field 'answer' is missing or empty" in err and "Traceback" not in err
    with pytest.raises(SystemExit) as e:
        filter_difficulty.main(["--output_dir", str(tmp_path), "--model", "m", "--attempts", "0"])
    assert e.value.code == 2


def test_generate_collages_bad_input_exits_2(tmp_path, capsys):
    from insight_o3.scripts import generate_collages

    (tmp_path / "bad.jsonl").write_text("{not json\n")
    argv = [
        "--source_pool",
        str(tmp_path / "bad.jsonl"),
        "--output_dir",
        str(tmp_path / "o"),
        "--num_collages",
        "1",
        "--no_progress",
    ]
    assert generate_collages.main(argv) == 2
    assert "bad.jsonl:1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # an invalid Algorithm 1 range is a usage error, not a traceback
        generate_collages.main(
            ["--source_pool", "p", "--output_dir", "o", "--num_collages", "1", "--canvas_area", "5", "1"]
        )
    assert e.value.code == 2
    pool, out = tmp_path / "pool.jsonl", tmp_path / "out"
    pool.write_text(
        json.dumps(
            {
                "id": "a",
                "image": "a.png",
                "width": 100,
                "height": 100,
                "bbox": [1, 1, 2, 2],
                "question": "q",
                "answer": "a",
            }
        )
        + "\n"
    )
    out.mkdir()
    # an earlier run with another seed fixed the directory's settings (it wrote a record: settings are fixed by the
    # first run that writes one)
    (out / "run_config.json").write_text(json.dumps({"fixed_settings": {"command": "generate_collages", "seed": 99}}))
    (out / "failures.jsonl").write_text(json.dumps({"index": 0, "reason": "infeasible"}) + "\n")
    capsys.readouterr()
    assert (
        generate_collages.main(
            [
                "--source_pool",
                str(pool),
                "--output_dir",
                str(out),
                "--num_collages",
                "1",
                "--skip_image_check",
                "--no_progress",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert "seed: first run 99, this run 0" in err and "new --output_dir" in err
    assert not (out / "collages.jsonl").exists()


def test_make_demo_bench_bad_arguments_exit_2(tmp_path):
    from insight_o3.scripts import make_demo_bench

    for bad in (["--num_images", "0"], ["--chart_fraction", "2"], ["--min_side", "100", "--max_side", "80"]):
        with pytest.raises(SystemExit) as e:
            make_demo_bench.main(["--output_dir", str(tmp_path / "d"), *bad])
        assert e.value.code == 2, bad
    assert not (tmp_path / "d").exists()  # nothing written on bad arguments


def test_python_m_and_old_invocation_agree(tmp_path):
    """``python -m insight_o3.scripts.filter_difficulty`` and the documented ``generate_collages filter``
    are one command: the same exit code and message on the same bad input."""
    (tmp_path / "collages.jsonl").write_text("[]\n")
    rs = [
        subprocess.run(
            [sys.executable, "-m", *cmd, "--out_dir", str(tmp_path), "--model", "m", "--no_progress"],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=120,
        )
        for cmd in (["insight_o3.scripts.filter_difficulty"], ["insight_o3.scripts.generate_collages", "filter"])
    ]
    for r in rs:
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1].startswith("error: ") and "Traceback" not in r.stderr
    assert rs[0].stderr.strip().splitlines()[-1] == rs[1].stderr.strip().splitlines()[-1]


AGENT_YAMLS = [
    p
    for p in sorted((REPO / "verl" / "recipe" / "vsearch" / "config").glob("*.yaml"))
    if "\nvreasoner:" in p.read_text()
] + [REPO / "tests" / "support" / "agent_tiny.yaml"]


@pytest.mark.parametrize("path", AGENT_YAMLS, ids=lambda p: p.name)
def test_shipped_agent_configs_state_the_protocol_limits(path):
    """The recipe's agent YAMLs write the limits out for readers; they must agree with :data:`LIMITS`."""
    assert len(AGENT_YAMLS) >= 4
    import yaml

    cfg = yaml.safe_load(path.read_text())
    vr, vs = cfg["vreasoner"], cfg["vsearcher"]
    assert (
        vr["max_search_calls"],
        vr["max_format_retries_train"],
        vr["max_format_retries_eval"],
        vs["max_tool_calls"],
    ) == (
        LIMITS.max_search_calls,
        LIMITS.max_format_retries_train,
        LIMITS.max_format_retries_eval,
        LIMITS.max_tool_calls,
    )


def _documented_commands():
    """``(file, command, subcommand, flags)`` of every ``python -m insight_o3.scripts.X ...`` in the READMEs and
    module docstrings (continuation lines joined)."""
    import re

    sources = [
        REPO / "README.md",
        REPO / "data" / "README.md",
        *sorted((REPO / "insight_o3" / "scripts").glob("*.py")),
        REPO / "insight_o3" / "data" / "difficulty.py",
        REPO / "insight_o3" / "data" / "reliability.py",
    ]
    subcommands = with_subcommands()
    out = []
    for path in sources:
        text = re.sub(r"\s*\\+\n\s*", " ", path.read_text())  # join "\"-continued lines
        for m in re.finditer(r"python -m insight_o3\.scripts\.(\w+)((?: +(?!#)[^\n`]*)?)", text):
            name, rest = m.group(1), m.group(2).split("#")[0]
            sub = rest.split()[0] if rest.split() and rest.split()[0] in ("pool", "filter") else "generate"
            if name in subcommands:  # its steps are subcommands: the words before the first flag
                sub = " ".join(w for w in rest.split("--")[0].split() if w.isidentifier())
            out.append((path.relative_to(REPO).as_posix(), name, sub, sorted(set(re.findall(r"(--\w+)", rest)))))
    return out


def test_every_documented_flag_is_accepted():
    """The commands written out in the READMEs and docstrings use flags their command knows."""
    docs = _documented_commands()
    assert len(docs) >= 15 and {d[1] for d in docs} >= {
        "evaluate",
        "generate_collages",
        "filter_difficulty",
        "build_region_localization",
        "check_reliability",
    }
    subcommands = with_subcommands()
    for where, name, sub, flags in docs:
        mod = importlib.import_module(f"insight_o3.scripts.{name}")
        p = mod.build_parser(sub) if name == "generate_collages" else mod.build_parser()
        for word in sub.split() if name in subcommands else ():
            p = next(a for a in p._actions if isinstance(a, argparse._SubParsersAction)).choices[word]
        known = {s for a in p._actions for s in a.option_strings}
        assert not set(flags) - known, (where, name, sub, set(flags) - known)
