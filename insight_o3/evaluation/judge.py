"""Answer checking, as the original release does it: a rule first, then a judge model.

Two flows (``AnswerJudge(flow=...)``), each the original's:

* ``"extract"`` — the released ``insight_o3/scripts/evaluate.py`` (single-model evaluation):
  truncated responses (``finish_reason != "stop"``) are not judged; the answer span is the last
  ``<answer>`` content, then the last ``\\boxed{}`` in it (:func:`~insight_o3.protocol.parsing.extract_answer_span`);
  a span equal to the ground truth is correct; otherwise the judge extracts the answer from the span
  (left-cropped to ``max_answer_length``) with ``MCQ_EXTRACTION_PROMPT`` (correct iff the letter
  equals the ground truth) or ``OPEN_QA_EXTRACTION_PROMPT``, and an extracted open answer is verified
  with ``JUDGE_PROMPT``. Every judge request is ``[{"role": "user", "content": [text]}]`` with
  ``max_completion_tokens=2048``.
* ``"verify"`` — the fork's in-loop check (``compute_score_single_vreasoner`` +
  ``compute_accuracy_reward``), used for training rewards and by the fork's InSight-o3 validation:
  see :func:`in_loop_check`.

Deviation (bug fix, changes scores only where the original is wrong): the original takes any reply
containing "correct" as correct, so "incorrect", "Correct? No." and "correct (not really)" counted as correct, and
the fork's in-loop check any reply containing ``<correct>`` ("<wrong> (not <correct>)", an echoed "<correct> or
<wrong>"). :func:`read_verdict` reads ``<correct>``/``<wrong>`` and words, not substrings; a reply it cannot read
clearly is an :class:`AmbiguousVerdict` — a judge failure, never a score: the attempt is judged again, fresh (past
the judge cache), up to ``retries`` more times (``--judge_retries``, :data:`DEFAULT_JUDGE_RETRIES`), as is a malformed
judge reply (:class:`JudgeError`, :class:`~insight_o3.base.untrusted.MalformedReply`); still failing, it is a
``failed`` record (stage ``judge``) that ``--retry_failed`` judges again on a rerun. (The released ``evaluate.py``
has no such retry: a judge error is ``judge_failed``; training keeps its own rounds, ``retries=0``.) Where the released rule decides unambiguously (a lone tag or word, the MCQ letter
compared as it is) the result is the released one (golden cases: ``tests/golden/judge_verdicts.json``, the released
``evaluate.py`` run on each reply). Training under ``vsearch.variant=original`` keeps the fork's rule as it is
(``AnswerJudge(verdicts="fork")``, :func:`judged_correct`).

Every attempt gets a :class:`Verdict` whose ``status`` is one of (:class:`~insight_o3.protocol.statuses.VerdictStatus`)

* ``correct`` / ``wrong`` — judged (by rule or by the judge model);
* ``incomplete`` — the response was truncated (``finish_reason != "stop"``) and is never judged;
* ``invalid`` — there is no answer to judge: an InSight-o3 episode that ended without one (format
  retries exhausted, a tool call past the limit, no valid vSearcher box), never sent to the judge;
* ``failed`` — a *critical failure*: the query (or its judging) was lost to API errors.
"""

from __future__ import annotations

import asyncio
import functools
import json
import re
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from typing import Any, TypeAlias

from ..base.json_types import JSONObject
from ..base.redaction import failure_reason
from ..base.untrusted import MalformedReply
from ..endpoints.chat import chat_once
from ..endpoints.errors import EXPECTED_ERRORS
from ..protocol import prompts
from ..protocol.attempt import Attempt
from ..protocol.parsing import extract_answer_span, extract_verify_span, mcq_letter
from ..protocol.questions import insight_o3_question
from ..protocol.sample import Sample
from ..protocol.statuses import FailStage, JudgeFlow, VerdictStatus
from . import opensearch_vl_judge as osv_judge
from .judge_settings import DEFAULT_JUDGE_RETRIES as DEFAULT_JUDGE_RETRIES
from .judge_settings import FLOWS as FLOWS
from .judge_settings import default_flow as default_flow

