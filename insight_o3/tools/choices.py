"""The tool settings' choices that commands offer as flags (``--tool_set``, ``--retrieval``, ``--layout_backend``),
apart from :mod:`insight_o3.tools.setup` so that building a parser loads no tool (a ``--help`` starts in a blink)."""

from __future__ import annotations

__all__ = ["LAYOUT_BACKENDS", "RETRIEVALS", "TOOL_SETS"]

RETRIEVALS = ("local", "web", "replay", "none")
#: the tools of each tool set (the agent's schema offers the same)
TOOL_SETS: dict[str, tuple[str, ...]] = {
    "release": (
        "crop",
        "layout_parsing",
        "web_search",
        "image_search",
        "text_search",
        "perspective_correct",
        "super_resolution",
        "sharpen",
    ),
}
TOOL_SETS["all"] = (*TOOL_SETS["release"], "visit", "python_interpreter")
#: ``layout_parsing``'s backends (:mod:`insight_o3.tools.layout`)
LAYOUT_BACKENDS = ("tesseract", "api")
