"""The tools by name: the built-in ones and those of installed packages (entry-point group
:data:`ENTRY_POINT_GROUP`, as agents are added)::

    [project.entry-points."insight_o3.tools"]
    my_tool = "my_package.tools:MyTool"      # a Tool subclass, a Tool, or a callable returning one

A built-in tool wins over a package's of the same name. Modules are imported when a tool is first asked for, so
listing names imports nothing heavy.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from .tool import Tool

ENTRY_POINT_GROUP = "insight_o3.tools"

#: name -> "module:attribute" of the built-in tools (the ten of OpenSearch-VL)
BUILTIN: dict[str, str] = {
    "crop": "insight_o3.tools.visual:CropTool",
    "perspective_correct": "insight_o3.tools.visual:PerspectiveCorrectTool",
    "super_resolution": "insight_o3.tools.visual:SuperResolutionTool",
    "sharpen": "insight_o3.tools.visual:SharpenTool",
    "layout_parsing": "insight_o3.tools.layout:LayoutParsingTool",
    "python_interpreter": "insight_o3.tools.python_tool:PythonInterpreterTool",
    "text_search": "insight_o3.tools.retrieval:TextSearchTool",
    "web_search": "insight_o3.tools.retrieval:WebSearchTool",
    "image_search": "insight_o3.tools.retrieval:ImageSearchTool",
    "visit": "insight_o3.tools.retrieval:VisitTool",
}


class UnknownTool(KeyError):
    def __str__(self) -> str:
        return str(self.args[0])


def _instance(obj: Any, where: str) -> Tool:
    tool = obj() if callable(obj) and not isinstance(obj, Tool) else obj
    if not isinstance(tool, Tool):
        raise TypeError(f"{where} is not a Tool")
    return tool


def tool_names() -> list[str]:
    """Every tool's name: the built-in ones, then those of installed packages (not loaded)."""
    return sorted(BUILTIN) + sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name not in BUILTIN)


def get_tool(name: str) -> Tool:
    """A fresh instance of the tool called ``name``."""
    if name in BUILTIN:
        module, attr = BUILTIN[name].split(":")
        return _instance(getattr(importlib.import_module(module), attr), BUILTIN[name])
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        if ep.name == name:
            tool = _instance(ep.load(), f"entry point {ep.name!r} ({ep.value}) of {ENTRY_POINT_GROUP}")
            if tool.name != name:
                raise TypeError(f"entry point {ep.name!r} ({ep.value}) names a tool called {tool.name!r}")
            return tool
    raise UnknownTool(f"no tool {name!r}; known: {', '.join(tool_names())}")


def toolbox(names: list[str] | tuple[str, ...]) -> dict[str, Tool]:
    """The tools called ``names``, one instance each."""
    return {n: get_tool(n) for n in names}
