"""Daily-use features of ``insight_o3.scripts.evaluate``: subsets, token usage and cost, budgets with
resume, the judge cache and ``run_card.json`` — against real local HTTP servers."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from insight_o3.protocol import prompts
from insight_o3.scripts import evaluate
from tests.support import eval_bench as eb

MAIN_KEY = "sk-main-SECRET-4242abcd"


def _argv(ann, img_dir, out, main_url, judge_url, *extra):
    return eb.evaluate_argv(ann, img_dir, out, main_url, judge_url, *extra, api_key=MAIN_KEY)


def _only_dir(out: Path) -> Path:
    dirs = [p for p in (out / "m").iterdir() if p.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


@pytest.fixture
def prices(tmp_path):
    p = tmp_path / "prices.yaml"
    p.write_text("scripted-vlm: {input: 2.0, output: 10.0}\nscripted-judge: {input: 0.5, output: 1.0}\n")
    return p


@pytest.mark.parametrize(
    "extra, keys",
    [
        (["--limit", "3"], ["q0", "q1", "q2"]),
        (["--categories", "map"], ["q2", "q3", "q4", "q5"]),
        (["--sample_ids", "q6,q1", "q7"], ["q1", "q6", "q7"]),
        (["--categories", "chart", "--limit", "2"], ["q0", "q1"]),
    ],
)
def test_subset_runs_only_those_and_is_marked(bench, tmp_path, openai_server, extra, keys):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(*bench, out, main_srv.base_url, judge_srv.base_url, *extra)) == 0
    eval_dir = _only_dir(out)
    assert eval_dir.name.startswith("o3_bench@subset-")  # never the full run's directory
    assert not (out / "m/o3_bench").exists()
    assert sorted(r["sample_key"] for r in eb.read_records(eval_dir)) == keys
    assert main_srv.count == len(keys)
    card = json.loads((eval_dir / "run_card.json").read_text())
    assert card["subset"] is not None and card["num_samples"] == len(keys)
    args = json.loads((eval_dir / "args.json").read_text())
    assert args["subset"] == card["subset"]


def test_subset_unknown_id_or_category_is_bad_input(bench, tmp_path, openai_server, capsys):
    main_srv = openai_server(eb.model_script())
    out = tmp_path / "out"
    assert evaluate.main(_argv(*bench, out, main_srv.base_url, main_srv.base_url, "--sample_ids", "q1,q99")) == 2
    assert "q99" in capsys.readouterr().err
    assert evaluate.main(_argv(*bench, out, main_srv.base_url, main_srv.base_url, "--categories", "maps")) == 2
    err = capsys.readouterr().err
    assert "maps" in err and "chart" in err
    assert main_srv.count == 0


def test_usage_and_cost_per_record_trial_and_run(bench, tmp_path, openai_server, prices, capsys):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = _argv(
        *bench,
        out,
        main_srv.base_url,
        judge_srv.base_url,
        "--num_trials",
        "2",
        "--price_file",
        str(prices),
        "--judge_cache",
    )
    assert evaluate.main(argv) == 0
    eval_dir = out / "m/o3_bench"
    recs = eb.read_records(eval_dir, 0) + eb.read_records(eval_dir, 1)
    # each scripted reply reports 10 prompt + 5 completion tokens; n=2 replies are split over the 2 trials
    model = [r["usage"]["model"] for r in recs]
    assert all(u["requests"] in (0, 1) for u in model)
    assert sum(u["prompt_tokens"] for u in model) == 8 * 10
    assert sum(u["completion_tokens"] for u in model) == 8 * 5
    assert sum(u["requests"] for u in model) == 8 == main_srv.count
    judge = [r["usage"].get("judge", {}) for r in recs]
    assert sum(u.get("requests", 0) for u in judge) == judge_srv.count == 9  # identical prompts asked once
    assert "judge" not in next(r for r in recs if r["sample_key"] == "q0")["usage"]  # decided by rule
    for r in recs:
        u = r["usage"]
        want = sum(
            (u[role]["prompt_tokens"] * p_in + u[role]["completion_tokens"] * p_out) / 1e6
            for role, (p_in, p_out) in (("model", (2.0, 10.0)), ("judge", (0.5, 1.0)))
            if role in u
        )
        assert r["cost_usd"] == pytest.approx(want)
    m0 = json.loads((eval_dir / "trial_0/eval_metrics.json").read_text())
    assert m0["usage"]["model"]["prompt_tokens"] == sum(
        r["usage"]["model"]["prompt_tokens"] for r in eb.read_records(eval_dir, 0)
    )
    summary = json.loads((eval_dir / "summary_metrics.json").read_text())
    totals = summary["run_totals"]
    assert totals["tokens_total"] == 8 * 15 + 9 * 15
    assert totals["usage"]["model"]["requests"] == 8 and totals["usage"]["judge"]["requests"] == 9
    assert totals["cost_usd"] == pytest.approx((80 * 2.0 + 40 * 10.0 + 90 * 0.5 + 45 * 1.0) / 1e6)
    assert summary["cost_usd"]["mean"] == pytest.approx(totals["cost_usd"] / 2)
    assert "tokens 255, cost $" in capsys.readouterr().out


def test_price_file_missing_model_is_bad_input(bench, tmp_path, openai_server, capsys):
    srv = openai_server(eb.model_script())
    p = tmp_path / "prices.json"
    p.write_text(json.dumps({"scripted-vlm": {"input": 1, "output": 2}}))
    assert evaluate.main(_argv(*bench, tmp_path / "out", srv.base_url, srv.base_url, "--price_file", str(p))) == 2
    err = capsys.readouterr().err
    assert "no price for judge=scripted-judge" in err and str(p) in err
    assert srv.count == 0
    p.write_text(json.dumps({"scripted-vlm": {"input": "cheap", "output": 2}}))
    assert evaluate.main(_argv(*bench, tmp_path / "out", srv.base_url, srv.base_url, "--price_file", str(p))) == 2
    assert "field 'input'" in capsys.readouterr().err


@pytest.mark.parametrize("budget", [["--max_tokens_total", "40"], ["--max_cost", "0.0002"]])
def test_budget_stops_cleanly_and_resumes(bench, tmp_path, openai_server, prices, capsys, budget):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    base = _argv(*bench, out, main_srv.base_url, judge_srv.base_url, "--concurrency", "1", "--price_file", str(prices))
    assert evaluate.main(base + budget) == 4
    err = capsys.readouterr().err
    assert "budget reached" in err and budget[0] in err and "rerun with a higher" in err
    assert "rerun the same command" not in err  # the same budget would stop again
    eval_dir = out / "m/o3_bench"
    first = eb.read_records(eval_dir)
    assert 0 < len(first) < 8
    assert not (eval_dir / "trial_0/done").exists() and not (eval_dir / "summary_metrics.json").exists()
    asked = main_srv.count
    assert asked == len(first)  # nothing asked and then thrown away
    # the same budget again: already spent, stops before asking anything
    assert evaluate.main(base + budget) == 4
    assert main_srv.count == asked
    # a higher budget resumes where it stopped: only the rest is asked
    assert evaluate.main(base + [budget[0], "1000000"]) == 0
    assert main_srv.count == 8
    recs = eb.read_records(eval_dir)
    assert sorted(r["sample_key"] for r in recs) == list(eb.QUESTIONS)
    assert json.loads((eval_dir / "trial_0/eval_metrics.json").read_text())["overall_stats"] == eb.EXPECTED_STATS


def test_judge_cache_asks_identical_prompts_once(bench, tmp_path, openai_server):
    """Opt-in in evaluate (the default asks once per attempt, as the released harness: see
    test_eval_cli / test_golden_payloads)."""
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert (
        evaluate.main(_argv(*bench, out, main_srv.base_url, judge_srv.base_url, "--num_trials", "3", "--judge_cache"))
        == 0
    )
    assert judge_srv.count == 9  # 9 distinct prompts; without the cache 3 * 9
    for k in range(3):
        m = json.loads((out / f"m/o3_bench/trial_{k}/eval_metrics.json").read_text())
        assert m["overall_stats"] == eb.EXPECTED_STATS
    recs = {r["sample_key"]: r for r in eb.read_records(out / "m/o3_bench", 2)}
    assert recs["q7"]["eval_result"]["judge_outputs"] == ["blue", "<wrong>"]  # cached replies still recorded


def test_run_card(bench, tmp_path, openai_server):
    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    assert (
        evaluate.main(
            _argv(
                *bench,
                out,
                main_srv.base_url,
                judge_srv.base_url,
                "--img_max_pixels",
                "4096",
                "--chat_completion_kwargs",
                '{"seed": 7, "max_completion_tokens": 99}',
            )
        )
        == 0
    )
    card = json.loads((out / "m/o3_bench/run_card.json").read_text())
    assert card["version"] and card["package"] == "insight_o3" and "git_commit" in card
    assert card["benchmark_sha256"] == hashlib.sha256(Path(bench[0]).read_bytes()).hexdigest()
    assert card["image_budget"] == {"model": 4096}
    assert card["judge"] == {"model": "scripted-judge", "flow": "extract", "max_answer_length": 1000, "cache": False}
    assert card["seeds"] == {"model": 7}
    assert card["prompts_sha256"]["JUDGE_PROMPT"] == hashlib.sha256(prompts.JUDGE_PROMPT.encode()).hexdigest()[:16]
    assert card["settings"]["chat_completion_kwargs"] == {"seed": 7, "max_completion_tokens": 99}
    assert card["subset"] is None and card["num_samples"] == 8
    assert MAIN_KEY not in (out / "m/o3_bench/run_card.json").read_text()


def _run(bench, out, main_url, judge_url, eval_name, *extra):
    argv = _argv(*bench, out, main_url, judge_url, *extra)
    argv[argv.index("--eval_name") + 1] = eval_name
    assert evaluate.main(argv) == 0


def test_gather_shows_tokens_cost_and_refuses_mixed_settings(bench, tmp_path, openai_server, prices, capsys):
    from insight_o3.scripts import gather_eval_results as g

    main_srv = openai_server(eb.model_script())
    judge_srv = openai_server(eb.judge_script())
    out = tmp_path / "out"
    _run(bench, out, main_srv.base_url, judge_srv.base_url, "a/o3_bench", "--price_file", str(prices))
    _run(bench, out, main_srv.base_url, judge_srv.base_url, "b/o3_bench", "--price_file", str(prices))
    capsys.readouterr()
    assert g.main(["--settings", "a", "b", "--datasets", "o3_bench", "--output_dir", str(out)]) == 0
    table = capsys.readouterr().out
    assert "tokens" in table and "cost_usd" in table and "255" in table  # 8 model + 9 judge requests of 15 tokens
    df, notes = g.gather(str(out), ["a", "b"], ["o3_bench"])
    assert df.loc["a", "tokens"] == str(
        json.loads((out / "a/o3_bench/summary_metrics.json").read_text())["run_totals"]["tokens_total"]
    )
    assert float(df.loc["a", "cost_usd"]) == pytest.approx((80 * 2.0 + 40 * 10.0 + 90 * 0.5 + 45 * 1.0) / 1e6, abs=1e-4)
    assert not any("mixed" in n or "subset" in n for n in notes)
    # a third run with another judge flow and image budget: refused, naming what differs
    _run(bench, out, main_srv.base_url, judge_srv.base_url, "c/o3_bench", "--judge_flow", "verify")
    _run(bench, out, main_srv.base_url, judge_srv.base_url, "a/vstar", "--img_max_pixels", "1024")
    capsys.readouterr()
    rc = g.main(["--settings", "a", "c", "--datasets", "o3_bench", "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "column o3_bench: judge.flow: a=\"extract\", c=\"verify\"" in err
    assert "--allow_mixed_settings" in err
    rc = g.main(["--settings", "a", "--datasets", "o3_bench", "vstar", "--output_dir", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "row a: image_budget" in err and "row a: settings.img_max_pixels" not in err
    rc = g.main(["--settings", "a", "c", "--datasets", "o3_bench", "--output_dir", str(out), "--allow_mixed_settings"])
    assert rc == 0 and "warning: mixed settings: column o3_bench: judge.flow" in capsys.readouterr().out
    df, notes = g.gather(str(out), ["a"], ["o3_bench", "vstar"], allow_mixed_settings=True)
    tokens = [
        json.loads((out / f"a/{ds}/summary_metrics.json").read_text())["run_totals"]["tokens_total"]
        for ds in ("o3_bench", "vstar")
    ]
    assert df.loc["a", "tokens"] == str(sum(tokens))  # the row's runs together
    assert df.loc["a", "cost_usd"] == f"{float(df.loc['a', 'cost_usd']):.4f}"  # vstar has no price: o3_bench's


def test_gather_warns_about_subset_runs(bench, tmp_path, openai_server):
    from insight_o3.scripts import gather_eval_results as g

    main_srv = openai_server(eb.model_script())
    out = tmp_path / "out"
    _run(bench, out, main_srv.base_url, main_srv.base_url, "a/o3_bench", "--limit", "2")
    ds = next((out / "a").iterdir()).name
    _, notes = g.gather(str(out), ["a"], [ds])
    assert any("a subset run (2 samples" in n for n in notes)
