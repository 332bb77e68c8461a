"""``python -m insight_o3.scripts.compare`` on two real runs of the same benchmark (scripted model endpoints
on local servers) whose outcomes differ on planted questions: the flips, McNemar's counts over samples x
trials, the intervals, the JSON and HTML outputs; and the card check it shares with gather_eval_results."""

from __future__ import annotations

import json
import re

import numpy as np
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
    # 8 samples on 3 images: q0 and q1 share an image, so their flips cancel in one cluster
    assert "on 8 samples on 3 image(s)" in printed and "paired sign-flip test over 3 image(s) p = 1 (exact)" in printed
    assert "the test decides" in printed and pair["clusters"] == 3 and data["cluster"] == "image"
    # what the comparison could have found, and the caveats the page carries
    assert "cannot be significant: the runs differ on 0 image(s), so the smallest attainable p is 1" in printed
    assert pair["smallest_attainable_pvalue"] == 1.0 and pair["se"] == 0.0 and pair["mde_80"] is None
    assert "only 3 images: too narrow below 40" in printed and "degenerate" in printed
    assert "per category (exploratory; Holm over 2 categories)" in printed
    assert pair["categories"]["chart"]["pvalue_holm"] is not None
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


def _records(correct, categories, failed=(), images=None, name="r"):
    from insight_o3.analysis.run_records import RunRecords
    from tests.support.planted import outcome_trials

    return RunRecords(f"/runs/{name}", name, outcome_trials(correct, categories, failed, images), None)


def test_many_runs_and_categories_are_holm_adjusted():
    """Three runs against a reference: each pair's p-value Holm-adjusted over the pairs, each category's over the
    categories (statsmodels' Holm), printed as exploratory."""
    from statsmodels.stats.multitest import multipletests

    from insight_o3.analysis.comparison import compare_runs

    rng = np.random.default_rng(2)
    cats = ["chart" if i % 3 else "map" if i % 2 else "table" for i in range(90)]
    runs = [_records(rng.random((90, 2)) < p, cats, name=f"r{k}") for k, p in enumerate([0.5, 0.6, 0.7, 0.5])]
    c = compare_runs(runs, n_resamples=2000)
    raw = [p.overall.pvalue for p in c.pairs]
    assert [p.overall.pvalue_holm for p in c.pairs] == pytest.approx(list(multipletests(raw, method="holm")[1]))
    for p in c.pairs:
        cat_raw = [v.pvalue for v in p.categories.values()]
        assert [v.pvalue_holm for v in p.categories.values()] == pytest.approx(
            list(multipletests(cat_raw, method="holm")[1])
        )
    lines = "\n".join(compare.summary_lines(c))
    assert "3 runs against r0: p-values Holm-adjusted over the pairs" in lines
    assert "Holm over the pairs" in lines and "per category (exploratory; Holm over 3 categories)" in lines
    assert c.to_dict()["pairs_multiplicity"] == "Holm over 3 pairs"


def test_runs_giving_a_sample_other_categories_are_refused():
    from insight_o3.analysis.comparison import compare_runs
    from insight_o3.analysis.outcomes import PairingError

    correct = np.ones((4, 1), bool)
    a = _records(correct, ["x", "x", "y", "y"])
    b = _records(correct, ["x", "x", "y", "x"], name="s")
    with pytest.raises(PairingError, match="give sample 'q3' different categories \\('y' and 'x'\\)"):
        compare_runs([a, b])


def test_lost_items_print_both_rules_side_by_side():
    """With items lost to API errors the accuracies and the difference are given left out and counted as wrong."""
    from insight_o3.analysis.comparison import compare_runs

    n = 40
    a = np.zeros((n, 1), bool)
    a[:20] = True
    b = a.copy()
    b[20:26] = True  # B fixes six of A's misses ...
    lost = {(i, 0) for i in range(10)}  # ... and lost ten items that A got right
    c = compare_runs([_records(a, ["x"] * n), _records(b, ["x"] * n, failed=lost, name="s")], n_resamples=2000)
    p = c.pairs[0]
    assert p.overall.difference == pytest.approx(0.2) and p.other_rule.difference == pytest.approx(-0.1)
    text = "\n".join(compare.summary_lines(c))
    assert "s vs r: +20.0 points" in text and "with the lost items counted as wrong instead: -10.0 points" in text
    assert "with the lost items counted as wrong instead: 40.0%" in text  # s's accuracy beside its 53.3 %
    assert c.to_dict()["pairs"][0]["other_failure_rule"]["difference"] == pytest.approx(-0.1)


def test_the_precision_of_a_comparison_is_printed():
    """SE, the minimum detectable effect, and what more trials would buy (the variance components)."""
    from insight_o3.analysis.comparison import compare_runs

    rng = np.random.default_rng(4)
    q = rng.uniform(0.2, 0.8, 120)
    a, b = rng.random((120, 3)) < q[:, None], rng.random((120, 3)) < q[:, None] + 0.05
    images = [f"img{i // 2}" for i in range(120)]
    c = compare_runs([_records(a, ["x"] * 120, images=images), _records(b, ["x"] * 120, images=images, name="s")])
    o = c.pairs[0].overall
    assert o.clusters == 60 and o.se > 0 and o.mde == pytest.approx(2.8 * o.se, rel=0.03)
    assert o.components is not None and o.components.se() == pytest.approx(o.se)
    assert o.components.se(2) < o.se and o.components.se(float("inf")) < o.components.se(4)
    text = "\n".join(compare.summary_lines(c))
    assert f"precision: SE {100 * o.se:.1f} points; minimum detectable effect (80% power at 0.05): " in text
    assert "% from trial noise; 2x the trials: SE" in text and "unlimited trials: SE" in text
    assert "on 120 samples on 60 image(s)" in text


def test_a_pair_where_interval_and_test_disagree_says_the_test_decides():
    """20 samples, 9 pairs only A got right and 2 only B: the exact test gives p = 0.065 while the interval just
    excludes 0; the output says so and that the test decides."""
    from insight_o3.analysis.comparison import compare_runs

    a = np.r_[np.ones(9), np.zeros(2), np.ones(5), np.zeros(4)].astype(bool)[:, None]
    b = np.r_[np.zeros(9), np.ones(2), np.ones(5), np.zeros(4)].astype(bool)[:, None]
    c = compare_runs([_records(a, ["x"] * 20), _records(b, ["x"] * 20, name="s")], n_resamples=2**20)
    o = c.pairs[0].overall
    assert o.exact and o.pvalue == pytest.approx(2 * 67 / 2**11) and o.high < 0 and not o.interval_agrees
    text = "\n".join(compare.summary_lines(c))
    assert "not significant at 0.05 (the test decides" in text
    assert "note: here the interval and the test disagree (the interval excludes 0, the test does not reject)" in text
    assert c.to_dict()["pairs"][0]["interval_agrees_with_test"] is False
