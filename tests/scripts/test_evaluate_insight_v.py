"""``evaluate --agent insight_v`` end to end on the demo benchmark against scripted endpoints with planted episodes
(:class:`insight_o3.demo.endpoints.InsightVScripts`: a right chain, a wrong chain the summary overrules, a malformed
chain — no ``<thoughts>`` span, or cut by the token limit —, a right chain the summary overrules wrongly): each
record's verdicts, its attribution bucket, both conversations in the record; then the analysis commands (report,
compare, export) on the run, unchanged."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from insight_o3.agents import insight_v as iv
from insight_o3.demo.endpoints import INSIGHT_V_CASES, DemoScripts, InsightVScripts
from insight_o3.evaluation.agent_registry import get_agent
from insight_o3.evaluation.attribution import attribute
from insight_o3.evaluation.schema import EvalRecord
from insight_o3.protocol.attempt_stats import InsightVStats
from insight_o3.scripts import compare, evaluate, export, make_demo_bench, report


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("iv_bench")
    argv = ["--out", str(out), "--num_images", "4", "--questions_per_image", "2", "--min_side", "300", "--seed", "3"]
    assert make_demo_bench.main(argv) == 0
    return out


def _evaluate(bench: Path, out: Path, model_url: str, judge_url: str, *extra: str) -> int:
    return evaluate.main(
        [
            "--ann_file",
            str(bench / "metadata.jsonl"),
            "--img_dir",
            str(bench),
            "--model",
            "insight-v",
            "--api_base_url",
            model_url,
            "--api_key",
            "EMPTY",
            "--judge_model",
            "judge",
            "--judge_api_base_url",
            judge_url,
            "--judge_api_key",
            "EMPTY",
            "--output_dir",
            str(out),
            "--no_progress",
            *extra,
        ]
    )


@pytest.fixture(scope="module")
def iv_run(bench, tmp_path_factory, request):
    from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer

    out = tmp_path_factory.mktemp("iv_out")
    scripts = InsightVScripts.from_metadata(bench / "metadata.jsonl")
    judge = DemoScripts.from_metadata(bench / "metadata.jsonl")
    with ScriptedOpenAIServer(scripts.script) as srv, ScriptedOpenAIServer(judge.judge) as jsrv:
        rc = _evaluate(bench, out, srv.base_url, jsrv.base_url, "--agent", "insight_v", "--eval_name", "iv/demo")
        requests = list(srv.requests)
    assert rc == 0
    run = out / "iv" / "demo"
    recs = [
        EvalRecord.from_dict(json.loads(line), "test")
        for line in (run / "trial_0" / "eval_records.jsonl").read_text().splitlines()
    ]
    return run, recs, scripts, requests


def test_planted_episodes_get_their_verdicts_and_buckets(iv_run):
    run, recs, scripts, _ = iv_run
    seen = set()
    for rec in recs:
        row = next(r for r in scripts.rows if r["question_id"] == rec.question_id)
        name, chain, summary, bucket = scripts.case(row)
        seen.add(name)
        er = rec.eval_result
        assert er.status == ("correct" if summary == "right" else "wrong"), name
        assert isinstance(er.stats, InsightVStats), name
        chain_verdict = er.stats.judged["chain"]
        if chain == "right":
            assert chain_verdict.status == "correct", name
        elif chain == "wrong":
            assert chain_verdict.status == "wrong" and chain_verdict.has_answer, name
        else:  # malformed: no answer in it (no span) or cut off (incomplete: the judge never reads it)
            kind = scripts.malformed_kind(row)
            assert er.stats.thoughts == ("missing" if kind == "no_span" else "unclosed")
            assert chain_verdict.status == ("incomplete" if kind == "cut" else "wrong")
            assert not chain_verdict.has_answer
            assert er.stats.reasoner_finish_reason == ("length" if kind == "cut" else "stop")
        assert attribute(rec).bucket == bucket, name
        # both conversations in the record, each message named by its agent; the summary is the response
        assert [m.get("name") for m in er.trajectory] == ["reasoner"] * 3 + ["summary"] * 3
        assert er.response == er.trajectory[-1]["content"][0]["text"]
        assert er.stats.chain is not None and er.stats.chain in iv.summary_question("", er.stats.chain)
        assert set(rec.usage) == {"model", "summary", "judge"}
    assert seen == {c[0] for c in INSIGHT_V_CASES}
    metrics = json.loads((run / "trial_0" / "eval_metrics.json").read_text())
    counts = metrics["attribution"]
    assert counts["summary_rescued"] == sum(scripts.case(r)[0] == "chain_wrong_summary_overrules" for r in scripts.rows)
    assert counts["summary_overruled"] == sum(
        scripts.case(r)[0] == "chain_right_summary_overruled" for r in scripts.rows
    )
    card = json.loads((run / "run_card.json").read_text())
    assert card["agent"] == {"name": "insight_v", "protocol": get_agent("insight_v").protocol_version}


def test_requests_follow_the_protocol(iv_run, bench):
    _, recs, scripts, requests = iv_run
    assert len(requests) == 2 * len(recs)
    for req in requests:
        text = "".join(p.get("text", "") for p in req["messages"][1]["content"])
        summary = text.startswith(iv.SUMMARY_PREFIX)
        assert req["messages"][0] == {"role": "system", "content": iv.SYSTEM_PROMPT}
        assert req["max_tokens"] == (4096 if summary else 1024) and req["temperature"] == 0.2 and req["top_p"] == 0.95
        assert ("skip_special_tokens" in req) is not summary
        images = [p for p in req["messages"][1]["content"] if p["type"] == "image_url"]
        assert len(images) == 1 and images[0]["image_url"]["url"].startswith("data:image/png")


def test_the_analysis_commands_read_the_run(iv_run, bench, tmp_path):
    run, recs, _, _ = iv_run
    page = tmp_path / "report.html"
    assert report.main([str(run), "--output_file", str(page)]) == 0
    html = page.read_text()
    for label in ("assistant · reasoner", "assistant · summary", "summary overruled a right chain"):
        assert label in html
    # a single-model run on the same benchmark, then compare and export
    from insight_o3.endpoints.scripted_server import ScriptedOpenAIServer

    judge = DemoScripts.from_metadata(bench / "metadata.jsonl")
    with ScriptedOpenAIServer(judge.model) as srv, ScriptedOpenAIServer(judge.judge) as jsrv:
        out = tmp_path / "single"
        assert _evaluate(bench, out, srv.base_url, jsrv.base_url, "--eval_name", "single/demo") == 0
    cmp = tmp_path / "compare.html"
    assert compare.main([str(out / "single" / "demo"), str(run), "--output_file", str(cmp)]) == 0
    assert "summary overruled a right chain" in cmp.read_text()
    assert export.main([str(run), "--output_dir", str(tmp_path / "export")]) == 0
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "export" / "trajectories.parquet")
    assert table.num_rows == len(recs)
    usage = table.column("usage").to_pylist()
    assert all(u["summary"]["requests"] == 1 for u in usage)


def test_summary_flags_belong_to_insight_v(bench, tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        _evaluate(
            bench, tmp_path, "http://127.0.0.1:9", "http://127.0.0.1:9", "--summary_model", "x", "--eval_name", "a"
        )
    assert e.value.code == 2
    assert "--summary_model" in capsys.readouterr().err
