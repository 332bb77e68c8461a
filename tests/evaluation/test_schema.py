"""The typed evaluation record (insight_o3.evaluation.schema): one schema written and read by the
same code, backward compatible on disk, with errors naming file, line and field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from insight_o3.evaluation.judge import Verdict
from insight_o3.evaluation.metrics import compute_metrics
from insight_o3.evaluation.runner import build_record
from insight_o3.evaluation.schema import STATUSES, EvalRecord, RecordError, TokenUsage
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.attempt_stats import InSightO3Stats
from insight_o3.protocol.sample import Sample
from insight_o3.storage import RecordFileError, RecordLog
from insight_o3.viz import run_view as rv

#: The layout every version of the runner has written (key order included).
RECORD_KEYS = [
    "index",
    "sample_key",
    "question_id",
    "image",
    "image_path",
    "question",
    "options",
    "answer",
    "subset",
    "category",
    "layout_infos",
    "trial",
    "eval_result",
]
RESULT_KEYS = [
    "success",
    "status",
    "fail_reason",
    "fail_stage",
    "response",
    "finish_reason",
    "extracted_answer",
    "is_correct",
    "has_answer",
    "judge_method",
    "judge_outputs",
    "usage",
    "image",
    "trajectory",
    "stats",
]


def _sample() -> Sample:
    return Sample(
        index=0,
        question_id=7,
        image="a.png",
        image_path="/imgs/a.png",
        question="Q?",
        options="A. x\nB. y",
        answer="A",
        category="charts",
        extra={"layout_infos": {"1": {}}},
        key="7",
        line=1,
        image_field="image",
        category_field="subset",
    )


def _built() -> EvalRecord:
    attempt = Attempt("<answer>A</answer>", "stop", usage={"prompt_tokens": 3}, stats=InSightO3Stats(n_search_calls=1))
    return build_record(_sample(), 2, attempt, Verdict("correct", "A", True, "rule"))


def test_build_record_is_typed_and_keeps_the_on_disk_layout():
    rec = _built()
    assert isinstance(rec, EvalRecord) and rec.status == "correct" and rec.trial == 2
    d = rec.to_dict()
    assert list(d) == RECORD_KEYS and list(d["eval_result"]) == RESULT_KEYS
    assert d["subset"] == d["category"] == "charts" and d["image"] == "a.png"
    back = EvalRecord.from_dict(json.loads(json.dumps(d)), "f:1")
    assert back == rec and back.to_dict() == d


def test_usage_and_cost_are_optional_typed_fields():
    rec = _built()
    assert rec.usage == {} and rec.cost_usd is None and "usage" not in rec.to_dict()
    d = {
        **rec.to_dict(),
        "usage": {
            "model": {"prompt_tokens": 10, "completion_tokens": 5, "reasoning_tokens": 2, "requests": 1},
            "judge": {"prompt_tokens": 4},
        },
        "cost_usd": 0.25,
    }
    back = EvalRecord.from_dict(d, "f:1")
    assert back.usage["model"] == TokenUsage(prompt_tokens=10, completion_tokens=5, reasoning_tokens=2, requests=1)
    assert back.usage["judge"] == TokenUsage(prompt_tokens=4)
    assert back.cost_usd == 0.25 and back.to_dict()["usage"]["judge"]["requests"] == 0
    with pytest.raises(RecordError, match=r"^f:3: field 'usage.judge.prompt_tokens' must be a non-negative integer"):
        EvalRecord.from_dict({**d, "usage": {"judge": {"prompt_tokens": -1}}}, "f:3")
    with pytest.raises(RecordError, match=r"^f:4: field 'cost_usd' must be a number"):
        EvalRecord.from_dict({**d, "cost_usd": "cheap"}, "f:4")


@pytest.mark.parametrize(
    "change, field",
    [
        (lambda d: d["eval_result"].update(status="great"), "eval_result.status"),
        (lambda d: d["eval_result"].update(fail_stage="elsewhere"), "eval_result.fail_stage"),
        (lambda d: d["eval_result"].update(trajectory="text"), "eval_result.trajectory"),
        (lambda d: d["eval_result"].update(stats=[1]), "eval_result.stats"),
        (lambda d: d.update(trial="first"), "trial"),
        (lambda d: d.update(question_id=[1]), "question_id"),
    ],
)
def test_malformed_records_name_file_line_and_field(tmp_path, change, field):
    good = _built().to_dict()
    bad = json.loads(json.dumps(good))
    change(bad)
    path = tmp_path / "eval_records.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    pattern = rf"eval_records.jsonl:2: field '{field}'"
    with pytest.raises(RecordError, match=pattern) as e:  # the runner's resume reads through the schema
        RecordLog.open(str(path), parse=EvalRecord.from_dict)
    assert isinstance(e.value, RecordFileError)  # `evaluate` reports it and exits 2
    assert path.read_text().count("\n") == 2  # a complete bad line is never dropped as "torn"
    (tmp_path / "trial_0").mkdir()
    path.rename(tmp_path / "trial_0" / "eval_records.jsonl")
    with pytest.raises(rv.RunError, match=pattern):  # so does the viewer
        rv.load_trial(tmp_path / "trial_0")
    if field.startswith("eval_result"):  # metrics validate the fields they read
        with pytest.raises(RecordError, match=rf"record 0: field '{field}'"):
            compute_metrics([bad])


def test_typed_log_round_trips_records(tmp_path):
    path = str(tmp_path / "r.jsonl")
    lg = RecordLog.open(path, parse=EvalRecord.from_dict)
    rec = _built()
    lg.append(rec)
    lg.close()
    again = RecordLog.open(path, parse=EvalRecord.from_dict)
    assert again.records == {"7": rec}
    again.compact(["7"])
    again.close()
    assert json.loads(open(path).read()) == rec.to_dict()


def test_old_records_of_this_project_still_load():
    # first versions: no status, sample_key, fail_stage, judge fields or trial
    old = {
        "question_id": 3,
        "question": "q",
        "answer": "B",
        "image": "x.png",
        "eval_result": {"success": False, "error": "HTTP 503"},
    }
    r = EvalRecord.from_dict(old, "old:1")
    assert (r.sample_key, r.status, r.eval_result.fail_reason, r.trial) == ("3", "failed", "HTTP 503", None)
    assert r.image_path == "x.png" and r.category == "unknown"
    judged = EvalRecord.from_dict(
        {"sample_key": "k", "eval_result": {"success": True, "is_correct": True, "text": "A"}}, "old:2"
    )
    assert judged.status == "correct" and judged.eval_result.response == "A"
    assert set(STATUSES) == {"correct", "wrong", "incomplete", "invalid", "failed"}


def test_eval_result_is_declared_once():
    """The on-disk keys, their order and the reading come from the model's fields: every declared field is written
    and read back without a list of names to keep in step (a field missing from such a list used to land in
    ``extra``); the raw API usage is ``api_usage`` in memory (``usage`` on disk, as every version wrote it)."""
    from insight_o3.evaluation.schema import EvalResult

    declared = [f.serialization_alias or n for n, f in EvalResult.model_fields.items() if n != "extra"]
    full = EvalResult(
        status="wrong",
        success=True,
        fail_reason="r",
        fail_stage="judge",
        response="R",
        finish_reason="stop",
        extracted_answer="B",
        has_answer=True,
        judge_method="rule",
        judge_outputs=["j"],
        api_usage={"prompt_tokens": 3},
        image={"path": "a.png"},
        trajectory=[{"role": "assistant", "content": [{"type": "text", "text": "R"}]}],
        stats=InSightO3Stats(n_search_calls=1),
        extra={"later_field": 1},
    )
    on_disk = full.to_dict()
    assert list(on_disk) == [*declared, "later_field"] and on_disk["usage"] == {"prompt_tokens": 3}
    assert on_disk["trajectory"][0]["content"] == [{"type": "text", "ref": "response"}]  # the reply stored once
    assert EvalResult.from_dict(on_disk, "f:1") == full


GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "eval_records.json").read_text())["cases"]


@pytest.mark.parametrize("case", GOLDEN, ids=[c["id"] for c in GOLDEN])
def test_records_are_written_byte_for_byte_as_before(case, tmp_path):
    """Every kind of record this project has written reads and writes back (through the record log) to the bytes the
    hand-written schema wrote (tests/golden/record_eval_records.py)."""
    rec = EvalRecord.from_dict(json.loads(json.dumps(case["input"])), f"{case['id']}:1")
    path = tmp_path / "eval_records.jsonl"
    lg = RecordLog.open(str(path), parse=EvalRecord.from_dict)
    lg.append(rec)
    lg.close()
    assert path.read_text(encoding="utf-8") == case["written"] + "\n"
    assert EvalRecord.from_dict(json.loads(case["written"]), "again:1") == rec


def test_a_record_built_in_code_is_validated_as_given():
    """Only what is read from disk is upgraded and split (``text`` is an unknown key of a result built in code)."""
    from insight_o3.evaluation.schema import EvalResult

    with pytest.raises(ValueError, match="status"):
        EvalResult(status="great")
    with pytest.raises(ValueError, match="text"):
        EvalResult(status="wrong", text="A")  # type: ignore[call-arg]
    r = EvalResult(status="wrong", response="A", extra={"later": 1})
    assert r.to_dict()["later"] == 1 and "extra" not in r.to_dict()
