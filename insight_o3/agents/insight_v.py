"""Insight-V (github dongyh20/Insight-V) as a sans-IO protocol: the rules of its released two-agent inference,
``infer_two_models.py`` at commit 5e9c6f9, over the chat API instead of its in-process LLaVA models
(docs/fidelity.md rows IV*; checked by running the release on generated cases: tests/golden/record_insight_v_goldens.py).

The **reasoning agent** gets the question with :data:`REASON_SUFFIX` and writes a chain; the chain is the text after
the reply's last ``<thoughts>`` up to the next ``</thoughts>`` (the whole reply when it has no ``<thoughts>``; to its
end when the token limit cut it before ``</thoughts>``), re-wrapped as ``"<thoughts>\n" + chain + "</thoughts>\n"``
(:func:`reason_chain`). The **summary agent** gets :data:`SUMMARY_PREFIX`, the question and the chain
(:func:`summary_question`) with the same image, and answers; its reply is what the judge reads. Both requests:
the system message :data:`SYSTEM_PROMPT` (the default of the release's ``preprocess_llama3``), temperature 0.2,
top_p 0.95, one beam; 1024 new tokens for the reasoner (whose reply keeps the special ``<thoughts>`` tokens:
``skip_special_tokens`` off, as the release decodes it) and 4096 for the summariser.

The release's question text holds LLaVA's ``<image>`` marker (``"<image>\n" + question ...``); over the chat API the
image part stands where the marker is (:func:`user_parts`), so a server whose chat template renders an image part as
the marker sees the release's text. How a sample becomes that question text is not in the release (it has one
hard-coded example): :func:`origin_question` is ours (row IV2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..protocol.agent_catalog import INSIGHT_V
from ..protocol.attempt_stats import InsightVStats, OtherText
from ..protocol.statuses import InsightVAgent, ThoughtsForm
from ..protocol.trajectory import message
from .tool_agents import AgentSpec

PROTOCOL_VERSION = "insight_v@5e9c6f934c1929e351dbff17a6c6c7bc2d8143b1:infer_two_models.py"

#: the release's strings (recorded by running it: tests/golden/insight_v.json)
SYSTEM_PROMPT = 'You are a helpful language and vision assistant. You are able to understand the visual content that the user provides, and assist the user with a variety of tasks using natural language.'
SUMMARY_PREFIX = 'I will give you a reasoning process of the question. You should determine whether the reasoning process is correct about the question. If it is correct, please summarize the answer based on the reasoning process. If it is incorrect, answer the question and ignore the reasoning process. You shold directly give the summarization or answer as you are directly answer the QUESTION  without saying your judgement about the reasoning process.\n\nQUESTION: '
REASON_SUFFIX = '\n\nPerform step-by-step reasoning of the problem. Only provide the reasoning process.'
THOUGHTS_OPEN, THOUGHTS_CLOSE = "<thoughts>", "</thoughts>"
#: what joins the question and the chain in the summary prompt (the release's f-string)
REASON_PROCESS = "\n\nREASON PROCESS: "
#: LLaVA's image marker at the head of the release's question text
IMAGE_TOKEN = "<image>"
#: the instruction after the options of a multiple-choice question (the release's example question)
MCQ_INSTRUCTION = "Answer the question with the options provided."
#: the instruction after an open question (the release's data-check example question; ours to use here, row IV2)
OPEN_INSTRUCTION = "Answer the question using a single word or phrase."
#: the two agents' request settings (``infer_two_models.py`` l. 175-195, 212-232; greedy off: ``do_sample`` since
#: temperature > 0; ``num_beams`` 1 is the API's own)
REASONER_KWARGS: Mapping[str, Any] = {
    "temperature": 0.2,
    "top_p": 0.95,
    "max_tokens": 1024,
    "extra_body": {"skip_special_tokens": False},
}
SUMMARY_KWARGS: Mapping[str, Any] = {"temperature": 0.2, "top_p": 0.95, "max_tokens": 4096}


def origin_question(question: str, options: str | None) -> str:
    """The release's question text for a sample (ours, row IV2): the image marker, a newline, the question; a
    multiple-choice question's options block and :data:`MCQ_INSTRUCTION` after it, an open question's
    :data:`OPEN_INSTRUCTION`."""
    if options:
        return f"{IMAGE_TOKEN}\n{question}\n{options}\n{MCQ_INSTRUCTION}"
    return f"{IMAGE_TOKEN}\n{question}\n{OPEN_INSTRUCTION}"


def reason_question(origin: str) -> str:
    """The reasoning agent's text (``infer_two_models.py`` l. 159)."""
    return origin + REASON_SUFFIX


def chain_text(reply: str) -> str:
    """The chain of a reasoner reply (l. 198): after its last ``<thoughts>`` (the whole reply without one), up to
    the next ``</thoughts>`` (the rest without one). Linear in the reply."""
    after = reply.rpartition(THOUGHTS_OPEN)[2]
    return after.partition(THOUGHTS_CLOSE)[0]


