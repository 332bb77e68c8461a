"""``rejudge`` with two judges (scripted, each on its own local HTTP server) that disagree with the source
run's judge on chosen items: Cohen's kappa against a hand count, each judge's accuracy, the disagreements
with every verdict; and the agreement module's rules (what counts as judged, kappa undefined)."""

from __future__ import annotations

import json

import pytest

from insight_o3.analysis.agreement import judge_agreement
from insight_o3.analysis.run_records import read_run
from insight_o3.scripts import rejudge, report
from tests.support import eval_bench as eb
from tests.support.openai_server import Call, Reply, chat, last_user_text
from tests.support.rejudge_bench import evaluate_judge_a, lenient_judge


def strict_judge():
    """Judge C: extracts 'B' for q1 (now right) and 'C' for q2 (now wrong), says <wrong> to q6's verification."""

    def script(req: dict, call: Call) -> Reply:
        prompt = last_user_text(req)
        q = eb.marker(prompt)
        if "GT Answer:" in prompt:
            return chat("<wrong>" if q in ("q6", "q7") else "<correct>")
        return chat({"q1": "B", "q2": "C"}.get(q, eb.JUDGE.get(q, ("none", None))[0]))

    return script


# verdicts per item (same in both trials); q3 is truncated: never judged
A = {"q0": 1, "q1": 0, "q2": 1, "q4": 0, "q5": 1, "q6": 1, "q7": 0}  # the source's judge (eb.judge_script)
B = {"q0": 1, "q1": 0, "q2": 1, "q4": 1, "q5": 1, "q6": 1, "q7": 1}  # lenient_judge
C = {"q0": 1, "q1": 1, "q2": 0, "q4": 0, "q5": 1, "q6": 0, "q7": 0}  # strict_judge


def _kappa(x: dict, y: dict, keys) -> float:
    """Cohen's kappa counted by hand."""
    n = len(keys)
    po = sum(x[k] == y[k] for k in keys) / n
    px, py = sum(x[k] for k in keys) / n, sum(y[k] for k in keys) / n
    pe = px * py + (1 - px) * (1 - py)
    return (po - pe) / (1 - pe)


