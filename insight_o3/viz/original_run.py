"""Records written by the original release's harness (m-Just/InSight-o3 ``insight_o3/scripts/evaluate.py``),
read as this project's records so the report, the notebooks and the comparisons take old runs too.

An original record is the annotation row plus ``eval_result`` =
``{sample_index, success, fail_reason, inference_result: {success, fail_reason, finish_reason,
conversations: [{agent, messages}], last_message_content}, extracted_answer, is_correct}``; its
messages hold the image as a base64 data URL. :func:`convert_record` maps it to our shape:

* ``status``: ``correct``/``wrong`` when judged (``success``); ``failed`` when the query was lost
  (``inference_result.success`` false) or the judge call failed (``answer_extraction_failed``,
  ``judge_failed``; the original counts those as "invalid", neither is correct); ``incomplete`` when
  truncated (``finish_reason`` not ``stop``);
* ``trajectory``: the conversation with each image replaced by a reference to the sample's image
  (region: the whole image; size: the size it was sent at, read from the data URL) — no pixels kept;
* ``sample_key``: the ``question_id`` when unique in the file, else ``#<sample_index>`` (the
  convention of :mod:`insight_o3.evaluation.samples`, so keys match a new run of the same file).
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Callable
from typing import Any

from PIL import Image, UnidentifiedImageError

from ..base.json_types import JSONObject
from ..evaluation.schema import EvalRecord, EvalResult
from ..protocol.statuses import JUDGED_STATUSES, FailStage, VerdictStatus

#: Fields of an original ``eval_result`` that mark the format.
ORIGINAL_KEYS = ("inference_result",)
_JUDGE_FAILURES = ("answer_extraction_failed", "judge_failed")


def is_original_record(rec: dict) -> bool:
    er = rec.get("eval_result")
    return isinstance(er, dict) and "inference_result" in er and "status" not in er


def data_url_size(url: str) -> tuple[int, int] | None:
    """``(w, h)`` of a base64 ``data:`` URL image (None if it is not one or cannot be read)."""
    if not isinstance(url, str) or not url.startswith("data:") or "," not in url:
        return None
    try:
        with Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))) as im:
            return im.size
    except (binascii.Error, ValueError, UnidentifiedImageError, OSError):
        return None


def _status(er: dict) -> tuple[VerdictStatus, str | None]:
    inf = er.get("inference_result") or {}
    if er.get("success"):
        return (VerdictStatus.CORRECT if er.get("is_correct") else VerdictStatus.WRONG), None
    if not inf.get("success", False):
        return VerdictStatus.FAILED, f"inference failed: {inf.get('fail_reason') or er.get('fail_reason') or 'unknown'}"
    if inf.get("finish_reason") not in (None, "", "stop"):
        return VerdictStatus.INCOMPLETE, f"finish_reason={inf.get('finish_reason')}"
    reason = er.get("fail_reason") or "not judged"
    return VerdictStatus.FAILED, f"judge: {reason}" if reason in _JUDGE_FAILURES else reason


def _messages(conversations: Any, image: str, whole: tuple[int, int] | None) -> list[JSONObject] | None:
    if not isinstance(conversations, list) or not conversations:
        return None
    msgs = conversations[0].get("messages") if isinstance(conversations[0], dict) else None
    if not isinstance(msgs, list):
        return None
    out = []
    for m in msgs:
        if not isinstance(m, dict):
            continue
        c = m.get("content")
        parts: list[dict] = []
        if isinstance(c, str):
            parts.append({"type": "text", "text": c})
        elif isinstance(c, list):
            for p in c:
                if not isinstance(p, dict):
                    continue
                if p.get("type") == "image_url":
                    iu = p.get("image_url")
                    url = iu.get("url") if isinstance(iu, dict) else iu
                    sent = data_url_size(url) if isinstance(url, str) else None
                    size = sent or whole or (0, 0)
                    w, h = whole or size
                    parts.append(
                        {"type": "image", "image": {"path": image, "region": [0, 0, w, h], "size": list(size)}}
                    )
                elif p.get("type") == "text":
                    parts.append({"type": "text", "text": str(p.get("text", ""))})
        out.append({"role": str(m.get("role", "?")), "content": parts})
    return out


def convert_record(
    rec: dict,
    key: str,
    size_of: Callable[[str], tuple[int, int] | None] | None = None,
    where: str = "<original record>",
) -> JSONObject:
    """One original record as a record of this project (see the module doc), built through
    :class:`~insight_o3.evaluation.schema.EvalRecord` (errors name ``where``). ``size_of(path)`` gives
    the source image's ``(w, h)`` when it can be read (for the whole-image region of references)."""
    er = rec["eval_result"]
    inf = er.get("inference_result") or {}
    status, reason = _status(er)
    image = rec.get("image") or rec.get("file_name") or ""
    whole = size_of(image) if size_of and image else None
    out = {k: v for k, v in rec.items() if k != "eval_result"}
    out["sample_key"] = key
    out["index"] = er.get("sample_index")
    out["category"] = rec.get("category", rec.get("subset", "unknown"))
    result = EvalResult(
        status=status,
        success=status in JUDGED_STATUSES,
        fail_reason=reason,
        fail_stage=FailStage.JUDGE if (er.get("fail_reason") in _JUDGE_FAILURES) else None,
        response=inf.get("last_message_content") if inf.get("success") else None,
        finish_reason=inf.get("finish_reason") or None,
        extracted_answer=er.get("extracted_answer"),
        is_correct=bool(er.get("is_correct")) and status == VerdictStatus.CORRECT,
        has_answer=er.get("extracted_answer") not in (None, ""),
        trajectory=_messages(inf.get("conversations"), image, whole),
        extra={"source_format": "original"},
    )
    record = EvalRecord.from_dict({**out, "eval_result": {"status": status}}, where)
    record.eval_result = result
    return record.to_dict()


def original_keys(records: list[dict]) -> list[str]:
    """Sample keys for a file of original records: unique ``question_id`` s, else ``#<sample_index>``."""
    ids = [r.get("question_id") for r in records]
    if None not in ids and len({str(i) for i in ids}) == len(ids):
        return [str(i) for i in ids]
    out = []
    for pos, r in enumerate(records):
        idx = (r.get("eval_result") or {}).get("sample_index")
        out.append(f"#{idx if isinstance(idx, int) else pos}")
    return out