CROP_MARK = "[cropped] ... "
#: Request settings of the judge per flow: ``evaluate.py`` passes ``max_completion_tokens=2048``, the
#: fork's reward function ``max_tokens=2048``.
JUDGE_COMPLETION_KWARGS: dict[str, JSONObject] = {
    JudgeFlow.EXTRACT: {"max_completion_tokens": 2048},
    JudgeFlow.VERIFY: {"max_tokens": 2048},
    JudgeFlow.OPENSEARCH_VL: dict(osv_judge.COMPLETION_KWARGS),
}


@dataclass
class Verdict:
    status: VerdictStatus
    extracted_answer: str | None = None
    has_answer: bool = False
    method: str | None = None  # "rule" | "judge"
    judge_outputs: list[str] = field(default_factory=list)
    fail_reason: str | None = None
    fail_stage: FailStage | None = None

    @property
    def is_correct(self) -> bool:
        return self.status == VerdictStatus.CORRECT

    def to_dict(self) -> JSONObject:
        return asdict(self)


class JudgeError(ValueError):
    pass


#: Judge failures that asking the judge again may mend (an API error was retried by the SDK already).
RETRIED_JUDGE_ERRORS: tuple[type[Exception], ...] = (JudgeError, MalformedReply)


def crop_for_judge(text: str, max_len: int) -> str:
    """Keep the tail (where final answers are) of long answers: ``"[cropped] ... " + tail``."""
    if max_len and len(text) > max_len:
        return CROP_MARK + text[-max_len:]
    return text


def gt_letter(sample: Sample) -> str | None:
    """The option letter a multiple-choice sample's ground truth names (None for open questions)."""
    letters = sample.letters
    if not letters:
        return None
    return mcq_letter(sample.answer, letters)


#: A negative verdict: the tag, or the words ("not correct" is one).
_WRONG = re.compile(r"<wrong>|\bincorrect\b|\bwrong\b|\bnot\s+correct\b|\bisn'?t\s+correct\b")
_RIGHT = re.compile(r"<correct>|\bcorrect\b")
#: What makes a positive verdict doubtful: a question, any negation ("Correct? No.", "correct (not really)",
#: "Not <correct>.") — the prompt asks for the tag alone.
_DOUBT = re.compile(r"\?|\b(?:no|not|never|nope)\b|n't\b")
#: A negated negative verdict ("not wrong", "isn't <wrong>").
_NOT_WRONG = re.compile(r"(?:\b(?:no|not|never)|n't)\s+(?:\w+\s+)?(?:<wrong>|wrong\b|incorrect\b)")


class AmbiguousVerdict(JudgeError):
    """A judge reply that is neither clearly correct nor clearly wrong: a judge failure (asked again on
    ``--retry_failed`` and, in training, in the next judge round), never a score."""

    def __init__(self, reply: str):
        self.reply = reply
        super().__init__(f"ambiguous judge verdict: {' '.join(reply.split())[:200]!r}")


def read_verdict(reply: str) -> bool | None:
    """Read a ``JUDGE_PROMPT``/``QA_VERIFY_PROMPT`` reply: True (correct), False (wrong), None (ambiguous).

    Clear: exactly one side is named (``<correct>``/"correct", or ``<wrong>``/"wrong"/"incorrect"/"not correct"),
    a positive one without a question mark or any negation, a negative one not itself negated ("not wrong").
    Ambiguous: both sides ("<correct> or <wrong>", an echoed template; "<wrong> (not <correct>)"), neither (an
    empty reply), "Correct? No.", "correct (not really)", "Not <correct>."."""
    low = " ".join((reply or "").lower().split())
    negative = _WRONG.search(low)
    rest = _WRONG.sub(" ", low)
    positive = _RIGHT.search(rest)
    if bool(positive) == bool(negative):
        return None
    if positive:
        return None if _DOUBT.search(rest) else True
    return None if _NOT_WRONG.search(low) else False


