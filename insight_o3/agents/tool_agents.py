"""The agent plugin interface: a single-model "thinking with images" agent as a sans-IO session.

A session holds one episode's conversation (chat messages whose image parts are
:class:`~insight_o3.imaging.images.ImageRef` references, :mod:`insight_o3.protocol.trajectory`) and reads
each model reply with :meth:`ToolSession.step`, which returns what the driver does next:

* :class:`Zoom`: render ``region`` (pixels of the ORIGINAL image, already clamped to it) at ``size`` and give the
  view back with :meth:`ToolSession.observe`; then ask again;
* :class:`Resend`: ask again with the same messages (a harness that re-asks after a reply without a tool call
  or an answer);
* :class:`Finish`: the episode's answer text (what the judge reads) and, when the protocol's own loop ended on
  an error (a malformed tool call, its turn limit), the reason (kept in the record's ``stats``).

The driver (:mod:`insight_o3.agents.tool_loop`) owns the client and the image store; a session never does I/O,
so the same rules can run on recorded replies (the golden tests). :class:`AgentDefaults` are the settings a
protocol's released evaluation uses (sampling, request limits, image encoding).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..imaging.geometry import Box
from ..imaging.images import ImageRef


@dataclass(frozen=True)
class Zoom:
    """Crop ``region`` (original-image pixels, inside the image) and show it at ``size`` ``(w, h)``."""

    region: Box
    size: tuple[int, int]
    call: dict = field(default_factory=dict)  # the parsed tool call, for the record


@dataclass(frozen=True)
class Resend:
    """Ask the model again with unchanged messages."""


@dataclass(frozen=True)
class Finish:
    """The episode's answer (``text``: what the judge reads); ``reason``: why the protocol's loop stopped early."""

    text: str
    reason: str | None = None


Step = Zoom | Resend | Finish


@dataclass(frozen=True, kw_only=True)
class AgentDefaults:
    """A protocol's request settings. ``completion_kwargs``: every request's sampling/limits (the released
    evaluation's); ``image_format``: how views are encoded (PNG: the original pixels, losslessly);
    ``join_text``: whether adjacent text parts are sent as one; ``image_url_extra``: extra ``image_url`` keys."""

    completion_kwargs: Mapping[str, Any]
    image_format: str = "PNG"
    join_text: bool = False
    image_url_extra: Mapping[str, Any] = field(default_factory=dict)


class ToolSession(Protocol):
    """One episode of a tool-using agent (see the module docstring)."""

    messages: list[dict]

    def step(self, reply: str) -> Step: ...

    def observe(self, view: ImageRef) -> None: ...


class SessionFactory(Protocol):
    """Builds a session for one sample given its original image as sent (``original``)."""

    def __call__(self, question: str, options: str | None, original: ImageRef) -> ToolSession: ...
