"""Record the on-disk line of each evaluation record below as the schema reads and writes it back
(``tests/golden/eval_records.json``, compared by ``tests/evaluation/test_schema.py``).

Recorded with the hand-written dataclass schema (``insight_o3/evaluation/schema.py`` at aa8e07c) before it became
pydantic models, so the file pins the on-disk format across that change: records of every version this project has
written (first versions without a status, ``text``/``error`` keys, a number answer), unknown keys at both levels,
``file_name``/``subset`` annotations, usage with nulls and unreported requests, format 1 and 2 trajectories, nulls
where a field has a default. Re-recorded on purpose once since: a record written now carries ``image_sha256`` (after
``image_path``; absent from older records, which write back as before), pinned by the ``built`` case and those made
from it. Re-record only when the format changes on purpose::

    PYTHONPATH=. .venv/bin/python tests/golden/record_eval_records.py tests/golden/eval_records.json
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

from insight_o3.evaluation.judge import Verdict
from insight_o3.evaluation.runner import build_record
from insight_o3.evaluation.schema import EvalRecord
from insight_o3.protocol.attempt import Attempt
from insight_o3.protocol.attempt_stats import InSightO3Stats
from insight_o3.protocol.sample import Sample

TRAJ = [
    {"role": "system", "content": "sys"},
    {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "ref:0"}}, {"type": "text", "text": "Q?"}]},
    {"role": "assistant", "content": [{"type": "text", "text": "<answer>A</answer>"}]},
]


def built() -> dict:
    s = Sample(
        index=0,
        question_id=7,
        image="a.png",
        image_path="/imgs/a.png",
        question="Q?",
        options="A. x\nB. y",
        answer="A",
        category="charts",
        extra={"layout_infos": {"1": {"bbox": [1, 2, 3, 4]}}, "note": "ü ✓"},
        key="7",
        line=1,
        image_field="image",
        category_field="subset",
    )
    a = Attempt(
        "<answer>A</answer>",
        "stop",
        trajectory=TRAJ,
        usage={"prompt_tokens": 3},
        stats=InSightO3Stats(n_search_calls=1),
    )
    rec = build_record(
        s,
        2,
        a,
        Verdict("correct", "A", True, "rule"),
        {"model": {"prompt_tokens": 3, "completion_tokens": 1, "requests": 1}},
        0.5,
        image_sha256=hashlib.sha256(b"a.png").hexdigest(),
    )
    return rec.to_dict()


def cases() -> list[tuple[str, dict]]:
    b = built()
    er = b["eval_result"]
    return [
        ("built", b),
        (
            "first_version_failed",
            {
                "question_id": 3,
                "question": "q",
                "answer": "B",
                "image": "x.png",
                "eval_result": {"success": False, "error": "HTTP 503"},
            },
        ),
        (
            "first_version_judged",
            {"sample_key": "k", "eval_result": {"success": True, "is_correct": True, "text": "A"}},
        ),
        ("legacy_incomplete", {"index": 4, "eval_result": {"success": True, "finish_reason": "length", "text": "x"}}),
        (
            "legacy_wrong_number_answer",
            {
                "question_id": "q9",
                "eval_result": {"success": True, "extracted_answer": 42, "fail_reason": 7, "finish_reason": "stop"},
            },
        ),
        ("unknown_keys_kept", {**b, "zz_later": [1, 2], "eval_result": {**er, "later_field": {"a": 1}}}),
        (
            "file_name_and_subset",
            {
                "index": 1,
                "sample_key": "s1",
                "file_name": "f.png",
                "question": "Q",
                "answer": "C",
                "subset": "map",
                "options": ["A. a", "B. b"],
                "trial": 0,
                "eval_result": {"status": "wrong", "response": "B"},
            },
        ),
        (
            "usage_nulls_and_unreported",
            {
                **b,
                "usage": {
                    "model": {"prompt_tokens": None, "completion_tokens": 2, "unreported_requests": 1},
                    "judge": {},
                },
                "cost_usd": 1,
            },
        ),
        ("format1_text_twice", {**b, "eval_result": {**er, "trajectory": TRAJ}}),
        ("response_ref_without_response", {**b, "eval_result": {**er, "response": None}}),
        (
            "nulls_for_defaults",
            {
                **b,
                "eval_result": {
                    **er,
                    "judge_outputs": None,
                    "stats": None,
                    "trajectory": None,
                    "image": None,
                    "usage": None,
                },
            },
        ),
        ("bool_coercion", {**b, "eval_result": {**er, "is_correct": 1, "has_answer": 0, "success": "yes"}}),
        (
            "no_category_fields",
            {"sample_key": 5, "eval_result": {"status": "failed", "fail_stage": "judge", "fail_reason": "judge down"}},
        ),
        (
            "question_answer_numbers",
            {"sample_key": "n", "question": 12, "answer": 3.5, "category": 4, "eval_result": {"status": "invalid"}},
        ),
    ]


def main() -> None:
    out = []
    for cid, rec in cases():
        line = json.dumps(EvalRecord.from_dict(json.loads(json.dumps(rec)), f"{cid}:1").to_dict(), ensure_ascii=False)
        out.append({"id": cid, "input": rec, "written": line})
    Path(sys.argv[1]).write_text(json.dumps({"cases": out}, indent=1, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
