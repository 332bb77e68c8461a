"""``python -m insight_o3.scripts.compare`` on two real runs of the same benchmark (scripted model endpoints
on local servers) whose outcomes differ on planted questions: the flips, McNemar's counts over samples x
trials, the intervals, the JSON and HTML outputs; and the card check it shares with gather_eval_results."""

from __future__ import annotations

import json
import re

import pytest

from insight_o3.scripts import compare, evaluate, rejudge
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat, last_user_text

PRICES = (
    "scripted-a: {input: 1.0, output: 2.0}\nscripted-b: {input: 3.0, output: 6.0}\njudge-a: {input: 0.1, output: 0.1}\n"
)


def model_b():
    """Like eb.model_script, but q1 now answers B (right) and q0 answers A (wrong), with longer replies."""

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker(last_user_text(req))
        text = {"q1": "<answer>B</answer>", "q0": "<answer>A</answer>"}.get(q, eb.QUESTIONS[q][4])
        r = chat([text] * int(req.get("n") or 1), finish_reason=eb.QUESTIONS[q][5], prompt_tokens=40)
        return r

    return script


def _run(tmp_path, name, model, url, judge_url, *extra):
    bench = (tmp_path / "bench" / "test" / "metadata.jsonl", tmp_path / "bench" / "test")
    argv = ["--eval_name", f"{name}/o3_bench", "--model", model, "--api_base_url", url, "--api_key", "k"]
    argv += ["--judge_model", "judge-a", "--judge_api_base_url", judge_url, "--judge_api_key", "k"]
    argv += ["--ann_file", str(bench[0]), "--img_dir", str(bench[1]), "--output_dir", str(tmp_path / "out")]
    argv += ["--num_trials", "2", "--no_progress", "--price_file", str(tmp_path / "prices.yaml"), *extra]
    assert evaluate.main(argv) == 0
    return tmp_path / "out" / name / "o3_bench"


@pytest.fixture
def two_runs(tmp_path, openai_server):
    eb.make_bench(tmp_path / "bench")
    (tmp_path / "prices.yaml").write_text(PRICES)
    judge = openai_server(eb.judge_script())
    a = _run(tmp_path, "a", "scripted-a", openai_server(eb.model_script()).base_url, judge.base_url)
    b = _run(tmp_path, "b", "scripted-b", openai_server(model_b()).base_url, judge.base_url)
    return tmp_path, a, b, judge


def test_compare_two_runs_flips_mcnemar_and_pages(two_runs, capsys):
    tmp_path, a, b, _ = two_runs
    out, js = tmp_path / "cmp" / "compare.html", tmp_path / "cmp" / "compare.json"
    rc = compare.main([str(a), str(b), "--out", str(out), "--json", str(js), "--n_resamples", "2000"])
    assert "NaN" not in js.read_text()
    assert rc == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    data = json.loads(js.read_text())
    ra, rb = data["runs"]
    # a: correct q0 q2 q5 q6 (4/8); b: q1 instead of q0 -> also 4/8, but on other samples
    assert ra["accuracy"]["mean"] == 0.5 and rb["accuracy"]["mean"] == 0.5
    assert ra["accuracy"]["ci"][0] < 0.5 < ra["accuracy"]["ci"][1]
    pair = data["pairs"][0]
    assert (pair["a"], pair["b"], pair["trials_a"], pair["trials_b"], pair["n"]) == (
        "a/o3_bench",
        "b/o3_bench",
        2,
        2,
        8,
    )
    # the paired sign-flip test over the 8 samples, exact: q0 (-1) and q1 (+1) cancel out
    assert pair["pvalue"] == 1.0 and pair["pvalue_exact"] and pair["difference"] == 0.0
    assert pair["ci"][0] < 0 < pair["ci"][1] and data["methods"]["test"].startswith("paired sign-flip")
    # McNemar's counts on samples x trials, descriptive only
    assert pair["mcnemar"]["n"] == 16 and (pair["mcnemar"]["b"], pair["mcnemar"]["c"]) == (2, 2)
    assert pair["mcnemar"]["descriptive"] is True
    assert {(f["key"], f["change"]) for f in pair["flips"]} == {("q0", "broken"), ("q1", "fixed")}
    assert pair["categories"]["chart"]["mcnemar"]["b"] == 2 and pair["categories"]["map"]["n"] == 4
    assert ra["failed"] == {"items": 0, "samples_without_a_judged_trial": 0}
    # tokens per episode without the judge's; cost as recorded
    assert rb["tokens_per_episode"] > ra["tokens_per_episode"] > 0 and rb["cost_per_episode"] > ra["cost_per_episode"]
    assert "b/o3_bench vs a/o3_bench: +0.0 points" in printed and "2 sample(s) flipped (1 fixed, 1 broken)" in printed
    assert "paired sign-flip test p = 1 (exact)" in printed
    page = out.read_text()
    # each flip in the table links to its side-by-side block, which holds both conversations
    links = re.findall(r"<a href='#(flip-0-\d+)'>(q\d)</a>", page)
    assert {k for _, k in links} == {"q0", "q1"}
    for anchor, key in links:
        block = page[page.index(f"id='{anchor}'") :]
        block = block[: block.index("</details>\n")]
        assert f"<b>{key}</b>" in block and block.count("class='compare-col'") == 2
    assert page.count("<svg") >= 2  # accuracy vs tokens and vs cost
    assert 'id="compare-attribution"' in page and 'id="compare-accuracy"' in page


