"""One benchmark question as every solver, judge and record sees it (loaded by :mod:`insight_o3.evaluation.samples`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from .parsing import option_letters
from .questions import question_text

#: The keys the harness writes into every record beside a row's own fields. A row's field of one of these names (a
#: VLMEvalKit TSV's ``index``, a ``sample_key`` column) is kept under :data:`ROW_KEY` in the record instead, so any
#: column name works and the harness's keys stay its own.
HARNESS_KEYS = ("index", "sample_key", "image_path", "trial", "eval_result", "usage", "cost_usd", "row")
#: Where a record keeps a row's fields whose names are harness keys.
ROW_KEY = "row"


def record_fields(extra: JSONObject) -> JSONObject:
    """A row's other fields as a record holds them: each at its name, those named like a harness key under
    :data:`ROW_KEY`."""
    out = {k: v for k, v in extra.items() if k not in HARNESS_KEYS}
    clashing = {k: v for k, v in extra.items() if k in HARNESS_KEYS}
    return {**out, ROW_KEY: clashing} if clashing else out


def row_fields(fields: JSONObject) -> JSONObject:
    """The inverse of :func:`record_fields`: a record's annotation fields as the row had them."""
    nested = fields.get(ROW_KEY)
    out = {k: v for k, v in fields.items() if k != ROW_KEY}
    return {**out, **nested} if isinstance(nested, dict) else out


class AnnotationError(ValueError):
    """Unusable annotation input; the message names the file, the line and the field."""


@dataclass
class Sample:
    index: int  # 0-based position among the samples of the file
    question_id: int | str | None
    image: str  # as written in the file
    image_path: str  # resolved under img_dir
    question: str
    options: str | None  # the text block shown to the model
    answer: str
    category: str = "unknown"
    extra: dict = field(default_factory=dict)
    key: str = ""  # unique within the file: question_id if unique, else "#<index>"
    line: int = 0  # 1-based line in the annotation file
    image_field: str = "image"  # which field named the image ("image" or "file_name")
    category_field: str | None = None  # which field named the category ("category" or "subset")

    @property
    def letters(self) -> str:
        """Option letters for multiple-choice questions ("" for open questions)."""
        if not self.options:
            return ""
        return option_letters(self.options)

    @property
    def is_mcq(self) -> bool:
        return bool(self.letters)

    def prompt(self) -> str:
        """The user text: the question, then the options block when there is one."""
        return question_text(self.question, self.options)

    def to_record(self) -> JSONObject:
        """The sample as stored in result records (annotation fields plus where it came from)."""
        rec = {
            "index": self.index,
            "sample_key": self.key,
            "question_id": self.question_id,
            self.image_field: self.image,
            "image_path": self.image_path,
            "question": self.question,
            "options": self.options,
            "answer": self.answer,
        }
        if self.category_field:
            rec[self.category_field] = self.category
        rec["category"] = self.category
        return {**rec, **record_fields(self.extra)}
