"""The evaluation record: one line of ``trial_<k>/eval_records.jsonl``, as typed dataclasses.

:func:`insight_o3.evaluation.runner.build_record` produces an :class:`EvalRecord`; every reader
(the runner's resume, :mod:`.metrics`, :mod:`insight_o3.viz.run_view`, the converter of the
original release's records in :mod:`insight_o3.viz.original_run`) goes through
:meth:`EvalRecord.from_dict`, which names the file, the line and the field of anything malformed.

On disk a record is the sample's annotation fields (``index``, ``sample_key``, ``question_id``,
``image``/``file_name``, ``image_path``, ``question``, ``options``, ``answer``, ``category`` and any
other annotation field), ``trial``, ``eval_result`` (:class:`EvalResult`) and optionally the
per-role token ``usage`` (:class:`TokenUsage`) and ``cost_usd``. Older records of this project
load too: missing optional fields take their defaults, a missing ``status`` is inferred from
``success``/``is_correct``/``finish_reason`` as the first versions wrote them, and a record keyed by
``question_id`` or ``index`` only gets that as its ``sample_key``. Fields this schema does not
know are kept (``fields``/``extra``) and written back unchanged.

The reply is stored once (run directory format 2): on disk, the last assistant message of ``trajectory`` whose
text is ``response`` holds :data:`RESPONSE_REF` (``{"type": "text", "ref": "response"}``) instead of a second copy;
:meth:`EvalResult.from_dict` puts the text back and :meth:`EvalResult.to_dict` takes it out again, so in memory a
trajectory is always whole. Records of format 1 (the text twice) read as before.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Literal, cast, get_args

from ..storage.record_log import RecordFileError

Status = Literal["correct", "wrong", "incomplete", "invalid", "failed"]
#: The judge's statuses (see :mod:`.judge`): only ``correct`` is correct; ``failed`` = lost to API errors.
STATUSES: tuple[str, ...] = get_args(Status)
FailStage = Literal["solver", "judge"]
FAIL_STAGES: tuple[str, ...] = get_args(FailStage)
#: Roles whose token usage a record may carry.
USAGE_ROLES = ("model", "judge", "vsearcher")

#: Top-level keys with a typed field of their own (the rest of a record goes to ``EvalRecord.fields``).
_TYPED = (
    "index",
    "sample_key",
    "question_id",
    "image_path",
    "question",
    "options",
    "answer",
    "category",
    "trial",
    "eval_result",
    "usage",
    "cost_usd",
)


#: On disk, the text part that stands for ``eval_result.response`` (the reply is not stored twice).
RESPONSE_REF = {"type": "text", "ref": "response"}


def _message_text(m: dict) -> str | None:
    """The text of a message made of text parts only (None when it has another part or a compact prompt)."""
    c = m.get("content")
    if isinstance(c, str):
        return c
    if not isinstance(c, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in c):
        return None
    return "".join(p["text"] for p in c)


def _without_response(trajectory: list | None, response: str | None) -> list | None:
    """``trajectory`` as stored: its last assistant message, when its text is ``response``, as :data:`RESPONSE_REF`."""
    if not trajectory or response is None:
        return trajectory
    for i in range(len(trajectory) - 1, -1, -1):
        m = trajectory[i]
        if isinstance(m, dict) and m.get("role") == "assistant":
            if _message_text(m) != response:
                return trajectory
            return [*trajectory[:i], {**m, "content": [dict(RESPONSE_REF)]}, *trajectory[i + 1 :]]
    return trajectory


def _with_response(trajectory: list | None, response: str | None) -> list | None:
    """``trajectory`` as read: every :data:`RESPONSE_REF` part replaced by the text of ``response``."""
    if not trajectory:
        return trajectory
    whole = {"type": "text", "text": response or ""}
    out = []
    for m in trajectory:
        c = m.get("content") if isinstance(m, dict) else None
        if isinstance(c, list) and any(p == RESPONSE_REF for p in c):
            m = {**m, "content": [dict(whole) if p == RESPONSE_REF else p for p in c]}
        out.append(m)
    return out


class RecordError(RecordFileError):
    """A result record that does not fit the schema; the message names the file, line and field."""


def _fail(where: str, name: str, what: str) -> RecordError:
    return RecordError(f"{where}: field '{name}' {what}")


def _opt(obj: dict, name: str, types: type | tuple, where: str, prefix: str = "", default: Any = None) -> Any:
    v = obj.get(name, default)
    if v is None or (isinstance(v, types) and not (isinstance(v, bool) and bool not in _tuple(types))):
        return v
    tn = "/".join(t.__name__ for t in _tuple(types))
    raise _fail(where, prefix + name, f"must be {tn} or null, got {type(v).__name__} {v!r:.60}")


def _tuple(types) -> tuple:
    return types if isinstance(types, tuple) else (types,)


@dataclass
class TokenUsage:
    """Tokens and requests one role (``model``, ``judge``, ``vsearcher``) spent on one record;
    ``unreported_requests`` of them had no valid usage in their reply (the token counts are lower bounds;
    written only when not 0, see :mod:`insight_o3.endpoints.usage`)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    requests: int = 0
    unreported_requests: int = 0

    def to_dict(self) -> dict:
        out = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens,
            "requests": self.requests,
        }
        if self.unreported_requests:
            out["unreported_requests"] = self.unreported_requests
        return out

    @classmethod
    def from_dict(cls, obj: Any, where: str, name: str) -> TokenUsage:
        if not isinstance(obj, dict):
            raise _fail(where, name, f"must be an object, got {type(obj).__name__}")
        vals = {}
        for f in ("prompt_tokens", "completion_tokens", "reasoning_tokens", "requests", "unreported_requests"):
            v = obj.get(f, 0)
            if v is None:
                v = 0
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise _fail(where, f"{name}.{f}", f"must be a non-negative integer, got {v!r:.60}")
            vals[f] = v
        return cls(**vals)