def reason_chain(reply: str) -> str:
    """The chain as the summary prompt holds it (l. 198-199): :func:`chain_text` wrapped in the tags again."""
    return THOUGHTS_OPEN + "\n" + chain_text(reply) + THOUGHTS_CLOSE + "\n"


def thoughts_form(reply: str) -> ThoughtsForm:
    before, found, after = reply.rpartition(THOUGHTS_OPEN)
    if not found:
        return ThoughtsForm.MISSING
    return ThoughtsForm.CLOSED if THOUGHTS_CLOSE in after else ThoughtsForm.UNCLOSED


def summary_question(origin: str, chain: str) -> str:
    """The summary agent's text (l. 201): :data:`SUMMARY_PREFIX`, the question, :data:`REASON_PROCESS`, the chain
    (as :func:`reason_chain` makes it)."""
    return SUMMARY_PREFIX + origin + REASON_PROCESS + chain


def user_parts(text: str, image: JSONObject) -> list[JSONObject | str]:
    """A user message's parts: ``text`` with ``image`` (an image part) in place of its first :data:`IMAGE_TOKEN`
    (the question's; a marker inside the chain stays text); without a marker, the image first."""
    before, found, after = text.partition(IMAGE_TOKEN)
    if not found:
        return [image, text]
    return [p for p in (before, image, after) if p != ""]


@dataclass
class InsightVEpisode:
    """One two-agent episode, sans IO: the messages of each request, what each agent replied, the record.

    ``image``: the image part of the sample's picture (the original, as the release passes the file to its
    image processor). Drive it as: :meth:`reasoner_messages` -> request -> :meth:`note_chain` ->
    :meth:`summary_messages` -> request -> :meth:`note_summary`."""

    question: str
    options: str | None
    image: JSONObject
    reasoner_reply: str | None = None
    reasoner_finish: str | None = None
    summary_reply: str | None = None
    summary_finish: str | None = None

    @property
    def origin(self) -> str:
        return origin_question(self.question, self.options)

    def reasoner_messages(self) -> list[JSONObject]:
        text = reason_question(self.origin)
        return [
            message("system", SYSTEM_PROMPT, name="reasoner"),
            message("user", *user_parts(text, self.image), name="reasoner"),
        ]

    def note_chain(self, reply: str, finish_reason: str | None) -> None:
        self.reasoner_reply, self.reasoner_finish = reply, finish_reason

    @property
    def chain(self) -> str:
        """The chain as the summary agent sees it."""
        assert self.reasoner_reply is not None, "no reasoner reply yet"
        return reason_chain(self.reasoner_reply)

    def summary_messages(self) -> list[JSONObject]:
        text = summary_question(self.origin, self.chain)
        return [
            message("system", SYSTEM_PROMPT, name="summary"),
            message("user", *user_parts(text, self.image), name="summary"),
        ]

    def note_summary(self, reply: str, finish_reason: str | None) -> None:
        self.summary_reply, self.summary_finish = reply, finish_reason

    def trajectory(self) -> list[JSONObject]:
        """Both conversations, each message named by its agent (``name``: ``reasoner`` / ``summary``)."""
        out = self.reasoner_messages()
        if self.reasoner_reply is None:
            return out
        out.append(message("assistant", self.reasoner_reply, name="reasoner"))
        out += self.summary_messages()
        if self.summary_reply is not None:
            out.append(message("assistant", self.summary_reply, name="summary"))
        return out

    def stats(self, lost: InsightVAgent | None = None) -> InsightVStats:
        """What the record keeps besides the summary (the response): the chain the summariser saw, the reasoner's
        finish reason and the form of its ``<thoughts>`` span, the chain for the judge (``judge_also``: the runner
        judges it too, so attribution can tell a chain the summary overruled) and, once both agents replied, the
        requests made. ``lost``: the agent whose request was lost (a failed attempt, never judged: no ``judge_also``)."""
        given: dict[str, Any] = {}
        if self.reasoner_reply is not None:
            given.update(chain=self.chain, reasoner_finish_reason=self.reasoner_finish)
            given["thoughts"] = thoughts_form(self.reasoner_reply)
            if lost is None:
                also = OtherText(text=chain_text(self.reasoner_reply), finish_reason=self.reasoner_finish)
                given["judge_also"] = {"chain": also}
        if lost is not None:
            given["lost"] = lost
        elif self.summary_reply is not None:
            given["requests"] = 2
        return InsightVStats(**given)


SPEC = AgentSpec(
    name=INSIGHT_V.name,
    protocol_version=PROTOCOL_VERSION,
    description=INSIGHT_V.description,
    image_format="PNG",  # the original file's pixels, as the release hands the file to its image processor
    resizes=False,
)
