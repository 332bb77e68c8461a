"""The vocabularies of the protocol: one ``Enum`` per set of statuses or actions, used everywhere one is set or
compared (the sessions, the drivers, the judge, the metrics, the recipe's agent loops).

Each member is also its ``str`` value, so records written to JSON and rows handed to verl are unchanged
(``json.dumps(LocateStatus.FOUND) == '"found"'``, ``f"{LocateStatus.FOUND}" == "found"``) and a record read back
as plain strings compares equal to the members.
"""

from __future__ import annotations

from enum import Enum


class Vocabulary(str, Enum):
    """A string enum that prints and formats as its value (as ``enum.StrEnum`` of Python 3.11+)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


class LocateStatus(Vocabulary):
    """How a vSearcher episode ended (``LocateResult.status``)."""

    FOUND = "found"
    NOT_FOUND = "not_found"  # the answer [0, 0, 0, 0]
    INVALID = "invalid"  # no usable answer box
    FAILED = "failed"  # the episode could not run (API error, unusable image)


class SearcherAction(Vocabulary):
    """What one vSearcher turn did (``SearcherTurnRecord.action``, ``SearcherStep.action``)."""

    TOOL_CALL = "tool_call"
    TOOL_ERROR = "tool_error"  # a tool call whose box the tool could not use (the episode goes on)
    ANSWER = "answer"
    INVALID = "invalid"


class EpisodeStatus(Vocabulary):
    """How an InSight-o3 (vReasoner) episode ended; only ``ANSWERED`` has an answer."""

    ANSWERED = "answered"
    FORMAT_FAILED = "format_failed"  # format retries exhausted in a round
    SEARCH_AFTER_LIMIT = "search_after_limit"  # a search past the search-call limit
    SEARCH_INVALID = "search_invalid"  # the vSearcher returned no valid box
    FAILED = "failed"  # lost: the vReasoner or vSearcher could not be reached, or the image read
    IMAGE_REFUSED = "image_refused"  # a baseline protocol cannot show the image (aspect ratio past 200): no request


#: Episode statuses that carry no answer and were not lost (scored c = 0, never judged).
NO_ANSWER_STATUSES = (
    EpisodeStatus.FORMAT_FAILED,
    EpisodeStatus.SEARCH_AFTER_LIMIT,
    EpisodeStatus.SEARCH_INVALID,
    EpisodeStatus.IMAGE_REFUSED,
)


class ThoughtsForm(Vocabulary):
    """How an Insight-V reasoner reply holds its chain (recorded in its stats; the chain is taken the release's way
    whatever the form)."""

    CLOSED = "closed"  # a <thoughts> ... </thoughts> span
    UNCLOSED = "unclosed"  # <thoughts> without a </thoughts> after it (typically cut by the token limit)
    MISSING = "missing"  # no <thoughts>: the whole reply (up to a stray </thoughts>) is the chain


class InsightVAgent(Vocabulary):
    """Insight-V's two agents, in the order an episode asks them."""

    REASONER = "reasoner"
    SUMMARY = "summary"


class ReplyKind(Vocabulary):
    """What a vReasoner reply asks for, as parsed (``parsing.ReasonerTurn.action``)."""

    SEARCH = "search"
    ANSWER = "answer"
    INVALID = "invalid"


class ReasonerAction(Vocabulary):
    """What the vReasoner driver does next (``ReasonerStep.action``)."""

    SEARCH = "search"
    RETRY = "retry"
    ANSWER = "answer"
    STOP = "stop"


class ReasonerMode(Vocabulary):
    """The vReasoner's setting (``ReasonerSession.mode``): its system prompt and format retries per round."""

    INFER = "infer"  # the fork's validation setting (tool feedback off)
    TRAIN = "train"  # the fork's training setting (the prompt asks for feedback on each search)


class JudgeFlow(Vocabulary):
    """How the judge decides an answer (``AnswerJudge.flow``)."""

    EXTRACT = "extract"  # the released evaluate.py: extract the answer, then compare (single model)
    VERIFY = "verify"  # the fork's in-loop check (InSight-o3)
    OPENSEARCH_VL = "opensearch_vl"  # OpenSearch-VL's eval_with_gpt4o


class VerdictStatus(Vocabulary):
    """The judge's verdict on one attempt (``Verdict.status``, a record's ``eval_result.status``)."""

    CORRECT = "correct"  # the only status that counts as correct
    WRONG = "wrong"
    INCOMPLETE = "incomplete"  # the response was truncated (finish_reason other than stop): never judged
    INVALID = "invalid"  # no answer to judge: an episode that ended without one, never sent to the judge
    FAILED = "failed"  # lost to API errors (the query or its judging): redone by --retry_failed


#: Verdicts that judged an answer (a record's ``success``).
JUDGED_STATUSES = (VerdictStatus.CORRECT, VerdictStatus.WRONG)


class FailStage(Vocabulary):
    """Where a lost record was lost (``eval_result.fail_stage``): what ``--retry_failed`` redoes."""

    SOLVER = "solver"  # the solver's queries: asked again
    JUDGE = "judge"  # the judge's: the stored response is judged again


class UnitKind(Vocabulary):
    """What one unit of evaluation work does (``evaluation.runner.Unit``)."""

    QUERY = "query"  # ask the solver, then judge
    JUDGE = "judge"  # judge a stored response again (its fail_stage was the judge)