def test_rejudge_with_two_judges_reports_kappa_accuracy_and_disagreements(tmp_path, openai_server, capsys):
    bench = eb.make_bench(tmp_path / "bench")
    main_srv, judge_a = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    evaluate_judge_a(bench, out, main_srv.base_url, judge_a.base_url, "--num_trials", "2")
    src = out / "m/o3_bench"
    judge_b, judge_c = openai_server(lenient_judge()), openai_server(strict_judge())
    capsys.readouterr()
    rc = rejudge.main(
        [str(src), "--judge_model", "judge-b", "judge-c", "--no_progress"]
        + ["--judge_api_base_url", judge_b.base_url, judge_c.base_url, "--judge_api_key", "kb", "kc"]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert {r["model"] for r in judge_b.requests} == {"judge-b"} and {r["model"] for r in judge_c.requests} == {
        "judge-c"
    }
    assert {h["authorization"] for h in judge_c.headers} == {"Bearer kc"}
    new_b, new_c = out / "m/o3_bench@rejudge-judge-b", out / "m/o3_bench@rejudge-judge-c"
    assert (new_b / "trial_1/done").exists() and (new_c / "trial_1/done").exists()

    both_file = out / "m/o3_bench@judge-agreement-judge-b+judge-c.json"
    ag = json.loads(both_file.read_text())
    ja, jb, jc = "judge-a (extract)", "judge-b (extract)", "judge-c (extract)"
    assert ag["judges"] == [ja, jb, jc] and ag["items"] == 16 and ag["judged_by_all"] == 14
    assert ag["accuracy"] == {ja: 4 / 8, jb: 6 / 8, jc: 3 / 8}
    keys = list(A)
    pairs = {(p["a"], p["b"]): p for p in ag["pairs"]}
    for (x, y), (vx, vy) in {(ja, jb): (A, B), (ja, jc): (A, C), (jb, jc): (B, C)}.items():
        p = pairs[(x, y)]
        assert p["n"] == 14 and p["kappa"] == pytest.approx(_kappa(vx, vy, keys))
        assert p["agreement"] == pytest.approx(sum(vx[k] == vy[k] for k in keys) / 7)
        # q0 matches its ground truth by rule for every judge; the rest went to the judge models
        assert p["n_judge_decided"] == 12
        assert p["kappa_judge_decided"] == pytest.approx(_kappa(vx, vy, keys[1:]))
    # three judges: Fleiss' kappa on the 14 items all judged (by hand), with a bootstrap interval over samples
    k = [A[q] + B[q] + C[q] for q in keys]
    p_bar = sum((x * (x - 1) + (3 - x) * (2 - x)) / 6 for x in k) / 7
    p = sum(k) / 21
    fleiss = (p_bar - p * p - (1 - p) ** 2) / (1 - p * p - (1 - p) ** 2)
    assert ag["fleiss"]["kappa"] == pytest.approx(fleiss) and (ag["fleiss"]["n"], ag["fleiss"]["samples"]) == (14, 7)
    assert ag["fleiss"]["ci"][0] <= fleiss <= ag["fleiss"]["ci"][1] and ag["fleiss"]["ci"][0] < ag["fleiss"]["ci"][1]
    assert all(pr["kappa_ci"][0] <= pr["kappa"] <= pr["kappa_ci"][1] for pr in ag["pairs"])
    # the bootstrap resamples images (the default clusters): 7 samples on fewer images, flagged as too few
    clusters = ag["fleiss"]["clusters"]
    assert ag["cluster"] == "image" and 2 <= clusters < 7
    assert "Fleiss' kappa of all 3 judges" in printed and f"(only {clusters} images: too narrow)" in printed
    # the planted disagreements, in both trials, with every verdict and what each judge model said
    dis = {(d["key"], d["trial"]): d for d in ag["disagreements"]}
    assert set(dis) == {(q, k) for q in ("q1", "q2", "q4", "q6", "q7") for k in (0, 1)}
    q6 = dis[("q6", 1)]
    assert q6["verdicts"] == {ja: "correct", jb: "correct", jc: "wrong"}
    assert q6["judge_outputs"][jc] == ["forty-two kilometres", "<wrong>"]
    assert q6["response"] == eb.QUESTIONS["q6"][4] and q6["answer"] == "42 km" and "[q6]" in q6["question"]
    assert f"{ja} vs {jc}: agree" in printed and "kappa" in printed and "10 disagreement(s)" in printed

    # the same from the library; the report shows it (rendered in a browser by tests/viz/test_report_browser.py)
    assert judge_agreement([read_run(d) for d in (src, new_b, new_c)]).to_dict() == ag
    page = tmp_path / "report.html"
    assert report.main([str(src), "--judges", str(new_b), str(new_c), "--out", str(page), "--thumb_px", "64"]) == 0
    html = page.read_text()
    assert 'id="kappa-table"' in html and "Disagreements (10)" in html and html.count("<td>q6</td>") == 2
    assert "<p>16 items (sample &times; trial); 14 judged by every judge" in html and "built-in method" not in html
    assert "id='fleiss-kappa'>Fleiss&#x27; kappa of all 3 judges" in html
    # a rerun resumes without asking any judge again
    asked = judge_b.count + judge_c.count
    assert (
        rejudge.main(
            [str(src), "--judge_model", "judge-b", "judge-c", "--no_progress"]
            + ["--judge_api_base_url", judge_b.base_url, judge_c.base_url]
        )
        == 0
    )
    assert judge_b.count + judge_c.count == asked
    # a later re-judging with one of them writes its own agreement file: the three judges' is kept
    before = both_file.read_text()
    assert (
        rejudge.main([str(src), "--judge_model", "judge-b", "--no_progress", "--judge_api_base_url", judge_b.base_url])
        == 0
    )
    only_b = json.loads((out / "m/o3_bench@judge-agreement-judge-b.json").read_text())
    assert only_b["judges"] == [ja, jb] and both_file.read_text() == before


def test_judge_flags_are_one_for_all_or_one_per_judge(tmp_path):
    with pytest.raises(SystemExit) as e:
        rejudge.main([str(tmp_path), "--judge_model", "a", "b", "--judge_api_base_url", "u1", "u2", "u3"])
    assert e.value.code == 2
    with pytest.raises(SystemExit):
        rejudge.main([str(tmp_path), "--judge_model", "a", "b", "--eval_name", "x"])
    with pytest.raises(SystemExit):
        rejudge.main([str(tmp_path), "--judge_model", "a", "a"])


def test_agreement_rules_on_planted_records():
    from insight_o3.analysis.run_records import RunRecords
    from insight_o3.evaluation.schema import EvalRecord

    def run(name, statuses, methods=None):
        recs = [
            EvalRecord.from_dict(
                {
                    "sample_key": f"s{i}",
                    "index": i,
                    "question": "q",
                    "answer": "A",
                    "eval_result": {"status": s, "judge_method": (methods or {}).get(i, "judge")},
                }
            )
            for i, s in enumerate(statuses)
        ]
        return RunRecords(name, name, [recs], {"judge": {"model": name, "flow": "extract"}})

    a = run("a", ["correct", "wrong", "failed", "incomplete", "correct"])
    b = run("b", ["correct", "correct", "correct", "incomplete", "correct"], methods={0: "rule"})
    ag = judge_agreement([a, b])
    # s2 (lost by a) and s3 (never judged) are left out; s1 is the one disagreement
    assert ag.judged == 3 and ag.lost == {"a (extract)": 1, "b (extract)": 0}
    assert [d.key for d in ag.disagreements] == ["s1"]
    assert ag.pairs[0]["n"] == 3 and ag.pairs[0]["n_judge_decided"] == 3  # a used its model on s0
    # both judges say "correct" to everything they judged: kappa is undefined (None), not 1 or 0
    same = judge_agreement([run("a", ["correct"] * 3), run("b", ["correct"] * 3)])
    assert same.pairs[0]["kappa"] is None and same.pairs[0]["agreement"] == 1.0


def test_rejudging_with_the_source_judge_gives_distinct_labels(tmp_path, openai_server, capsys):
    """Main labelled both judges ``judge-a (extract) [m/o3_bench]`` (the re-judged run's card keeps its source's
    eval_name): one pair line "X vs X", and one accuracy line, the second judge's verdicts overwriting the first's."""
    bench = eb.make_bench(tmp_path / "bench")
    main_srv, judge_a = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    evaluate_judge_a(bench, out, main_srv.base_url, judge_a.base_url)
    src = out / "m/o3_bench"
    capsys.readouterr()
    argv = [str(src), "--judge_model", "judge-a", "--judge_api_base_url", judge_a.base_url, "--no_progress"]
    assert rejudge.main([*argv, "--eval_name", "m/o3_bench_again"]) == 0
    printed = capsys.readouterr().out
    ag = json.loads((out / "m/o3_bench@judge-agreement-judge-a.json").read_text())
    assert len(set(ag["judges"])) == 2 and len(ag["accuracy"]) == 2
    pair = ag["pairs"][0]
    assert pair["a"] != pair["b"] and str(src) in pair["a"] and "o3_bench_again" in pair["b"]
    assert f"{pair['a']} vs {pair['b']}: agree 100.0%" in printed


def test_judge_labels_are_distinct_for_the_same_run_given_twice():
    from insight_o3.analysis.agreement import judge_labels
    from insight_o3.analysis.run_records import RunRecords

    card = {"judge": {"model": "j", "flow": "extract"}}
    one, other = RunRecords("/r/x", "x", [], card), RunRecords("/r/y", "y", [], card)
    assert judge_labels([one, other]) == ["j (extract) [x]", "j (extract) [y]"]
    assert judge_labels([one, RunRecords("/s/x", "x", [], card)]) == [
        "j (extract) [x] [/r/x]",
        "j (extract) [x] [/s/x]",
    ]
    assert len(set(judge_labels([one, one]))) == 2
    assert judge_labels([one, RunRecords("/r/z", "z", [], {"judge": {"model": "k", "flow": "extract"}})]) == [
        "j (extract)",
        "k (extract)",
    ]
