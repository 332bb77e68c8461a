"""A row's fields never collide with the harness's: an annotation with ``index``, ``sample_key``, ``row`` … columns (a
VLMEvalKit TSV's ``index``) is evaluated; the record keeps them under ``row`` and its own keys as they were; resume,
rejudge and the export read them back as the row had them."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

from insight_o3.protocol.sample import HARNESS_KEYS, ROW_KEY, record_fields, row_fields
from insight_o3.scripts import evaluate, export, rejudge
from tests.support import eval_bench as eb

CLASHING = {"index": 7000, "sample_key": "theirs", "trial": "T", "eval_result": "none", "row": [1, 2], "usage": "u"}


def test_record_fields_nest_only_the_clashing_names_and_come_back_whole():
    extra = {"explanation": "e", **CLASHING}
    stored = record_fields(extra)
    assert stored["explanation"] == "e" and set(stored[ROW_KEY]) == set(CLASHING)
    assert not set(stored) & (set(HARNESS_KEYS) - {ROW_KEY})
    assert row_fields(stored) == extra
    assert record_fields({"explanation": "e"}) == {"explanation": "e"}  # rows without a clash: as before


def test_an_annotation_with_the_harness_keys_as_columns_runs_resumes_rejudges_and_exports(tmp_path, openai_server):
    ann, img = eb.make_bench(tmp_path / "bench")
    rows = [json.loads(line) for line in ann.read_text().splitlines()]
    ann.write_text("".join(json.dumps({**r, **CLASHING, "index": 100 + i}) + "\n" for i, r in enumerate(rows)))
    model, judge = openai_server(eb.model_script()), openai_server(eb.judge_script())
    out = tmp_path / "out"
    argv = eb.evaluate_argv(ann, img, out, model.base_url, judge.base_url, api_key="EMPTY", judge_api_key="EMPTY")
    assert evaluate.main(argv) == 0
    run = out / "m/o3_bench"
    recs = eb.read_records(run)
    assert [r["sample_key"] for r in recs] == [r["question_id"] for r in rows]  # the harness's keys, not the row's
    assert [r["index"] for r in recs] == list(range(len(rows)))
    for i, r in enumerate(recs):
        assert r[ROW_KEY] == {**CLASHING, "index": 100 + i} and r["trial"] == 0 and isinstance(r["eval_result"], dict)
    asked = model.count
    assert evaluate.main(argv) == 0 and model.count == asked  # resumed: nothing asked twice
    # rejudge rebuilds each sample from its record: the row's fields come back as the row had them
    assert rejudge.main([str(run), "--judge_model", "scripted-judge", "--judge_api_base_url", judge.base_url,
                         "--judge_api_key", "EMPTY", "--no_progress"]) == 0  # fmt: skip
    again = eb.read_records(out / "m" / "o3_bench@rejudge-scripted-judge")
    assert [r[ROW_KEY] for r in again] == [r[ROW_KEY] for r in recs]
    assert export.main([str(run), "--output_dir", str(tmp_path / "export")]) == 0
    table = pq.read_table(tmp_path / "export" / "trajectories.parquet").to_pylist()
    assert [json.loads(t["row"])["index"] for t in table[: len(rows)]] == [100 + i for i in range(len(rows))]
    assert [t["index"] for t in table[: len(rows)]] == list(range(len(rows)))