def verification_says_correct(reply: str) -> bool:
    """Whether a verification reply is clearly correct (:func:`read_verdict` is True). (The original's
    ``"correct" in reply.lower()`` also accepted "incorrect".)"""
    return read_verdict(reply) is True


def judged_correct(reply: str, verdicts: str = "strict") -> bool:
    """The verdict a run scores: ``"strict"`` — :func:`read_verdict`, an ambiguous reply raising
    :class:`AmbiguousVerdict`; ``"fork"`` — the fork's in-loop rule ``"<correct>" in reply`` as it is
    (``vsearch_batch.py`` ``compute_accuracy_reward``; training under ``vsearch.variant=original`` only)."""
    if verdicts == "fork":
        return "<correct>" in reply
    verdict = read_verdict(reply)
    if verdict is None:
        raise AmbiguousVerdict(reply)
    return verdict


def _names_an_answer(extracted: str) -> bool:
    """For the ``has_answer`` statistic only (never for correctness): the judge extracted something
    other than an empty reply or a "none"-like one."""
    return extracted.strip().strip(".").lower() not in ("", "none", "no answer", "n/a", "null")


def user_message(text: str) -> list[JSONObject]:
    """The messages of a judge request as the original's ``query_api`` builds them."""
    return [{"role": "user", "content": [{"type": "text", "text": text}]}]


#: What asks the judge one prompt (:func:`ask_judge`, or a :class:`JudgeCache`'s ``ask``): the reply text.
AskJudge: TypeAlias = Callable[[Any, str, str, JSONObject], Awaitable[str]]


async def ask_judge(client: Any, model: str, prompt: str, completion_kwargs: JSONObject) -> str:
    """One judge request; the reply text ("" when the server sent no content). A reply without a first choice
    raises :class:`~insight_o3.endpoints.chat.NoChoice`, a malformed reply: judged again (:data:`RETRIED_JUDGE_ERRORS`)."""
    return (await chat_once(client, model, user_message(prompt), **completion_kwargs)).text


class JudgeCache:
    """Judge replies by (judge model, prompt, request settings) within one run: the same prompt (a
    response repeated across trials, a re-judge of identical answers) is asked once; concurrent askers
    share the one request. Failed requests are not kept, so a later ask tries again."""

    def __init__(self) -> None:
        self._replies: dict[tuple, asyncio.Future] = {}
        self.hits = 0
        self.misses = 0

    async def ask(
        self, client: Any, model: str, prompt: str, completion_kwargs: JSONObject, fresh: bool = False
    ) -> str:
        """The judge's reply to ``prompt``; ``fresh``: asked again even where a reply is kept (it replaces it)."""
        key = (model, prompt, json.dumps(completion_kwargs, sort_keys=True, default=str))
        fut = None if fresh else self._replies.get(key)
        if fut is None:
            self.misses += 1
            fut = self._replies[key] = asyncio.ensure_future(ask_judge(client, model, prompt, completion_kwargs))
        else:
            self.hits += 1
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            raise
        except Exception:
            if self._replies.get(key) is fut:
                del self._replies[key]
            raise


