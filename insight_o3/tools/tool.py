"""The :class:`Tool` interface: a name, a JSON schema, and ``run(arguments, context) -> Observation``; the
:class:`ToolContext` of one call (the episode's images, the limits, the retrieval backend, the settings)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from .backend import Retrieval
from .base import Observation, ToolLimits
from .images import ImageBook


@dataclass
class ToolContext:
    """What a call may use: the episode's images, where it writes images, the limits, the retrieval backend, and
    the naming the protocol puts in its observations (``case_idx``, ``turn``)."""

    images: ImageBook
    limits: ToolLimits = field(default_factory=ToolLimits)
    retrieval: Retrieval | None = None
    scratch: Path | None = None
    case_idx: int = 0
    turn: int = 0
    filename_prefix: str = "fvqa_test"
    settings: Mapping[str, Any] = field(default_factory=dict)


class Tool(ABC):
    """One tool. ``name`` and ``schema`` (an OpenAI-style function schema) describe it; :meth:`run` executes one
    call. ``run`` raises :class:`ToolError` for what the model should hear and never blocks the event loop (CPU
    work goes to a thread, subprocesses are awaited)."""

    name: str = ""
    schema: JSONObject = {}

    @abstractmethod
    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation: ...

    def describe(self) -> str:
        """One line for listings and the run card."""
        return str(self.schema.get("description", self.name))
