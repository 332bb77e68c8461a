"""Run integrity (insight_o3.jobs.integrity): a run directory's settings are fixed by its first run.

A resume, rerun or rejudge into an existing directory with a setting that can change a result is refused
with status 2, naming each differing key with both values, and writes nothing; operational settings may
change and are recorded per invocation in the card's history. Every flag of every command that writes a
run directory is classified (the test fails on a new unclassified flag)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from insight_o3.base.setting_kinds import Kind
from insight_o3.jobs.integrity import (
    FIXED_KEY,
    HISTORY_KEY,
    Invocation,
    SettingsChanged,
    UnclassifiedSetting,
    settle,
)
from insight_o3.protocol import prompts
from insight_o3.scripts import evaluate, rejudge
from insight_o3.scripts._shared import declared_kind, flag_kinds, new_parser, setting
from tests.support import eval_bench as eb
from tests.support.commands import flag_actions, run_commands


def test_every_flag_of_every_run_dir_command_is_classified():
    unclassified = [
        f"{cmd} {sub}{'/'.join(a.option_strings) or a.dest} (dest {a.dest!r})"
        for cmd, p in run_commands().items()
        for sub, a in flag_actions(p)
        if declared_kind(a) is None
    ]
    assert not unclassified, "declare these flags with their kind (insight_o3.scripts._shared.setting): " + ", ".join(
        unclassified
    )


def test_an_unclassified_setting_is_a_programming_error():
    with pytest.raises(UnclassifiedSetting, match="'brand_new_flag' declare no run-integrity kind"):
        Invocation("evaluate", {"model": "m", "brand_new_flag": 1}, kinds={"model": Kind.RESULT})


def test_a_flag_added_without_its_kind_is_refused_by_the_invocation():
    p = new_parser("cmd")
    setting(p, "--model", kind=Kind.RESULT)
    p.add_argument("--brand_new_flag")
    a = p.parse_args(["--model", "m"])
    assert flag_kinds(p) == {"model": Kind.RESULT}
    with pytest.raises(UnclassifiedSetting, match="'brand_new_flag'"):
        Invocation("cmd", vars(a), kinds=flag_kinds(p))


def test_one_setting_declared_with_two_kinds_is_a_programming_error():
    p = new_parser("cmd")
    subs = p.add_subparsers(dest="step")
    setting(subs.add_parser("one"), "--seed", kind=Kind.RESULT)
    setting(subs.add_parser("two"), "--seed", kind=Kind.OPERATIONAL)
    with pytest.raises(ValueError, match="'seed' declared as result and operational"):
        flag_kinds(p)


# ------------------------------------------------------------------------------- settle, per kind
KINDS = {
    "model": Kind.RESULT,
    "concurrency": Kind.OPERATIONAL,
    "api_key": Kind.SECRET,
    "output_dir": Kind.OPERATIONAL,
    "max_cost": Kind.OPERATIONAL,
    "image_workers": Kind.OPERATIONAL,
    "no_progress": Kind.OPERATIONAL,
    "img_max_pixels": Kind.RESULT,
    "subset": Kind.RESULT,
    "chat_completion_kwargs": Kind.RESULT,
}


def _inv(**settings) -> Invocation:
    base = {"model": "m", "concurrency": 8, "api_key": "sk-SECRET", "output_dir": "/a"}
    return Invocation("evaluate", {**base, **settings}, derived={"benchmark_sha256": "abc"}, kinds=KINDS)


def test_first_run_fixes_result_settings_and_records_operational_ones_without_keys():
    card = settle(None, {"model": "m"}, _inv(), where="d/run_card.json")
    assert card[FIXED_KEY] == {"command": "evaluate", "model": "m", "benchmark_sha256": "abc"}
    assert card[HISTORY_KEY][0]["settings"] == {"concurrency": 8, "output_dir": "/a"}
    assert "sk-SECRET" not in json.dumps(card)


@pytest.mark.parametrize(
    "change",
    [{"concurrency": 64}, {"output_dir": "/moved"}, {"max_cost": 5.0}, {"image_workers": 0}, {"no_progress": True}],
)
def test_operational_changes_are_accepted_and_appended_to_the_history(change):
    first = settle(None, {"model": "m"}, _inv(), where="w")
    again = settle(first, {"model": "OTHER CARD"}, _inv(**change), where="w")
    assert again[FIXED_KEY] == first[FIXED_KEY] and again["model"] == "m"  # the stored card, not the new one
    assert len(again[HISTORY_KEY]) == 2
    assert again[HISTORY_KEY][1]["settings"].items() >= change.items()


@pytest.mark.parametrize(
    "change, line",
    [
        ({"model": "m2"}, 'model: first run "m", this run "m2"'),
        ({"img_max_pixels": 500000}, "img_max_pixels: first run (not set), this run 500000"),
        ({"subset": {"limit": 3}}, "subset: first run (not set), this run {"),
        ({"chat_completion_kwargs": {"temperature": 0.5}}, "chat_completion_kwargs: first run (not set)"),
    ],
)
def test_result_changes_are_refused_naming_key_and_both_values(change, line):
    first = settle(None, {}, _inv(), where="d/run_card.json")
    with pytest.raises(SettingsChanged) as e:
        settle(first, {}, _inv(**change), where="d/run_card.json")
    assert line in str(e.value) and "d/run_card.json" in str(e.value)


def test_nested_and_derived_differences_name_the_leaf():
    a = Invocation(
        "evaluate", {"chat_completion_kwargs": {"temperature": 1.0, "max_tokens": 9}}, {"p": {"X": "1"}}, kinds=KINDS
    )
    b = Invocation(
        "evaluate", {"chat_completion_kwargs": {"temperature": 0.0, "max_tokens": 9}}, {"p": {"X": "2"}}, kinds=KINDS
    )
    with pytest.raises(SettingsChanged) as e:
        settle(settle(None, {}, a, where="w"), {}, b, where="w")
    assert e.value.differences == [
        "chat_completion_kwargs.temperature: first run 1.0, this run 0.0",
        'p.X: first run "1", this run "2"',
    ]


def test_a_card_from_before_the_check_is_not_compared_but_its_history_grows(caplog):
    legacy = {"model": "m", "settings": {"model": "m"}}
    card = settle(legacy, {}, _inv(model="other"), where="old/run_card.json")
    assert FIXED_KEY not in card and len(card[HISTORY_KEY]) == 1
    assert "not compared" in caplog.text


def test_every_key_flag_is_secret():
    keys = {
        (cmd, a.dest): declared_kind(a)
        for cmd, p in run_commands().items()
        for _, a in flag_actions(p)
        if a.dest.endswith("api_key")
    }
    assert {"api_key", "judge_api_key", "vsearcher_api_key"} <= {dest for _, dest in keys}
    assert set(keys.values()) == {Kind.SECRET}


# ------------------------------------------------------------------------------- the reproduced cases
@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


@pytest.fixture
def servers(openai_server):
    return openai_server(eb.model_script()), openai_server(eb.judge_script())


def _argv(bench, out, servers, *extra):
    main_srv, judge_srv = servers
    urls = (main_srv.base_url, judge_srv.base_url)
    return eb.evaluate_argv(*bench, out, *urls, *extra, api_key="sk-x", judge_api_key="sk-y", max_retries=1)


def _snapshot(eval_dir: Path) -> dict:
    return {p: p.read_bytes() for p in eval_dir.rglob("*") if p.is_file() and p.name != ".lock"}


def test_budget_stopped_run_resumed_with_other_image_budget_and_prompt_is_refused(bench, tmp_path, servers, capsys):
    prices = tmp_path / "prices.yaml"
    prices.write_text("scripted-vlm: {input: 2.0, output: 10.0}\nscripted-judge: {input: 0.5, output: 1.0}\n")
    out = tmp_path / "out"
    base = _argv(bench, out, servers, "--concurrency", "1", "--price_file", str(prices))
    assert evaluate.main([*base, "--max_cost", "0.0002"]) == 4
    eval_dir = out / "m/o3_bench"
    before, asked = _snapshot(eval_dir), servers[0].count
    capsys.readouterr()
    rc = evaluate.main([*base, "--max_cost", "100", "--img_max_pixels", "500000", "--sys_prompt", "think"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "img_max_pixels: first run 12250000, this run 500000" in err
    assert 'sys_prompt: first run "model_default", this run "think"' in err
    assert "--eval_name" in err and "nothing was written" in err
    assert _snapshot(eval_dir) == before and servers[0].count == asked  # args.json, run_card.json untouched
    # the same settings with a higher budget, other concurrency and image workers: accepted and recorded
    assert evaluate.main([*base, "--max_cost", "100", "--concurrency", "4", "--image_workers", "0"]) == 0
    card = json.loads((eval_dir / "run_card.json").read_text())
    assert [h["settings"]["max_cost"] for h in card[HISTORY_KEY]] == [0.0002, 100]
    assert card[HISTORY_KEY][1]["settings"]["concurrency"] == 4
    assert card[FIXED_KEY]["img_max_pixels"] == 12250000 and card[FIXED_KEY]["sys_prompt"] == "model_default"
    assert len(eb.read_records(eval_dir)) == 8


def test_finished_run_rerun_with_another_judge_is_refused(bench, tmp_path, servers, capsys):
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, servers)) == 0
    eval_dir = out / "m/o3_bench"
    before = _snapshot(eval_dir)
    capsys.readouterr()
    argv = _argv(bench, out, servers)
    argv[argv.index("scripted-judge")] = "other-judge"
    assert evaluate.main(argv) == 2
    err = capsys.readouterr().err
    assert 'judge_model: first run "scripted-judge", this run "other-judge"' in err
    assert "accuracy" not in capsys.readouterr().out
    assert _snapshot(eval_dir) == before


def test_prompt_and_benchmark_content_are_fixed_but_their_paths_may_move(bench, tmp_path, servers, capsys, monkeypatch):
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, servers)) == 0
    eval_dir = out / "m/o3_bench"
    # the same benchmark copied elsewhere: a path, accepted
    moved = tmp_path / "moved"
    shutil.copytree(bench[1], moved)
    assert evaluate.main(_argv((moved / "metadata.jsonl", moved), out, servers)) == 0
    before = _snapshot(eval_dir)
    # its content changed: refused
    with open(moved / "metadata.jsonl", "a") as f:
        f.write("\n")
    capsys.readouterr()
    assert evaluate.main(_argv((moved / "metadata.jsonl", moved), out, servers)) == 2
    assert "benchmark_sha256: first run" in capsys.readouterr().err
    # a prompt of the package changed (another checkout): refused, naming the prompt
    monkeypatch.setattr(prompts, "THINK_SYSTEM_PROMPT", prompts.THINK_SYSTEM_PROMPT + " ")
    assert evaluate.main(_argv(bench, out, servers)) == 2
    assert "prompts_sha256.THINK_SYSTEM_PROMPT: first run" in capsys.readouterr().err
    assert _snapshot(eval_dir) == before
    card = json.loads((eval_dir / "run_card.json").read_text())
    assert [h["settings"]["img_dir"] for h in card[HISTORY_KEY]] == [str(bench[1]), str(moved)]


def test_rejudge_with_verify_flow_into_an_extract_flow_dir_is_refused(bench, tmp_path, servers, capsys):
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, servers)) == 0
    src = out / "m/o3_bench"
    judge_url = servers[1].base_url
    common = [str(src), "--judge_model", "scripted-judge", "--judge_api_base_url", judge_url, "--no_progress"]
    assert rejudge.main([*common, "--eval_name", "again", "--judge_flow", "extract"]) == 0
    target = out / "again"
    before = _snapshot(target)
    capsys.readouterr()
    assert rejudge.main([*common, "--eval_name", "again", "--judge_flow", "verify"]) == 2
    err = capsys.readouterr().err
    assert 'judge_flow: first run "extract", this run "verify"' in err
    assert _snapshot(target) == before
    # the same judge settings with another concurrency: accepted
    assert rejudge.main([*common, "--eval_name", "again", "--judge_flow", "extract", "--concurrency", "3"]) == 0
    assert len(json.loads((target / "run_card.json").read_text())[HISTORY_KEY]) == 2


# ------------------------------------------------------------------------------- the other run-dir commands
def _fixed_then_operational(run, out: Path, card: str, changed: list[str], operational: list[str], capsys):
    """A first run, a rerun with ``changed`` (a result setting: refused, nothing written) and one with
    ``operational`` (accepted, in the history)."""
    assert run() in (0, 1)
    before = _snapshot(out)
    capsys.readouterr()
    assert run(*changed) == 2
    assert f"{changed[0].lstrip('-')}: first run" in capsys.readouterr().err
    assert _snapshot(out) == before
    assert run(*operational) in (0, 1)
    stored = json.loads((out / card).read_text())
    assert len(stored[HISTORY_KEY]) == 2 and stored[FIXED_KEY]["command"]
    return stored


def test_evaluate_vsearch_fixes_its_settings(openai_server, tmp_path, capsys):
    from PIL import Image

    from tests.support.vsearch_bench import GT, H, W, run, script

    img_dir = tmp_path / "images"
    img_dir.mkdir()
    Image.new("RGB", (W, H), (200, 40, 40)).save(img_dir / "one.png")
    ann = tmp_path / "regions.jsonl"
    ann.write_text(json.dumps({"id": "a", "image": "one.png", "description": "the a region", "bbox": GT["a"]}) + "\n")
    out = tmp_path / "out"
    srv = openai_server(script())
    card = _fixed_then_operational(
        lambda *x: run(str(ann), str(img_dir), out, srv.base_url, "--no_progress", *x),
        out,
        "run_card.json",
        ["--vsearcher_prompt", "simple"],
        ["--concurrency", "1"],
        capsys,
    )
    assert card[FIXED_KEY]["annotation_sha256"] and card[FIXED_KEY]["vsearcher_prompt"] == "trained"


def test_difficulty_filter_fixes_its_settings(openai_server, tmp_path, capsys):
    from insight_o3.scripts import filter_difficulty
    from tests.support.difficulty_bench import ITEMS, argv, make_collages, script

    out = tmp_path / "collages"
    make_collages(out, ITEMS)
    srv = openai_server(script({}))
    card = _fixed_then_operational(
        lambda *x: filter_difficulty.main(argv(out, srv.base_url, *x)),
        out,
        "difficulty_card.json",
        ["--attempts", "2"],
        ["--concurrency", "2", "--max_retries", "1"],
        capsys,
    )
    assert card[FIXED_KEY]["judge_model"] == "judge" and "api_key" not in json.dumps(card)


def test_reliability_check_fixes_its_settings(openai_server, tmp_path, capsys, monkeypatch):
    from insight_o3.scripts import check_reliability
    from tests.support.reliability_bench import KEY, QWEN_KEY, make_pool, script

    pool, out = make_pool(tmp_path), tmp_path / "rel"
    srv = openai_server(script({}))
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("QWEN_KEY", QWEN_KEY)
    monkeypatch.setenv("OPENAI_BASE_URL", srv.base_url)
    base = ["--source_pool", str(pool), "--out_dir", str(out), "--checker", f"qwen,{srv.base_url},QWEN_KEY"]
    base += ["--checker", "nano", "--judge_model", "judge", "--max_retries", "0", "--no_progress"]
    card = _fixed_then_operational(
        lambda *x: check_reliability.main([*base, *x]),
        out,
        "reliability_card.json",
        ["--judge_model", "j2"],
        ["--concurrency", "2"],
        capsys,
    )
    assert card[FIXED_KEY]["checker_models"] == ["qwen", "nano"] and card[FIXED_KEY]["pool_sha256"]
    assert KEY not in json.dumps(card) and QWEN_KEY not in json.dumps(card)


def test_region_localization_fixes_its_settings(openai_server, tmp_path, capsys):
    from insight_o3.scripts import build_region_localization
    from tests.support.layout_bench import command, make_inputs
    from tests.support.openai_server import chat

    img_dir, lay_dir = make_inputs(tmp_path)
    out = tmp_path / "out"
    srv = openai_server(lambda req, call: chat(f"region_description={{region {call.index}}}"))
    argv = command(img_dir, lay_dir, out, srv.base_url)[3:]  # less "python -m module"
    card = _fixed_then_operational(
        lambda *x: build_region_localization.main([*argv, *x]),
        out,
        "descriptions_card.json",
        ["--model", "another"],
        ["--concurrency", "1"],
        capsys,
    )
    assert card[FIXED_KEY]["model"] == "scripted" and card[FIXED_KEY]["max_area_ratio"] == 0.25
    # the layouts' content is fixed too (a directory of detector JSON files)
    (lay_dir / "info0.json").write_text((lay_dir / "info0.json").read_text().replace("0.9", "0.8"))
    assert build_region_localization.main(argv) == 2
    assert "layouts_sha256: first run" in capsys.readouterr().err


def test_rejudging_another_source_into_the_same_dir_is_refused(bench, tmp_path, servers, capsys):
    out = tmp_path / "out"
    assert evaluate.main(_argv(bench, out, servers)) == 0
    argv = _argv(bench, out, servers, "--sys_prompt", "think")
    argv[argv.index("m/o3_bench")] = "m2/o3_bench"
    assert evaluate.main(argv) == 0
    judge = ["--judge_model", "scripted-judge", "--judge_api_base_url", servers[1].base_url, "--no_progress"]
    assert rejudge.main([str(out / "m/o3_bench"), *judge, "--eval_name", "rj"]) == 0
    capsys.readouterr()
    assert rejudge.main([str(out / "m2/o3_bench"), *judge, "--eval_name", "rj", "--output_dir", str(out)]) == 2
    assert 'source.sys_prompt: first run "model_default", this run "think"' in capsys.readouterr().err