def test_compare_refuses_runs_judged_differently_as_gather_does(two_runs, openai_server, capsys):
    tmp_path, a, _, _ = two_runs
    judge_b = openai_server(eb.judge_script())
    c_dir = tmp_path / "out" / "c" / "o3_bench"
    argv = ["--eval_name", "c/o3_bench", "--model", "scripted-a", "--api_base_url"]
    argv += [openai_server(eb.model_script()).base_url, "--api_key", "k", "--judge_model", "judge-b"]
    argv += ["--judge_api_base_url", judge_b.base_url, "--judge_api_key", "k", "--no_progress", "--num_trials", "2"]
    argv += ["--ann_file", str(tmp_path / "bench/test/metadata.jsonl"), "--img_dir", str(tmp_path / "bench/test")]
    assert evaluate.main([*argv, "--output_dir", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    out = tmp_path / "x.html"
    assert compare.main([str(a), str(c_dir), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot be compared" in err and "judge.model: a/o3_bench=\"judge-a\", c/o3_bench=\"judge-b\"" in err
    assert not out.exists()
    assert compare.main([str(a), str(c_dir), "--out", str(out), "--allow_mixed_settings", "--n_resamples", "500"]) == 0
    assert "warning: mixed settings" in capsys.readouterr().err and out.exists()


def test_compare_bad_input(two_runs, capsys):
    tmp_path, a, _, _ = two_runs
    assert compare.main([str(a), str(tmp_path / "nope"), "--out", str(tmp_path / "x.html")]) == 2
    assert "no such eval directory" in capsys.readouterr().err
    (a / "trial_1" / "done").unlink()
    assert compare.main([str(a), str(a), "--out", str(tmp_path / "x.html")]) == 2
    assert "trial not finished" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        compare.main([str(a)])


def test_compare_accepts_settings_that_cannot_change_a_verdict(two_runs, openai_server, capsys):
    """The judge cache (evaluate: off, rejudge: on) and each mode's own judge flow (the README's single model
    vs InSight-o3 example) are accepted; another flow for the same mode is still refused."""
    tmp_path, a, b, judge = two_runs
    assert (
        rejudge.main([str(a), "--judge_model", "judge-a", "--judge_api_base_url", judge.base_url, "--no_progress"]) == 0
    )
    again = tmp_path / "out" / "a" / "o3_bench@rejudge-judge-a"
    assert json.loads((again / "run_card.json").read_text())["judge"]["cache"] is True
    capsys.readouterr()
    assert compare.main([str(a), str(again), "--out", str(tmp_path / "c.html"), "--n_resamples", "500"]) == 0
    assert "mixed settings" not in capsys.readouterr().err
    # b as an InSight-o3 run judged with its mode's default flow (verify): accepted, with a note
    card_file = b / "run_card.json"
    card = json.loads(card_file.read_text())
    card["settings"]["vsearcher_model"], card["judge"]["flow"] = "scripted-vsearcher", "verify"
    card_file.write_text(json.dumps(card))
    assert compare.main([str(a), str(b), "--out", str(tmp_path / "d.html"), "--n_resamples", "500"]) == 0
    assert "each run judged with its mode's own flow" in capsys.readouterr().err
    # a single-model run judged with the verify flow is not its mode's default: refused
    card["settings"]["vsearcher_model"] = None
    card_file.write_text(json.dumps(card))
    assert compare.main([str(a), str(b), "--out", str(tmp_path / "e.html")]) == 2
    assert 'judge.flow: a/o3_bench="extract", b/o3_bench="verify"' in capsys.readouterr().err


def test_gather_uses_the_same_verdict_rule_for_a_column(two_runs, capsys):
    """gather_eval_results' column check is compare's: the judge cache alone is no conflict."""
    from insight_o3.scripts import gather_eval_results as gather

    tmp_path, a, b, _ = two_runs
    card_file = b / "run_card.json"
    card = json.loads(card_file.read_text())
    card["judge"]["cache"] = not card["judge"]["cache"]
    card_file.write_text(json.dumps(card))
    argv = ["--settings", "a", "b", "--datasets", "o3_bench", "--output_dir", str(tmp_path / "out")]
    assert gather.main(argv) == 0, capsys.readouterr().err
    card["judge"]["max_answer_length"] = 5
    card_file.write_text(json.dumps(card))
    assert gather.main(argv) == 2 and "judge.max_answer_length" in capsys.readouterr().err
