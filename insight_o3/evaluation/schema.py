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
from dataclasses import Field, dataclass, field, fields
from typing import Any, Literal, get_args

from ..base.json_types import JSONObject
from ..endpoints.usage import RoleUsage, UsageCounts
from ..storage.record_log import RecordFileError

Status = Literal["correct", "wrong", "incomplete", "invalid", "failed"]
#: The judge's statuses (see :mod:`.judge`): only ``correct`` is correct; ``failed`` = lost to API errors.
STATUSES: tuple[str, ...] = get_args(Status)
FailStage = Literal["solver", "judge"]
FAIL_STAGES: tuple[str, ...] = get_args(FailStage)
#: Roles whose token usage a record may carry.
USAGE_ROLES = ("model", "judge", "vsearcher", "summary")

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


def _tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
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

    def to_dict(self) -> UsageCounts:
        """The counts by field name; ``unreported_requests`` only when not 0."""
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        if not self.unreported_requests:
            del out["unreported_requests"]
        return out

    @classmethod
    def from_dict(cls, obj: Any, where: str, name: str) -> TokenUsage:
        if not isinstance(obj, dict):
            raise _fail(where, name, f"must be an object, got {type(obj).__name__}")
        vals = {}
        for f in fields(cls):
            v = obj.get(f.name, 0)
            if v is None:
                v = 0
            if isinstance(v, bool) or not isinstance(v, int) or v < 0:
                raise _fail(where, f"{name}.{f.name}", f"must be a non-negative integer, got {v!r:.60}")
            vals[f.name] = v
        return cls(**vals)


def _key(f: Field) -> str:
    """The on-disk key of a field (``metadata["key"]``, else its name)."""
    return f.metadata.get("key", f.name)


@dataclass(kw_only=True)
class EvalResult:
    """``eval_result`` of a record: the judge's verdict on one attempt, with what produced it.

    Declared once: the on-disk keys, their order and their checks come from the fields below (``to_dict`` /
    ``from_dict`` walk :func:`dataclasses.fields`; ``metadata["key"]`` is a field's on-disk name when it differs).
    Unknown keys: kept in ``extra`` and written back unchanged (:data:`UNKNOWN_KEYS`), never dropped. Older
    records are brought to the current shape first, in one place (:func:`upgrade_eval_result`)."""

    success: bool = False  # judged at all (correct or wrong)
    status: Status
    fail_reason: str | None = None
    fail_stage: FailStage | None = None  # a failure of the solver's queries or of the judge alone
    response: str | None = None
    finish_reason: str | None = None
    extracted_answer: str | None = None
    is_correct: bool = False
    has_answer: bool = False
    judge_method: str | None = None  # "rule" | "judge"
    judge_outputs: list = field(default_factory=list)
    #: the model API's usage object of the attempt, as returned (the record's per-role counts are
    #: ``EvalRecord.usage``); on disk ``usage``
    api_usage: dict | None = field(default=None, metadata={"key": "usage"})
    image: dict | None = None  # the first image reference of the trajectory
    trajectory: list | None = None
    stats: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict, metadata={"unknown": True})  # keys this schema does not know

    def to_dict(self) -> JSONObject:
        out: dict = {}
        for f in fields(self):
            if f.metadata.get("unknown"):
                continue
            v = getattr(self, f.name)
            out[_key(f)] = _without_response(v, self.response) if f.name == "trajectory" else v
        out.update(self.extra)
        return out

    @classmethod
    def from_dict(cls, er: Any, where: str) -> EvalResult:
        if not isinstance(er, dict):
            got = "missing" if er is None else f"a {type(er).__name__}"
            raise RecordError(f"{where}: record has no 'eval_result' object (field 'eval_result' is {got})")
        er = upgrade_eval_result(er)
        known = {_key(f): f for f in fields(cls) if not f.metadata.get("unknown")}
        values = {f.name: _read_field(er, _key(f), str(f.type), where) for f in known.values() if _key(f) in er}
        values["trajectory"] = _with_response(values.get("trajectory"), values.get("response"))
        return cls(**values, extra={k: v for k, v in er.items() if k not in known})


#: What happens to an ``eval_result`` key the declaration does not know: kept in ``EvalResult.extra``, written back.
UNKNOWN_KEYS = "keep"


def upgrade_eval_result(er: JSONObject) -> JSONObject:
    """An ``eval_result`` as written by any earlier version, in the current shape (the one place older records are
    migrated): ``text`` -> ``response``, ``error`` -> ``fail_reason``, a missing ``status`` inferred from
    ``success``/``is_correct``/``finish_reason``, ``success``/``is_correct`` from the status when absent, a number
    ``extracted_answer`` as text. Run-dir format 1 (the reply stored twice) needs nothing here: a trajectory
    without :data:`RESPONSE_REF` reads as it is."""
    out = {k: v for k, v in er.items() if k not in ("text", "error")}
    if "response" not in er and "text" in er:
        out["response"] = er["text"]
    if "fail_reason" not in er and "error" in er:
        out["fail_reason"] = er["error"]
    status = out.get("status")
    if status is None:
        out["status"] = status = _legacy_status(er)
    out.setdefault("success", status in ("correct", "wrong"))
    out.setdefault("is_correct", status == "correct")
    if out.get("extracted_answer") is not None and not isinstance(out["extracted_answer"], str):
        out["extracted_answer"] = str(out["extracted_answer"])  # older runs stored a number for open answers
    if out.get("fail_reason") is not None and not isinstance(out["fail_reason"], str):
        out["fail_reason"] = str(out["fail_reason"])
    return out


def _read_field(er: dict, key: str, typ: str, where: str) -> Any:
    """One ``eval_result`` value checked against its declared type (the field's annotation)."""
    p, v = "eval_result.", er.get(key)
    if typ == "Status":
        if v not in STATUSES:
            raise _fail(where, p + key, f"is {v!r}; expected one of {', '.join(STATUSES)}")
        return v
    if typ == "FailStage | None":
        v = _opt(er, key, str, where, p)
        if v is not None and v not in FAIL_STAGES:
            raise _fail(where, p + key, f"is {v!r}; expected one of {', '.join(FAIL_STAGES)}")
        return v
    if typ == "bool":
        return bool(v)
    if key == "response" and v is not None and not isinstance(v, str):
        raise _fail(where, p + key, f"must be text or null, got {type(v).__name__}")
    kinds = {"str": str, "dict": dict, "list": list}
    base = typ.removesuffix(" | None")
    if base not in kinds:
        raise TypeError(f"EvalResult: no reader for a field of type {typ}")  # a new field's type: add it here
    v = _opt(er, key, kinds[base], where, p)
    if v is None and not typ.endswith("| None"):
        return kinds[base]()  # null where the field has a default: the empty value
    return v


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

    def usage_dict(self) -> RoleUsage:
        """``usage`` as plain counts per role (the form :mod:`insight_o3.endpoints.usage` adds up)."""
        return {role: u.to_dict() for role, u in self.usage.items()}

    def to_dict(self) -> JSONObject:
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