async def in_loop_check(
    client: Any,
    model: str,
    question: str,
    response_text: str,
    ground_truth: str,
    completion_kwargs: JSONObject | None = None,
    ask: AskJudge | None = None,
    verdicts: str = "strict",
) -> Verdict:
    """The fork's in-loop answer check (training reward ``c`` and InSight-o3 validation accuracy).

    The span is the first ``\\boxed{}`` content of ``response_text``, else its first ``<answer>``
    content (:func:`~insight_o3.protocol.parsing.extract_verify_span`); no span is not correct (the fork sent
    "None" to the judge). A span equal to ``ground_truth`` is correct without a judge call; otherwise
    ``QA_VERIFY_PROMPT`` goes to the judge (``max_tokens=2048``) and its reply decides (:func:`judged_correct`:
    ``verdicts="strict"`` raises :class:`AmbiguousVerdict` on an unclear one, ``"fork"`` is the fork's
    ``"<correct>" in reply``). ``question`` is what the vReasoner was asked (question and options). API errors raise.
    ``ask`` replaces :func:`ask_judge` (same signature), e.g. a :class:`JudgeCache`'s ``ask``.
    """
    span = extract_verify_span(response_text or "")
    if span is None:
        return Verdict(VerdictStatus.WRONG, None, False, "rule", fail_reason="no \\boxed{} or <answer> span")
    if span == ground_truth:
        return Verdict(VerdictStatus.CORRECT, span, True, "rule")
    kwargs = JUDGE_COMPLETION_KWARGS[JudgeFlow.VERIFY] if completion_kwargs is None else completion_kwargs
    prompt = prompts.format_judge_prompt(
        prompts.QA_VERIFY_PROMPT, question=question, gt_answer=ground_truth, model_answer=span
    )
    reply = await (ask or ask_judge)(client, model, prompt, kwargs)
    return Verdict(
        VerdictStatus.CORRECT if judged_correct(reply, verdicts) else VerdictStatus.WRONG, span, True, "judge", [reply]
    )


