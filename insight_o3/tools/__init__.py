"""The tool layer the agents share: one :class:`~insight_o3.tools.base.Tool` interface, a registry that packages
extend by entry point, per-call limits, a record of every call, and the tools of OpenSearch-VL (image operations,
layout parsing, a sandboxed Python interpreter, and retrieval that runs without keys and replays)."""

__all__ = [
    "backend",
    "base",
    "calls",
    "choices",
    "corpus",
    "http",
    "images",
    "layout",
    "python_tool",
    "registry",
    "retrieval",
    "sandbox",
    "sandbox_child",
    "setup",
    "store",
    "tool",
    "toolkit",
    "visual",
    "web",
]