@dataclass
class EvalResult:
    """``eval_result`` of a record: the judge's verdict on one attempt, with what produced it."""

    status: Status
    success: bool = False  # judged at all (correct or wrong)
    fail_reason: str | None = None
    fail_stage: FailStage | None = None  # a failure of the solver's queries or of the judge alone
    response: str | None = None
    finish_reason: str | None = None
    extracted_answer: str | None = None
    is_correct: bool = False
    has_answer: bool = False
    judge_method: str | None = None  # "rule" | "judge"
    judge_outputs: list = field(default_factory=list)
    usage: dict | None = None  # the model API's usage object of the attempt, as returned
    image: dict | None = None  # the first image reference of the trajectory
    trajectory: list | None = None
    stats: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # fields this schema does not know (kept as written)

    _KNOWN = (
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
    )

    def to_dict(self) -> dict:
        out = {
            "success": self.success,
            "status": self.status,
            "fail_reason": self.fail_reason,
            "fail_stage": self.fail_stage,
            "response": self.response,
            "finish_reason": self.finish_reason,
            "extracted_answer": self.extracted_answer,
            "is_correct": self.is_correct,
            "has_answer": self.has_answer,
            "judge_method": self.judge_method,
            "judge_outputs": self.judge_outputs,
            "usage": self.usage,
            "image": self.image,
            "trajectory": _without_response(self.trajectory, self.response),
            "stats": self.stats,
        }
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, er: Any, where: str) -> EvalResult:
        if not isinstance(er, dict):
            got = "missing" if er is None else f"a {type(er).__name__}"
            raise RecordError(f"{where}: record has no 'eval_result' object (field 'eval_result' is {got})")
        p = "eval_result."
        status = er.get("status")
        if status is None:
            status = _legacy_status(er)
        elif status not in STATUSES:
            raise _fail(where, p + "status", f"is {status!r}; expected one of {', '.join(STATUSES)}")
        stage = _opt(er, "fail_stage", str, where, p)
        if stage is not None and stage not in FAIL_STAGES:
            raise _fail(where, p + "fail_stage", f"is {stage!r}; expected one of {', '.join(FAIL_STAGES)}")
        stats = _opt(er, "stats", dict, where, p) or {}
        traj = _opt(er, "trajectory", list, where, p)
        outputs = _opt(er, "judge_outputs", list, where, p) or []
        text = er.get("response", er.get("text"))
        if text is not None and not isinstance(text, str):
            raise _fail(where, p + "response", f"must be text or null, got {type(text).__name__}")
        extracted = er.get("extracted_answer")
        if extracted is not None and not isinstance(extracted, str):
            extracted = str(extracted)  # older runs stored a number extracted from open answers
        fail_reason = er.get("fail_reason", er.get("error"))
        return cls(
            status=cast(Status, status),  # checked against STATUSES above
            success=bool(er.get("success", status in ("correct", "wrong"))),
            fail_reason=None if fail_reason is None else str(fail_reason),
            fail_stage=stage,
            response=text,
            finish_reason=_opt(er, "finish_reason", str, where, p),
            extracted_answer=extracted,
            is_correct=bool(er.get("is_correct", status == "correct")),
            has_answer=bool(er.get("has_answer")),
            judge_method=_opt(er, "judge_method", str, where, p),
            judge_outputs=outputs,
            usage=_opt(er, "usage", dict, where, p),
            image=_opt(er, "image", dict, where, p),
            trajectory=_with_response(traj, text),
            stats=stats,
            extra={k: v for k, v in er.items() if k not in cls._KNOWN and k not in ("text", "error")},
        )


