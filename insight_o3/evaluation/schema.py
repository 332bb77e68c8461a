"""The evaluation record: one line of ``trial_<k>/eval_records.jsonl``, as pydantic models.

:func:`insight_o3.evaluation.runner.build_record` produces an :class:`EvalRecord`; every reader
(the runner's resume, :mod:`.metrics`, :mod:`insight_o3.viz.run_view`, the converter of the
original release's records in :mod:`insight_o3.viz.original_run`) goes through
:meth:`EvalRecord.from_dict`, which names the file, the line and the field of anything malformed.

On disk a record is the sample's annotation fields (``index``, ``sample_key``, ``question_id``,
``image``/``file_name``, ``image_path``, ``question``, ``options``, ``answer``, ``category`` and any
other annotation field), ``trial``, ``eval_result`` (:class:`EvalResult`) and optionally the
per-role token ``usage`` (:class:`TokenUsage`) and ``cost_usd``. Older records of this project
load too: missing optional fields take their defaults, an ``eval_result`` written by an earlier version is brought
to the current shape first (:func:`upgrade_eval_result`, the model's before-validator), and a record keyed by
``question_id`` or ``index`` only gets that as its ``sample_key``. Fields this schema does not
know are kept (``fields``/``extra``) and written back unchanged.

The reply is stored once (run directory format 2): on disk, the last assistant message of ``trajectory`` whose
text is ``response`` holds :data:`RESPONSE_REF` (``{"type": "text", "ref": "response"}``) instead of a second copy;
reading puts the text back and writing takes it out again, so in memory a trajectory is always whole. Records of
format 1 (the text twice) read as before.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from ..base.json_types import JSONObject
from ..endpoints.usage import RoleUsage, UsageCounts
from ..protocol.attempt_stats import AttemptStats, Stats
from ..protocol.statuses import JUDGED_STATUSES, FailStage, VerdictStatus
from ..storage.record_log import RecordFileError

#: The judge's statuses as written (:class:`~insight_o3.protocol.statuses.VerdictStatus`).
STATUSES: tuple[str, ...] = tuple(s.value for s in VerdictStatus)
FAIL_STAGES: tuple[str, ...] = tuple(s.value for s in FailStage)
#: Roles whose token usage a record may carry.
USAGE_ROLES = ("model", "judge", "vsearcher", "summary")

#: On disk, the text part that stands for ``eval_result.response`` (the reply is not stored twice).
RESPONSE_REF = {"type": "text", "ref": "response"}


#: The validation context of a record read from disk (its layout mapped to the fields, older shapes upgraded); a
#: model built in code is validated as it is given.
ON_DISK = {"on_disk": True}


def _on_disk(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get("on_disk"))


class RecordError(RecordFileError):
    """A result record that does not fit the schema; the message names the file, line and field."""


def _invalid(what: str, **ctx: Any) -> ValueError:
    """A validation error whose message is ``what`` with ``ctx`` filled in (pydantic's location names the field)."""
    return ValueError(what.format(**ctx))


def _got(v: Any) -> str:
    return f"{type(v).__name__} {v!r:.60}"


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


# --------------------------------------------------------------------------------------------- field types
def _count(v: Any) -> int:
    """A token or request count: a non-negative integer (null: 0)."""
    if v is None:
        return 0
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise _invalid("must be a non-negative integer, got {got}", got=repr(v)[:60])
    return v


def _typed(kind: type, name: str) -> Any:
    """A value that must be ``kind`` (no conversion; a bool is not a number) or null."""

    def check(v: Any) -> Any:
        if v is None or (isinstance(v, kind) and not (isinstance(v, bool) and kind is not bool)):
            return v
        raise _invalid("must be {kind} or null, got {got}", kind=name, got=_got(v))

    return BeforeValidator(check)


def _or_empty(kind: type, name: str) -> Any:
    """A ``kind`` whose null is its empty value (a field with a default)."""

    def check(v: Any) -> Any:
        if v is None:
            return kind()
        if isinstance(v, kind):
            return v
        raise _invalid("must be {kind} or null, got {got}", kind=name, got=_got(v))

    return BeforeValidator(check)


def _one_of(choices: tuple[str, ...], optional: bool) -> Any:
    def check(v: Any) -> Any:
        if (v is None and optional) or v in choices:
            return v
        raise _invalid("is {v}; expected one of {choices}", v=repr(v), choices=", ".join(choices))

    return BeforeValidator(check)


Count = Annotated[int, BeforeValidator(_count)]
Flag = Annotated[bool, BeforeValidator(bool)]  # every version wrote true/false; anything else counts by its truth
Text = Annotated[str | None, _typed(str, "str")]
Mapping = Annotated[dict | None, _typed(dict, "dict")]
Items = Annotated[list | None, _typed(list, "list")]


class TokenUsage(BaseModel):
    """Tokens and requests one role (``model``, ``judge``, ``vsearcher``) spent on one record;
    ``unreported_requests`` of them had no valid usage in their reply (the token counts are lower bounds;
    written only when not 0, see :mod:`insight_o3.endpoints.usage`)."""

    model_config = ConfigDict(extra="ignore", validate_assignment=False)

    prompt_tokens: Count = 0
    completion_tokens: Count = 0
    reasoning_tokens: Count = 0
    requests: Count = 0
    unreported_requests: Count = 0

    @model_validator(mode="before")
    @classmethod
    def _an_object(cls, obj: Any) -> Any:
        if not isinstance(obj, dict) and not isinstance(obj, TokenUsage):
            raise _invalid("must be an object, got {kind}", kind=type(obj).__name__)
        return obj

    @model_serializer(mode="wrap")
    def _counts(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        if not self.unreported_requests:
            del out["unreported_requests"]
        return out

    def to_dict(self) -> UsageCounts:
        """The counts by field name; ``unreported_requests`` only when not 0."""
        return self.model_dump()


def _stats(v: Any) -> Any:
    """``stats`` as stored (null: none) for :data:`~insight_o3.protocol.attempt_stats.Stats` to tell the family of."""
    if v is None:
        return AttemptStats()
    if isinstance(v, (dict, AttemptStats)):
        return v
    raise _invalid("must be dict or null, got {got}", got=_got(v))


def upgrade_eval_result(er: Any) -> Any:
    """An ``eval_result`` as written by any earlier version, in the current shape (the one place older records are
    migrated; :class:`EvalResult`'s before-validator): ``text`` -> ``response``, ``error`` -> ``fail_reason``, a
    missing ``status`` inferred from ``success``/``is_correct``/``finish_reason``, ``success``/``is_correct`` from
    the status when absent, a number ``extracted_answer`` as text. Run-dir format 1 (the reply stored twice) needs
    nothing here: a trajectory without :data:`RESPONSE_REF` reads as it is."""
    if not isinstance(er, dict):
        return er
    out = {k: v for k, v in er.items() if k not in ("text", "error")}
    if "response" not in er and "text" in er:
        out["response"] = er["text"]
    if "fail_reason" not in er and "error" in er:
        out["fail_reason"] = er["error"]
    status = out.get("status")
    if status is None:
        out["status"] = status = _legacy_status(er)
    out.setdefault("success", status in JUDGED_STATUSES)
    out.setdefault("is_correct", status == VerdictStatus.CORRECT)
    if out.get("extracted_answer") is not None and not isinstance(out["extracted_answer"], str):
        out["extracted_answer"] = str(out["extracted_answer"])  # older runs stored a number for open answers
    if out.get("fail_reason") is not None and not isinstance(out["fail_reason"], str):
        out["fail_reason"] = str(out["fail_reason"])
    return out


def _legacy_status(er: dict) -> VerdictStatus:
    """The status of an ``eval_result`` written before records carried one."""
    if er.get("success") is False or er.get("error"):
        return VerdictStatus.FAILED
    if er.get("is_correct"):
        return VerdictStatus.CORRECT
    if er.get("finish_reason") not in (None, "stop"):
        return VerdictStatus.INCOMPLETE
    return VerdictStatus.WRONG


class EvalResult(BaseModel):
    """``eval_result`` of a record: the judge's verdict on one attempt, with what produced it.

    Declared once: the on-disk keys (a field's alias where it differs from its name), their order and their checks
    are the fields below. Unknown keys: kept in ``extra`` and written back after the known ones, never dropped. Older
    records are brought to the current shape first, in one place (:func:`upgrade_eval_result`)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    success: Flag = False  # judged at all (correct or wrong)
    status: Annotated[VerdictStatus, _one_of(STATUSES, optional=False)]
    fail_reason: Text = None
    fail_stage: Annotated[FailStage | None, _one_of(FAIL_STAGES, optional=True)] = None  # solver's queries or judge
    response: Annotated[str | None, _typed(str, "text")] = None
    finish_reason: Text = None
    extracted_answer: Text = None
    is_correct: Flag = False
    has_answer: Flag = False
    judge_method: Text = None  # "rule" | "judge"
    judge_outputs: Annotated[list, _or_empty(list, "list")] = Field(default_factory=list)
    #: the model API's usage object of the attempt, as returned (the record's per-role counts are
    #: ``EvalRecord.usage``); on disk ``usage``
    api_usage: Mapping = Field(default=None, validation_alias="usage", serialization_alias="usage")
    image: Mapping = None  # the first image reference of the trajectory
    trajectory: Items = None
    stats: Annotated[Stats, BeforeValidator(_stats)] = Field(default_factory=AttemptStats)  # the agent family's
    extra: dict = Field(default_factory=dict, exclude=True)  # keys this schema does not know

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, er: Any, info: ValidationInfo) -> Any:
        """As read from disk (:data:`ON_DISK`): an older ``eval_result`` in the current shape, the keys the
        declaration does not know in ``extra``."""
        if not _on_disk(info) or isinstance(er, EvalResult):
            return er
        if not isinstance(er, dict):
            raise _invalid("must be an object, got {kind}", kind=type(er).__name__)
        er = upgrade_eval_result(er)
        known = _known_keys()
        return {**{k: v for k, v in er.items() if k in known}, "extra": {k: v for k, v in er.items() if k not in known}}

    @model_validator(mode="after")
    def _whole_trajectory(self) -> EvalResult:
        self.trajectory = _with_response(self.trajectory, self.response)
        return self

    @model_serializer(mode="wrap")
    def _on_disk(self, handler: SerializerFunctionWrapHandler) -> dict:
        out = handler(self)
        out["status"] = self.status.value  # the vocabularies as plain text, as every version wrote them
        if self.fail_stage is not None:
            out["fail_stage"] = self.fail_stage.value
        if out.get("trajectory") is not None:
            out["trajectory"] = _without_response(self.trajectory, self.response)
        out.update(self.extra)
        return out

    def to_dict(self) -> JSONObject:
        return self.model_dump(by_alias=True)

    @classmethod
    def from_dict(cls, er: Any, where: str) -> EvalResult:
        if not isinstance(er, dict):
            got = "missing" if er is None else f"a {type(er).__name__}"
            raise RecordError(f"{where}: record has no 'eval_result' object (field 'eval_result' is {got})")
        return _validate(cls, er, where, "eval_result.")


def _known_keys() -> frozenset[str]:
    """The on-disk keys :class:`EvalResult` declares."""
    return frozenset(f.serialization_alias or n for n, f in EvalResult.model_fields.items() if n != "extra")


#: What happens to an ``eval_result`` key the declaration does not know: kept in ``EvalResult.extra``, written back.
UNKNOWN_KEYS = "keep"

#: Top-level keys with a typed field of their own (the rest of a record goes to ``EvalRecord.fields``).
_TYPED = (
    "index",
    "sample_key",
    "question_id",
    "image_path",
    "image_sha256",
    "question",
    "options",
    "answer",
    "category",
    "trial",
    "eval_result",
    "usage",
    "cost_usd",
)


def _sample_key(v: Any) -> str:
    if isinstance(v, (bool, dict, list)):
        raise _invalid("must be text or an integer, got {kind}", kind=type(v).__name__)
    return str(v)


def _question_id(v: Any) -> Any:
    if v is not None and (isinstance(v, bool) or not isinstance(v, (int, str))):
        raise _invalid("must be an integer or text, got {kind}", kind=type(v).__name__)
    return v


def _cost(v: Any) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
        raise _invalid("must be a number or null, got {got}", got=repr(v)[:60])
    return float(v)


class EvalRecord(BaseModel):
    """One (sample, trial) result. ``fields`` holds the other annotation fields of the sample
    (``image``/``file_name``, ``subset``, ``layout_infos`` …) in the order they are written."""

    model_config = ConfigDict(extra="forbid")

    sample_key: Annotated[str, BeforeValidator(_sample_key)]
    eval_result: EvalResult
    index: Annotated[int | None, _typed(int, "int")] = None
    question_id: Annotated[int | str | None, BeforeValidator(_question_id)] = None
    question: str = ""
    options: str | None = None
    answer: str = ""
    category: str = "unknown"
    image_path: str = ""
    #: sha256 of the image file the attempt was made on (None: a record written before it, or an unreadable file);
    #: a resume refuses a record whose image now has another (:class:`~.run_dir.ImageChanged`)
    image_sha256: Annotated[str | None, _typed(str, "str")] = None
    trial: Annotated[int | None, _typed(int, "int")] = None
    usage: Annotated[dict[str, TokenUsage], _or_empty(dict, "dict")] = Field(default_factory=dict)
    cost_usd: Annotated[float | None, BeforeValidator(_cost)] = None
    fields: dict = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _from_disk(cls, rec: Any, info: ValidationInfo) -> Any:
        """As read from disk (:data:`ON_DISK`): the key from ``sample_key`` (or ``question_id``/``index``), the
        annotation's own fields under ``fields``, its image and category under their older names too."""
        if not _on_disk(info) or isinstance(rec, EvalRecord):
            return rec
        if not isinstance(rec, dict):
            raise _invalid("expected a JSON object, got {kind}", kind=type(rec).__name__)
        key = rec.get("sample_key", rec.get("question_id", rec.get("index")))
        if key is None:
            raise _invalid("record has no 'sample_key' (nor question_id/index)")
        if not isinstance(rec.get("eval_result"), dict):
            er = rec.get("eval_result")
            got = "missing" if er is None else f"a {type(er).__name__}"
            raise _invalid("record has no 'eval_result' object (field 'eval_result' is {got})", got=got)
        options = rec.get("options")
        return {
            "sample_key": key,
            "eval_result": rec["eval_result"],
            "index": rec.get("index"),
            "question_id": rec.get("question_id"),
            "question": str(rec.get("question", "")),
            "options": options if isinstance(options, str) else None,
            "answer": str(rec.get("answer", "")),
            "category": str(rec.get("category", rec.get("subset", "unknown"))),
            "image_path": str(rec.get("image_path") or rec.get("image") or rec.get("file_name") or ""),
            "image_sha256": rec.get("image_sha256"),
            "trial": rec.get("trial"),
            "usage": rec.get("usage"),
            "cost_usd": rec.get("cost_usd"),
            "fields": {
                k: v
                for k, v in rec.items()
                if k not in _TYPED or (k == "options" and options is not None and not isinstance(options, str))
            },
        }

    @model_serializer(mode="plain")
    def _on_disk(self) -> dict:
        """The layout every version has written: the annotation's fields around the typed ones, then the result."""
        f = self.fields
        out: dict = {"index": self.index, "sample_key": self.sample_key, "question_id": self.question_id}
        out.update({k: f[k] for k in ("image", "file_name") if k in f})
        out.update(
            {
                "image_path": self.image_path,
                **({"image_sha256": self.image_sha256} if self.image_sha256 is not None else {}),
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

    @property
    def status(self) -> VerdictStatus:
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
        return self.model_dump()

    @classmethod
    def from_dict(cls, rec: Any, where: str = "<record>") -> EvalRecord:
        """Validate and read one record; ``where`` (``"<file>:<line>"``) prefixes every error."""
        if isinstance(rec, EvalRecord):
            return rec
        return _validate(cls, rec, where)


def _validate(model: type[Any], obj: Any, where: str, prefix: str = "") -> Any:
    """``model`` validated from ``obj``; its first error as a :class:`RecordError` naming ``where`` and the field."""
    try:
        return model.model_validate(obj, context=ON_DISK)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        what = str(err["ctx"]["error"]) if err["type"] == "value_error" else err["msg"]  # ours, or pydantic's own
        loc = ".".join(str(p) for p in err["loc"])
        raise RecordError(f"{where}: field '{prefix}{loc}' {what}" if loc else f"{where}: {what}") from None


def as_record(rec: EvalRecord | dict, where: str = "<record>") -> EvalRecord:
    """``rec`` as an :class:`EvalRecord` (validating a dict)."""
    return rec if isinstance(rec, EvalRecord) else EvalRecord.from_dict(rec, where)
