"""A run's tools: which tools, their limits and settings, the retrieval backend, and where made images go.
:meth:`Toolkit.episode` gives one episode its :class:`~insight_o3.tools.base.ToolContext` (its ``img_n`` book
starting from the sample's image); :meth:`Toolkit.call` runs a call by name (see :mod:`.calls`)."""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from .backend import Retrieval
from .base import ToolLimits
from .calls import ToolCallRecord, call_tool
from .images import ImageBook
from .registry import get_tool
from .tool import Tool, ToolContext


@dataclass
class Toolkit:
    tools: dict[str, Tool]
    images_dir: Path | None = None
    limits: ToolLimits = field(default_factory=ToolLimits)
    retrieval: Retrieval | None = None
    settings: Mapping[str, Any] = field(default_factory=dict)
    _tmp: tempfile.TemporaryDirectory | None = None

    @classmethod
    def of(cls, names: list[str] | tuple[str, ...], **kwargs: Any) -> Toolkit:
        return cls({n: get_tool(n) for n in names}, **kwargs)

    def _folder(self) -> Path:
        if self.images_dir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="insight_o3_tool_images_")
            self.images_dir = Path(self._tmp.name)
        return self.images_dir

    def episode(self, image_path: str, case_idx: int = 0) -> ToolContext:
        book = ImageBook(self._folder(), image_path, max_pixels=self.limits.max_pixels)
        return ToolContext(
            images=book, limits=self.limits, retrieval=self.retrieval, case_idx=case_idx, settings=self.settings
        )

    async def call(self, tool: str | None, name: Any, arguments: JSONObject, ctx: ToolContext) -> ToolCallRecord:
        found = self.tools.get(tool) if tool else None
        return await call_tool(found, tool if found is not None else name, arguments, ctx)

    def describe(self) -> JSONObject:
        return {
            "tools": sorted(self.tools),
            "limits": {k: getattr(self.limits, k) for k in ("seconds", "output_chars", "max_pixels", "page_bytes")},
            "retrieval": self.retrieval.describe() if self.retrieval is not None else None,
        }

    def close(self) -> None:
        if self.retrieval is not None:
            self.retrieval.close()
        if self._tmp is not None:
            self._tmp.cleanup()
