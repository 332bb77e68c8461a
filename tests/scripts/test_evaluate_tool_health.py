"""Tool-use health in InSight-o3 mode (metrics and report) and per-role usage of the three endpoints."""

from __future__ import annotations

import json

import pytest

from insight_o3.scripts import evaluate
from insight_o3.viz.report import build_report
from tests.support import eval_bench as eb
from tests.support import insight_o3_bench as io3
from tests.support.openai_server import Call, Reply, chat


def never_searching_reasoner():
    """A vReasoner that has collapsed to answering without ever calling the vSearcher."""

    def script(req: dict, call: Call) -> Reply:
        q = eb.marker("\n".join(str(m.get("content")) for m in req["messages"] if m["role"] == "user"))
        text, finish = io3.FINAL[q]
        return chat(text, finish_reason=finish)

    return script


@pytest.fixture
def bench(tmp_path):
    return eb.make_bench(tmp_path / "bench")


def test_tool_use_health_metrics_usage_and_report(bench, tmp_path, openai_server):
    r_srv, s_srv, j_srv = (
        openai_server(io3.reasoner_script()),
        openai_server(io3.searcher_script()),
        openai_server(eb.judge_script()),
    )
    out = tmp_path / "out"
    assert evaluate.main(io3.argv(out, *bench, r_srv.base_url, s_srv.base_url, j_srv.base_url)) == 0
    m = json.loads((out / eb.EVAL / "trial_0/eval_metrics.json").read_text())
    assert m["overall_stats"] == io3.EXPECTED_STATS
    # every episode but q3's (invalid: format retries exhausted) makes exactly one call
    assert m["search_calls_hist"] == {"0": 0, "1": 8}
    assert m["zero_search_ratio"] == 0.0
    assert m["format_failure_ratio"] == pytest.approx(1 / 8) and m["format_retry_ratio"] == pytest.approx(1 / 8)
    assert 0 < m["crop_area"]["mean"] < 1 and m["crop_area"]["p10"] <= m["crop_area"]["p90"]
    recs = [json.loads(x) for x in (out / eb.EVAL / "trial_0/eval_records.jsonl").read_text().splitlines()]
    assert sum(r["usage"]["vsearcher"]["requests"] for r in recs) == s_srv.count
    assert sum(r["usage"]["model"]["requests"] for r in recs) == r_srv.count
    assert sum(r["usage"].get("judge", {}).get("requests", 0) for r in recs) == j_srv.count
    html = build_report(out / eb.EVAL)
    assert "Tool-use health" in html and 'id="tool-use-table"' in html and "tool use has collapsed" not in html
    assert "Tokens and cost per trial" in html and "vsearcher prompt" in html
    assert "Run card (reproducibility)" in html and "id='run-card'" in html and "scripted-judge" in html


def test_collapse_to_zero_tool_use_is_flagged(bench, tmp_path, openai_server):
    r_srv, s_srv, j_srv = (
        openai_server(never_searching_reasoner()),
        openai_server(io3.searcher_script()),
        openai_server(eb.judge_script()),
    )
    out = tmp_path / "out"
    assert evaluate.main(io3.argv(out, *bench, r_srv.base_url, s_srv.base_url, j_srv.base_url)) == 0
    m = json.loads((out / eb.EVAL / "trial_0/eval_metrics.json").read_text())
    assert s_srv.count == 0
    assert m["zero_search_ratio"] == 1.0 and m["search_calls_hist"] == {"0": 8}
    assert "crop_area" not in m
    summary = json.loads((out / eb.EVAL / "summary_metrics.json").read_text())
    assert summary["zero_search_ratio"]["mean"] == 1.0
    html = build_report(out / eb.EVAL)
    assert "100% of episodes made no vSearcher call (tool use has collapsed)" in html
