"""What a solver reports of one attempt besides its text (a record's ``eval_result.stats``): one typed record per
agent family, declared once here, so readers use attributes and ``isinstance`` instead of fishing a dict for keys.

A stored ``stats`` object never named its family; its keys tell it (:func:`family_of`, the discriminator of
:data:`Stats`, the type the schema reads a record's ``stats`` as): ``n_search_calls`` an InSight-o3 episode
(:class:`InSightO3Stats`), ``chain``/``thoughts``/``lost``/``judge_also``/``judged`` Insight-V's two agents
(:class:`InsightVStats`), ``requests``/``zooms``/``tool_calls``/``stop_reason`` a tool-loop baseline
(:class:`ToolLoopStats`); nothing, or keys of no family, a bare :class:`AttemptStats` (a single model's: empty).

The on-disk format is the one the dicts had: a record writes the keys it was given (a field never set is not
written, one set to null is), in the order declared below, then the keys its family does not declare (kept in
``model_extra`` and written back, never dropped).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictInt,
    StrictStr,
    Tag,
    model_serializer,
)

from ..base.json_types import JSONObject
from .statuses import NO_ANSWER_STATUSES, EpisodeStatus, InsightVAgent, ThoughtsForm, VerdictStatus, Vocabulary


class StatsFamily(Vocabulary):
    """The agent families whose attempts report stats (the tags of :data:`Stats`)."""

    INSIGHT_O3 = "insight_o3"
    INSIGHT_V = "insight_v"
    TOOL_LOOP = "tool_loop"
    NONE = "none"  # a single model's (empty), or keys of no family


class AttemptStats(BaseModel):
    """The stats of an attempt of no family (a single model's: none), and the base of the families'. An object of
    no known family reads as this class, all its keys in ``model_extra``."""

    model_config = ConfigDict(extra="allow", frozen=True)

    FAMILY: ClassVar[StatsFamily] = StatsFamily.NONE
    #: Keys any of which marks a stored object as this family's.
    MARKS: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> JSONObject:
        """The keys given, in declared order, then the undeclared ones: a default never set is not written."""
        out: JSONObject = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in out.items() if k in given}

    def to_dict(self) -> JSONObject:
        return self.model_dump()

    @property
    def episode_status(self) -> EpisodeStatus | None:
        """How the episode ended, where the family says (None: not said)."""
        return None

    @property
    def episode_error(self) -> str | None:
        """The protocol problem that ended the episode without an answer, where the family says."""
        return None

    def no_answer_reason(self) -> str | None:
        """Why there is no answer to judge (the episode ended on a protocol problem); None: the text is judged."""
        status = self.episode_status
        if status is None or status not in NO_ANSWER_STATUSES:
            return None
        return self.episode_error or status

    def texts_to_judge(self) -> dict[str, OtherText]:
        """The attempt's other texts the runner judges as answers too (name -> text; e.g. Insight-V's chain)."""
        return {}

    def with_verdicts(self, judged: dict[str, TextVerdict]) -> AttemptStats:
        """These stats with the verdicts on :meth:`texts_to_judge` (a family without such texts has none to keep)."""
        raise TypeError(f"{type(self).__name__} has no other texts to judge")


class OtherText(BaseModel):
    """A text of the attempt besides its answer, judged as one (``judge_also``)."""

    model_config = ConfigDict(frozen=True)

    text: StrictStr
    finish_reason: StrictStr | None


class TextVerdict(BaseModel):
    """The judge's verdict on an :class:`OtherText` (``judged``)."""

    model_config = ConfigDict(frozen=True)

    status: VerdictStatus
    extracted_answer: StrictStr | None
    has_answer: StrictBool


class InSightO3Stats(AttemptStats):
    """An InSight-o3 episode (vReasoner + vSearcher): its searches, format retries, the vReasoner's feedback on each
    search, how it ended and (``protocol_error``) the problem that ended it without an answer."""

    FAMILY = StatsFamily.INSIGHT_O3
    MARKS = frozenset({"n_search_calls"})

    n_search_calls: StrictInt = 0
    n_search_not_found: StrictInt = 0
    n_format_retries: StrictInt = 0
    feedback: list[StrictStr | None] = Field(default_factory=list)
    status: EpisodeStatus | None = None
    protocol_error: StrictStr | None = None

    @property
    def episode_status(self) -> EpisodeStatus | None:
        return self.status

    @property
    def episode_error(self) -> str | None:
        return self.protocol_error


class InsightVStats(AttemptStats):
    """An Insight-V episode: the chain the summary agent saw, the reasoner's finish reason and the form of its
    ``<thoughts>`` span, the chain handed to the judge (``judge_also``) and the judge's verdict on it (``judged``),
    the requests made, the agent whose request was lost (``lost``: a failed attempt)."""

    FAMILY = StatsFamily.INSIGHT_V
    MARKS = frozenset({"chain", "reasoner_finish_reason", "thoughts", "judge_also", "lost", "judged"})

    chain: StrictStr | None = None
    reasoner_finish_reason: StrictStr | None = None
    thoughts: ThoughtsForm | None = None
    judge_also: dict[str, OtherText] = Field(default_factory=dict)
    requests: StrictInt = 0
    lost: InsightVAgent | None = None
    judged: dict[str, TextVerdict] = Field(default_factory=dict)

    def texts_to_judge(self) -> dict[str, OtherText]:
        return dict(self.judge_also)

    def with_verdicts(self, judged: dict[str, TextVerdict]) -> InsightVStats:
        return self.model_copy(update={"judged": judged})


class ToolLoopStats(AttemptStats):
    """A tool-loop baseline's episode (DeepEyes, Mini-o3, Pixel-Reasoner, OpenSearch-VL): its requests and zooms,
    each tool call's record (``insight_o3.tools.calls.ToolCallRecord``), why the protocol stopped it, and an image it
    could not show (``status`` ``image_refused``, ``protocol_error``)."""

    FAMILY = StatsFamily.TOOL_LOOP
    MARKS = frozenset({"requests", "zooms", "tool_calls", "stop_reason"})

    requests: StrictInt = 0
    zooms: StrictInt = 0
    tool_calls: list[JSONObject] = Field(default_factory=list)
    stop_reason: StrictStr | None = None
    status: EpisodeStatus | None = None
    protocol_error: StrictStr | None = None

    @property
    def episode_status(self) -> EpisodeStatus | None:
        return self.status

    @property
    def episode_error(self) -> str | None:
        return self.protocol_error


#: The families in the order their marks are tried (Insight-V's ``requests`` does not make it a tool loop).
FAMILIES: tuple[type[AttemptStats], ...] = (InSightO3Stats, InsightVStats, ToolLoopStats)


def family_of(v: Any) -> StatsFamily | None:
    """The family of a stats record, or of a stored object by its keys (None: not an object, for the validation
    to report)."""
    if isinstance(v, AttemptStats):
        return v.FAMILY
    if isinstance(v, dict):
        return next((f.FAMILY for f in FAMILIES if f.MARKS & v.keys()), StatsFamily.NONE)
    return None


#: An attempt's stats as a record field: each family's record, told apart by :func:`family_of`.
Stats = Annotated[
    Annotated[InSightO3Stats, Tag(StatsFamily.INSIGHT_O3)]
    | Annotated[InsightVStats, Tag(StatsFamily.INSIGHT_V)]
    | Annotated[ToolLoopStats, Tag(StatsFamily.TOOL_LOOP)]
    | Annotated[AttemptStats, Tag(StatsFamily.NONE)],
    Discriminator(family_of),
]