def _legacy_status(er: dict) -> str:
    """The status of an ``eval_result`` written before records carried one."""
    if er.get("success") is False or er.get("error"):
        return "failed"
    if er.get("is_correct"):
        return "correct"
    if er.get("finish_reason") not in (None, "stop"):
        return "incomplete"
    return "wrong"


@dataclass
class EvalRecord:
    """One (sample, trial) result. ``fields`` holds the other annotation fields of the sample
    (``image``/``file_name``, ``subset``, ``layout_infos`` …) in the order they are written."""

    sample_key: str
    eval_result: EvalResult
    index: int | None = None
    question_id: int | str | None = None
    question: str = ""
    options: str | None = None
    answer: str = ""
    category: str = "unknown"
    image_path: str = ""
    trial: int | None = None
    usage: dict[str, TokenUsage] = field(default_factory=dict)
    cost_usd: float | None = None
    fields: dict = field(default_factory=dict)

    @property
    def status(self) -> str:
        return self.eval_result.status

    @property
    def image(self) -> str:
        """The image as the annotation named it (``image`` or ``file_name``), else its resolved path."""
        return str(self.fields.get("image") or self.fields.get("file_name") or self.image_path or "")

    def usage_dict(self) -> dict[str, dict]:
        """``usage`` as plain counts per role (the form :mod:`insight_o3.endpoints.usage` adds up)."""
        return {role: u.to_dict() for role, u in self.usage.items()}

    def to_dict(self) -> dict:
        """The JSON object written to ``eval_records.jsonl`` (the layout every version has written)."""
        f = self.fields
        out: dict = {"index": self.index, "sample_key": self.sample_key, "question_id": self.question_id}
        out.update({k: f[k] for k in ("image", "file_name") if k in f})
        out.update(
            {
                "image_path": self.image_path,
                "question": self.question,
                "options": self.options if self.options is not None else f.get("options"),
                "answer": self.answer,
            }
        )
        if "subset" in f:
            out["subset"] = f["subset"]
        out["category"] = self.category
        out.update({k: v for k, v in f.items() if k not in out})
        out["trial"] = self.trial
        out["eval_result"] = self.eval_result.to_dict()
        if self.usage:
            out["usage"] = {role: u.to_dict() for role, u in self.usage.items()}
        if self.cost_usd is not None:
            out["cost_usd"] = self.cost_usd
        return out

    @classmethod
    def from_dict(cls, rec: Any, where: str = "<record>") -> EvalRecord:
        """Validate and read one record; ``where`` (``"<file>:<line>"``) prefixes every error."""
        if isinstance(rec, EvalRecord):
            return rec
        if not isinstance(rec, dict):
            raise RecordError(f"{where}: expected a JSON object, got {type(rec).__name__}")
        key = rec.get("sample_key", rec.get("question_id", rec.get("index")))
        if key is None or isinstance(key, (bool, dict, list)):
            raise (
                RecordError(f"{where}: record has no 'sample_key' (nor question_id/index)")
                if key is None
                else _fail(where, "sample_key", f"must be text or an integer, got {type(key).__name__}")
            )
        er = EvalResult.from_dict(rec.get("eval_result"), where)
        index = _opt(rec, "index", int, where)
        qid = rec.get("question_id")
        if qid is not None and (isinstance(qid, bool) or not isinstance(qid, (int, str))):
            raise _fail(where, "question_id", f"must be an integer or text, got {type(qid).__name__}")
        trial = _opt(rec, "trial", int, where)
        options = rec.get("options")
        usage_raw = _opt(rec, "usage", dict, where) or {}
        usage = {str(role): TokenUsage.from_dict(u, where, f"usage.{role}") for role, u in usage_raw.items()}
        cost = rec.get("cost_usd")
        if cost is not None and (isinstance(cost, bool) or not isinstance(cost, (int, float)) or math.isnan(cost)):
            raise _fail(where, "cost_usd", f"must be a number or null, got {cost!r:.60}")
        image_path = rec.get("image_path") or rec.get("image") or rec.get("file_name") or ""
        return cls(
            sample_key=str(key),
            eval_result=er,
            index=index,
            question_id=qid,
            question=str(rec.get("question", "")),
            options=options if isinstance(options, str) else None,
            answer=str(rec.get("answer", "")),
            category=str(rec.get("category", rec.get("subset", "unknown"))),
            image_path=str(image_path),
            trial=trial,
            usage=usage,
            cost_usd=None if cost is None else float(cost),
            fields={
                k: v
                for k, v in rec.items()
                if k not in _TYPED or (k == "options" and options is not None and not isinstance(options, str))
            },
        )


def as_record(rec: EvalRecord | dict, where: str = "<record>") -> EvalRecord:
    """``rec`` as an :class:`EvalRecord` (validating a dict)."""
    return rec if isinstance(rec, EvalRecord) else EvalRecord.from_dict(rec, where)
