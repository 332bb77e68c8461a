"""The agent plugin interface: a single-model "thinking with images" agent as a sans-IO session.

A session holds one episode's conversation (chat messages whose image parts are
:class:`~insight_o3.imaging.images.ImageRef` references, :mod:`insight_o3.protocol.trajectory`): each image part
names the image file, the region of it (original pixels) and the exact ``(w, h)`` it is shown at, so the session
decides every crop and resize and the driver only renders what the references say (the region at its size, BICUBIC;
or the part's own pipeline of operations on the original file, :func:`insight_o3.protocol.trajectory.image_part`). :meth:`ToolSession.step` reads one model reply and returns

* :class:`Ask`: send the (possibly extended) messages again (after a tool call, its response is already appended;
  a harness that re-asks after a reply without a call or an answer appends nothing);
* :class:`Finish`: the episode's answer text (what the judge reads) and, when the protocol's own loop ended early
  (a malformed tool call, its turn or image limit), the reason (kept in the record's ``stats``); when the answer is
  an earlier reply's text, which reply (its ``finish_reason`` is the attempt's).

A session whose protocol cannot show the sample's image at all (its release raises before the first request)
raises :class:`UnusableImage` from its constructor: the attempt is then no answer (status ``invalid``, the reason
recorded), the sample's outcome, never a lost request.

A session that also implements :class:`UsageAware` is told each reply's token counts before ``step``.

The driver (:mod:`insight_o3.agents.tool_loop`) owns the client and the image store; a session never does I/O,
so the same rules run on recorded replies (the golden tests). :class:`AgentDefaults` are the request settings a
protocol's released evaluation uses.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable


@dataclass(frozen=True)
class Ask:
    """Send the session's messages (again)."""

    zoomed: bool = False  # a tool call was answered with a view


@dataclass(frozen=True)
class Finish:
    """The episode's answer (``text``: what the judge reads); ``reason``: why the protocol's loop stopped early;
    ``reply``: the index of the reply (0 the first) whose text ``text`` is, -1 the last one."""

    text: str
    reason: str | None = None
    reply: int = -1


class UnusableImage(ValueError):
    """The protocol cannot show this sample's image (see the module docstring); the message says why."""


@dataclass(frozen=True)
class UseTool:
    """Run the tool ``tool`` of the run's toolkit (None: no such tool) on ``arguments``; ``name`` is what the model
    called it. The driver hands the call's record to the session's ``observe`` (:class:`ToolUser`)."""

    name: Any
    tool: str | None
    arguments: dict


@dataclass(frozen=True)
class ShownImage:
    """An image a tool made, for the messages: its file and size."""

    path: str
    size: tuple[int, int]


Step = Ask | Finish | UseTool


@dataclass(frozen=True, kw_only=True)
class AgentDefaults:
    """A protocol's request settings. ``completion_kwargs``: every request's sampling/limits (the released
    evaluation's); ``image_format``: how views are encoded (PNG: the pixels, losslessly); ``join_text``: whether adjacent text parts are sent as one;
    ``image_url_extra``: extra ``image_url`` keys; ``image_mime``: the label of every image."""

    completion_kwargs: Mapping[str, Any]
    image_format: str = "PNG"
    join_text: bool = False
    image_url_extra: Mapping[str, Any] = field(default_factory=dict)
    #: the media type every ``image_url`` is labelled with whatever its encoding (None: its own); DeepEyes's release
    #: labels its PNG crops and any file ``image/jpeg``
    image_mime: str | None = None


class ToolSession(Protocol):
    """One episode of a tool-using agent (see the module docstring)."""

    messages: list[dict]

    def step(self, reply: str, finish_reason: str | None = None) -> Step: ...


@runtime_checkable
class UsageAware(Protocol):
    """A session whose protocol reads the token counts of each request (Pixel-Reasoner's context budget): the
    driver calls ``note_usage`` with the reply's ``usage`` (``prompt_tokens``, ``completion_tokens``; empty where
    the server reports none) before ``step``."""

    def note_usage(self, usage: Mapping[str, int]) -> None: ...


@runtime_checkable
class ViewErrorAware(Protocol):
    """A session whose protocol ends the episode when a view it asked for cannot be made (DeepEyes: a crop PNG cannot
    hold, as of a CMYK image, is an error in its tool call): the driver calls ``view_failed`` with the reason instead
    of recording a failed attempt; it returns the episode's :class:`Finish`, or None when the protocol has no answer
    to give (the first image itself)."""

    def view_failed(self, reason: str) -> Finish | None: ...


@dataclass(frozen=True)
class DemoTurn:
    """What the keyless demo's scripted model knows when a request comes in: the request's system prompt and number of
    assistant turns, the question's evidence box (original pixels) and image size, the option letter it is to give
    and a tag to carry through the episode (``(demo ref …)``: which question and attempt it is)."""

    system: str
    turns: int
    box: tuple[float, float, float, float]
    size: tuple[int, int]
    letter: str
    tag: str


class DemoSpeaker(Protocol):
    """How the demo's scripted model speaks an agent's protocol (:attr:`AgentPlugin.demo_reply`): the reply to the
    request ``turn`` describes — a zoom on the evidence box first, then the answer in the protocol's format — or None
    when the request is not of this protocol (its system prompt is another's)."""

    def __call__(self, turn: DemoTurn) -> str | None: ...


@runtime_checkable
class ToolUser(Protocol):
    """A session whose steps may be :class:`UseTool`: ``observe`` takes the call's observation text, the images it
    made and its record, and says what comes next."""

    def observe(
        self, text: str, new_images: list[ShownImage], record: Mapping[str, Any] | None = None
    ) -> Ask | Finish: ...


class SessionFactory(Protocol):
    """Builds the session of one sample: its question, options block, image file and that file's ``(w, h)``."""

    def __call__(self, question: str, options: str | None, image: str, size: tuple[int, int]) -> ToolSession: ...


@dataclass(frozen=True, kw_only=True)
class AgentSpec:
    """An agent as its own module declares it (its ``SPEC``), which the registry
    (:mod:`insight_o3.evaluation.agent_registry`) lists: the ``name`` of ``evaluate --agent``, the
    ``protocol_version`` written to the run card, a one-line ``description``, how the run's images are encoded
    (``image_format``, ``alpha``, ``keeps_originals``, ``resizes``). A tool-using agent gives its sans-IO
    ``session`` factory and the protocol's ``defaults`` (its image fields are then theirs) and ``demo_reply``, how the
    keyless demo's scripted model speaks it."""

    name: str
    protocol_version: str
    description: str
    image_format: str = "JPEG"
    alpha: str = "drop"
    keeps_originals: bool = False
    resizes: bool = True
    session: SessionFactory | None = None
    defaults: AgentDefaults | None = None
    demo_reply: DemoSpeaker | None = None
