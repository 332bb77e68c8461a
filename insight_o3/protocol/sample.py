"""One benchmark question as every solver, judge and record sees it (loaded by :mod:`insight_o3.evaluation.samples`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from .parsing import option_letters
from .questions import question_text


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
        return {**rec, **self.extra}