class AnswerJudge:
    """Checks attempts against a sample's ground truth. ``client`` is an ``AsyncOpenAI`` for the
    judge model (only called when the rule cannot decide). ``flow``: ``"extract"`` (single-model
    evaluation) or ``"verify"`` (the fork's in-loop check; InSight-o3 evaluation). With ``cache`` (a
    :class:`JudgeCache`) identical judge prompts are asked once. An attempt whose judge reply is ambiguous or
    malformed (:data:`RETRIED_JUDGE_ERRORS`) is judged again, fresh, up to ``retries`` times (counted in
    :attr:`rejudged`) before it is a failed verdict; ``retries=0`` for training, whose rounds retry it."""

    def __init__(
        self,
        client: Any,
        model: str,
        max_answer_length: int = 1000,
        completion_kwargs: dict | None = None,
        flow: str = JudgeFlow.EXTRACT,
        cache: JudgeCache | None = None,
        verdicts: str = "strict",
        retries: int = DEFAULT_JUDGE_RETRIES,
    ):
        if flow not in FLOWS:
            raise ValueError(f"judge flow must be one of {FLOWS}, got {flow!r}")
        if retries < 0:
            raise ValueError(f"judge retries must not be negative, got {retries}")
        self.client = client
        self.model = model
        self.max_answer_length = max_answer_length
        self.flow = JudgeFlow(flow)
        self.completion_kwargs = dict(completion_kwargs or JUDGE_COMPLETION_KWARGS[flow])
        self.cache = cache
        self.verdicts = verdicts  # see judged_correct: "fork" only for training under vsearch.variant=original
        self.retries = retries
        self.rejudged = 0  # judgings repeated after an ambiguous or malformed judge reply

    def _asker(self, fresh: bool) -> Callable[..., Awaitable[str]]:
        """:func:`ask_judge`'s signature: through the cache when there is one (``fresh``: past its kept replies)."""
        if self.cache is None:
            return ask_judge
        return functools.partial(self.cache.ask, fresh=True) if fresh else self.cache.ask

    async def check(self, sample: Sample, attempt: Attempt) -> Verdict:
        if attempt.error is not None:
            return Verdict(VerdictStatus.FAILED, fail_reason=attempt.error, fail_stage=FailStage.SOLVER)
        no_answer = attempt.stats.no_answer_reason()
        if no_answer is not None:
            return Verdict(VerdictStatus.INVALID, None, False, None, fail_reason=f"no answer: {no_answer}")
        if self.flow == JudgeFlow.EXTRACT and attempt.finish_reason != "stop":
            return Verdict(VerdictStatus.INCOMPLETE, fail_reason=f"finish_reason={attempt.finish_reason}")
        text = attempt.text or ""
        failure: Exception | None = None
        outputs: list[str] = []
        for tried in range(self.retries + 1):
            outputs = []
            ask = self._asker(fresh=tried > 0)
            try:
                if self.flow == JudgeFlow.OPENSEARCH_VL:
                    return await self._opensearch_vl(sample, text, outputs, ask)
                if self.flow == JudgeFlow.VERIFY:
                    return await in_loop_check(
                        self.client,
                        self.model,
                        insight_o3_question(sample),
                        text,
                        sample.answer,
                        self.completion_kwargs,
                        ask=ask,
                        verdicts=self.verdicts,
                    )
                return await self._extract(sample, text, outputs, ask)
            except RETRIED_JUDGE_ERRORS as e:
                failure = e
                if tried < self.retries:
                    self.rejudged += 1
                    continue
            except EXPECTED_ERRORS as e:  # API errors after the SDK's retries
                failure = e
            break
        assert failure is not None
        if isinstance(failure, AmbiguousVerdict) and not outputs:
            outputs.append(failure.reply)  # the verify flow's one reply: kept with the failure
        reason = f"judge error: {failure_reason(failure)}"
        return Verdict(VerdictStatus.FAILED, judge_outputs=outputs, fail_reason=reason, fail_stage=FailStage.JUDGE)

    async def _opensearch_vl(
        self, sample: Sample, text: str, outputs: list[str], ask: Callable[..., Awaitable[str]] = ask_judge
    ) -> Verdict:
        """OpenSearch-VL's ``eval_with_gpt4o.py`` (:mod:`.opensearch_vl_judge`): always the judge, never a rule."""
        response = osv_judge.extract_final_answer(text)
        question = sample.question if not sample.options else f"{sample.question}\n{sample.options}"
        prompt = osv_judge.judge_prompt(question, sample.answer, response)
        reply = await ask(self.client, self.model, prompt, self.completion_kwargs)
        outputs.append(reply)
        ok = osv_judge.parse_verdict(reply)
        return Verdict(
            VerdictStatus.CORRECT if ok else VerdictStatus.WRONG,
            response[:500],
            bool(response.strip()),
            "judge",
            outputs,
        )

    async def _extract(
        self, sample: Sample, text: str, outputs: list[str], ask: Callable[..., Awaitable[str]] = ask_judge
    ) -> Verdict:
        gt = sample.answer
        span = extract_answer_span(text)
        if span == gt:
            return Verdict(VerdictStatus.CORRECT, span, True, "rule")
        answer = crop_for_judge(span, self.max_answer_length)

        async def judge(prompt: str) -> str:
            return await ask(self.client, self.model, prompt, self.completion_kwargs)

        if sample.options:
            reply = await judge(
                prompts.format_judge_prompt(
                    prompts.MCQ_EXTRACTION_PROMPT, question=sample.question, options=sample.options, model_answer=answer
                )
            )
            outputs.append(reply)
            letter = reply.strip()
            return Verdict(
                VerdictStatus.CORRECT if letter == gt else VerdictStatus.WRONG,
                letter,
                _names_an_answer(letter),
                "judge",
                outputs,
            )
        extracted = await judge(
            prompts.format_judge_prompt(
                prompts.OPEN_QA_EXTRACTION_PROMPT, question=sample.question, model_response=answer
            )
        )
        outputs.append(extracted)
        reply = await judge(
            prompts.format_judge_prompt(
                prompts.JUDGE_PROMPT, question=sample.question, gt_answer=gt, model_answer=extracted
            )
        )
        outputs.append(reply)
        ok = judged_correct(reply, self.verdicts)
        return Verdict(
            VerdictStatus.CORRECT if ok else VerdictStatus.WRONG,
            extracted,
            _names_an_answer(extracted),
            "judge",
            outputs,
        )
