"""What tools exchange: the images they hold (:class:`ToolImage`), what they answer (:class:`Observation`), their
limits (:class:`ToolLimits`) and their typed errors (:class:`ToolError`); the interface itself is :mod:`.tool`.

A tool reads the images of the episode by reference (``img_1``, ``img_2``, … in an :class:`ImageBook`), and
answers with an :class:`Observation`: text for the model and the images it made (each a PNG file written
content-addressed, see :mod:`insight_o3.tools.images`). A problem the model caused or can mend (a bad argument, an
unknown image, a cap reached, a backend that failed) is a :class:`ToolError`: its message goes back to the model as
the observation and the call's record names its kind; anything else is a bug and raises.

Why typed errors: the record of a call says *what kind* of failure it was (a model's mistake, a limit, a backend
outage), which the text alone would not; fatal-step counting and reports read that kind.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from ..base.json_types import JSONObject


class ErrorKind(str, enum.Enum):
    """Why a tool call failed (the record's ``error.kind``)."""

    BAD_ARGUMENTS = "bad_arguments"  # missing, mistyped or out-of-range arguments
    UNKNOWN_IMAGE = "unknown_image"  # an image reference the episode does not hold
    LIMIT = "limit"  # a per-call cap: time, output size, pixels
    UNAVAILABLE = "unavailable"  # the tool cannot run here (a missing package, no isolation, no backend)
    BACKEND = "backend"  # the service behind the tool failed (HTTP error, timeout, bad reply)
    UNKNOWN_TOOL = "unknown_tool"


class ToolError(Exception):
    """A failure the model is told about: ``text`` is the observation it gets (the protocol's own wording where
    it has one), ``kind`` the record's reason."""

    kind = ErrorKind.BACKEND

    def __init__(self, text: str, kind: ErrorKind | None = None):
        super().__init__(text)
        self.text = text
        if kind is not None:
            self.kind = kind


class BadArguments(ToolError):
    kind = ErrorKind.BAD_ARGUMENTS


class UnknownImage(ToolError):
    kind = ErrorKind.UNKNOWN_IMAGE


class LimitExceeded(ToolError):
    kind = ErrorKind.LIMIT


class Unavailable(ToolError):
    kind = ErrorKind.UNAVAILABLE


class BackendFailed(ToolError):
    kind = ErrorKind.BACKEND


@dataclass(frozen=True)
class ToolImage:
    """An image the episode holds: its id (``img_3``), the file (a PNG the tools wrote, or the sample's image) and
    its ``(w, h)``."""

    id: str
    path: str
    size: tuple[int, int]

    def to_dict(self) -> JSONObject:
        return {"id": self.id, "path": self.path, "size": list(self.size)}


@dataclass(frozen=True)
class Observation:
    """What a tool returns: ``text`` for the model, ``images`` it made (already added to the book)."""

    text: str
    images: tuple[ToolImage, ...] = ()


@dataclass(frozen=True, kw_only=True)
class ToolLimits:
    """Per-call caps. ``seconds``: wall time of a call (the call is abandoned and recorded as a limit error);
    ``output_chars``: observation text kept (the rest cut, said so); ``max_pixels``: pixels of any image a tool
    reads or makes; ``page_bytes``: bytes read from one HTTP response (a page, a search reply)."""

    seconds: float = 120.0
    output_chars: int = 200_000
    max_pixels: int = 50_000_000
    page_bytes: int = 20 * 2**20


def error_of(kind: ErrorKind, text: str) -> ToolError:
    """The :class:`ToolError` subclass of ``kind`` carrying ``text`` (a replayed error is the error it was)."""
    for cls in (BadArguments, UnknownImage, LimitExceeded, Unavailable, BackendFailed):
        if cls.kind == kind:
            return cls(text)
    return ToolError(text, kind)
