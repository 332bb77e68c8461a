"""Running one tool call under its limits and recording it.

:func:`call_tool` never raises for what a tool reports (:class:`~insight_o3.tools.base.ToolError`) nor for a call
past its time limit: both become the observation the model reads, and the :class:`ToolCallRecord` record says what
happened (arguments, observation, the images made, seconds, the error's kind). The record goes into the
sample's record (``stats.tool_calls``, :class:`~insight_o3.protocol.attempt_stats.ToolLoopStats`) and the report.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..base.caps import cut_middle
from ..base.json_types import JSONObject
from ..base.redaction import redact
from ..imaging.images import ImageError
from .base import ErrorKind, Observation, ToolError, ToolImage
from .tool import Tool, ToolContext

ERR = "Tool execution error:\n"


@dataclass
class ToolCallRecord:
    """One call as the record keeps it. ``inputs``: the images the arguments named (id -> path, size)."""

    name: str
    arguments: JSONObject
    text: str
    images: list[ToolImage] = field(default_factory=list)
    inputs: list[ToolImage] = field(default_factory=list)
    seconds: float = 0.0
    error: str | None = None
    error_kind: str | None = None
    turn: int = 0

    @property
    def failed(self) -> bool:
        return self.error is not None

    def to_dict(self) -> JSONObject:
        return {
            "name": self.name,
            "arguments": self.arguments,
            "observation": self.text,
            "new_images": [i.to_dict() for i in self.images],
            "input_images": [i.to_dict() for i in self.inputs],
            "seconds": round(self.seconds, 4),
            "error": self.error,
            "error_kind": self.error_kind,
            "turn": self.turn,
        }


def _inputs(arguments: Mapping[str, Any], ctx: ToolContext) -> list[ToolImage]:
    refs = [v for k, v in arguments.items() if k in ("image", "url") and isinstance(v, str)]
    return [ctx.images.get(r) for r in refs if r in ctx.images]


async def call_tool(tool: Tool | None, name: Any, arguments: Mapping[str, Any], ctx: ToolContext) -> ToolCallRecord:
    """Run ``tool`` (None: no tool of that ``name``) on ``arguments`` within ``ctx.limits``."""
    args: JSONObject = dict(arguments)
    inputs = _inputs(args, ctx)
    start = time.perf_counter()
    error: str | None = None
    kind: str | None = None
    if tool is None:
        obs = Observation(f"{ERR}Unknown tool: {name!r}")
        error, kind = f"unknown tool {name!r}", ErrorKind.UNKNOWN_TOOL.value
        name = str(name)
    else:
        try:
            obs = await asyncio.wait_for(tool.run(args, ctx), timeout=ctx.limits.seconds)
        except ToolError as e:
            obs = Observation(e.text)
            error, kind = e.text.removeprefix(ERR), e.kind.value
        except asyncio.TimeoutError:
            obs = Observation(f"{ERR}{name} did not finish within {ctx.limits.seconds:g} s (the per-call limit).")
            error, kind = f"took longer than {ctx.limits.seconds:g} s", ErrorKind.LIMIT.value
        except ImageError as e:
            obs = Observation(f"{ERR}{name}: {e}")
            error, kind = str(e), ErrorKind.BAD_ARGUMENTS.value
    text = redact(obs.text)
    cap = ctx.limits.output_chars
    if len(text) > cap:
        text = cut_middle(text, cap, flag="the tool output cap")
    return ToolCallRecord(
        name=name,
        arguments=args,
        text=text,
        images=list(obs.images),
        inputs=inputs,
        seconds=time.perf_counter() - start,
        error=error,
        error_kind=kind,
        turn=ctx.turn,
    )
