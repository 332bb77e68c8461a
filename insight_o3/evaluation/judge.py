"""Answer checking: rule-based first, then a judge model (paper F.3 and our extraction prompts).

Every attempt gets a :class:`Verdict` whose ``status`` is one of

* ``correct`` / ``wrong`` — judged (by rule or by the judge model);
* ``incomplete`` — the response was truncated (``finish_reason != "stop"``) and is never judged;
* ``invalid`` — the judge replied with something that is neither a verdict nor an extraction;
* ``failed`` — a *critical failure*: the query (or its judging) was lost to API errors.
"""
from __future__ import annotations

import re
import string
from dataclasses import asdict, dataclass, field

from .. import prompts
from ..parsing import extract_answer_span, mcq_letter
from .solver import Attempt

STATUSES = ("correct", "wrong", "incomplete", "invalid", "failed")
CROP_MARK = "[cropped] ... "


@dataclass
class Verdict:
    status: str
    extracted_answer: str | None = None
    has_answer: bool = False
    method: str | None = None            # "rule" | "judge"
    judge_outputs: list[str] = field(default_factory=list)
    fail_reason: str | None = None
    fail_stage: str | None = None        # "solver" | "judge"

    @property
    def is_correct(self) -> bool:
        return self.status == "correct"

    def to_dict(self) -> dict:
        return asdict(self)


class JudgeError(Exception):
    pass


def crop_for_judge(text: str, max_len: int) -> str:
    """Keep the tail (where final answers are) of long responses: ``"[cropped] ... " + tail``."""
    if max_len and len(text) > max_len:
        return CROP_MARK + text[-max_len:]
    return text


_PUNCT = string.punctuation + "，。！？：；“”‘’"


def normalize(text: str) -> str:
    """Case-, space- and punctuation-insensitive form for exact-match checks ("White." == "white")."""
    t = re.sub(r"\\text\{([^{}]*)\}", r"\1", text)
    t = t.strip().strip("*`$").lower()
    t = re.sub(r"\s+", " ", t)
    return t.strip(_PUNCT + " ")


def _is_none(reply: str) -> bool:
    return normalize(reply) in ("none", "no answer", "n/a")


def gt_letter(sample) -> str | None:
    letters = sample.letters
    if not letters:
        return None
    return mcq_letter(sample.answer, letters)


class AnswerJudge:
    """Checks attempts against a sample's ground truth. ``client`` is an ``AsyncOpenAI`` for the
    judge model (only called when the rules cannot decide)."""

    def __init__(self, client, model: str, max_answer_length: int = 1000, redact=lambda s: s,
                 completion_kwargs: dict | None = None):
        self.client = client
        self.model = model
        self.max_answer_length = max_answer_length
        self.redact = redact
        self.completion_kwargs = completion_kwargs or {}

    async def _ask(self, prompt: str) -> str:
        resp = await self.client.chat.completions.create(
            model=self.model, messages=[{"role": "user", "content": prompt}], **self.completion_kwargs)
        if not getattr(resp, "choices", None):
            raise JudgeError("judge returned no choices")
        return (resp.choices[0].message.content or "").strip()

    async def check(self, sample, attempt: Attempt) -> Verdict:
        if attempt.error is not None:
            return Verdict("failed", fail_reason=attempt.error, fail_stage="solver")
        if attempt.finish_reason != "stop":
            return Verdict("incomplete", fail_reason=f"finish_reason={attempt.finish_reason}")
        text = attempt.text or ""
        outputs: list[str] = []
        try:
            letter = gt_letter(sample)
            if letter is not None:
                return await self._check_mcq(sample, text, letter, outputs)
            return await self._check_open(sample, text, outputs)
        except Exception as e:  # API errors after the SDK's retries, malformed judge replies
            reason = self.redact(f"judge error: {type(e).__name__}: {e}")
            return Verdict("failed", judge_outputs=outputs, fail_reason=reason, fail_stage="judge")

    async def _check_mcq(self, sample, text: str, gt: str, outputs: list[str]) -> Verdict:
        letters = sample.letters
        found = mcq_letter(extract_answer_span(text), letters)
        if found is not None:
            return Verdict("correct" if found == gt else "wrong", found, True, "rule")
        reply = await self._ask(prompts.fill(prompts.MCQ_EXTRACTION_PROMPT, question=sample.question,
                                             options=sample.options or "",
                                             model_answer=crop_for_judge(text, self.max_answer_length)))
        outputs.append(reply)
        if _is_none(reply):
            return Verdict("wrong", None, False, "judge", outputs)
        found = mcq_letter(reply, letters) or mcq_letter(extract_answer_span(reply), letters)
        if found is None:
            return Verdict("invalid", None, False, "judge", outputs,
                           fail_reason="judge reply is not an option letter")
        return Verdict("correct" if found == gt else "wrong", found, True, "judge", outputs)

    async def _check_open(self, sample, text: str, outputs: list[str]) -> Verdict:
        span = extract_answer_span(text)
        gt = normalize(sample.answer)
        if span and normalize(span) == gt:
            return Verdict("correct", span, True, "rule")
        extracted = await self._ask(prompts.fill(prompts.OPEN_QA_EXTRACTION_PROMPT, question=sample.question,
                                                 model_answer=crop_for_judge(text, self.max_answer_length)))
        outputs.append(extracted)
        if not extracted or _is_none(extracted):
            return Verdict("wrong", None, False, "judge", outputs)
        if normalize(extracted) == gt:
            return Verdict("correct", extracted, True, "judge", outputs)
        reply = await self._ask(prompts.fill(prompts.JUDGE_PROMPT, question=sample.question,
                                             gt_answer=sample.answer,
                                             model_answer=crop_for_judge(extracted, self.max_answer_length)))
        outputs.append(reply)
        low = reply.lower()
        ok, bad = "<correct>" in low, "<wrong>" in low
        if ok == bad:
            return Verdict("invalid", extracted, True, "judge", outputs,
                           fail_reason="judge reply is neither <correct> nor <wrong>")
        return Verdict("correct" if ok else "wrong", extracted, True, "judge", outputs)
