"""A retrieval backend (:class:`Retrieval`: ``text_search``, ``image_search``, ``visit``) and the release's
observation formats every backend answers in (``search.text_search``'s passages, ``VisitTool``'s pages)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from urllib.parse import urlparse

from ..base.json_types import JSONObject
from .base import ToolImage

ERR = "Tool execution error:\n"
#: text_search / visit formats of the release
PASSAGE_SEPARATOR = "\n\n" + "=" * 60 + "\n\n"
NO_PAGES = "Tool execution result:\nNo relevant web pages found for the query."
VISIT_SEPARATOR = "\n\n=======\n\n"
VISIT_MAX_URLS = 5
VISIT_MAX_CONTENT_CHARS = 120_000


@dataclass(frozen=True)
class Page:
    """A search hit: its 1-based index, URL, title and the content the summary is made from."""

    index: int
    url: str
    title: str
    content: str


@dataclass(frozen=True)
class VisitRequest:
    url: str
    goal: str


def fallback_summary(content: str) -> str:
    """``summarize_with_qwen``'s answer when no summariser answers: the first 500 characters (``...`` if cut)."""
    return content[:500] + ("..." if len(content) > 500 else "")


def format_passages(pages: list[Page], summaries: list[str]) -> str:
    """``search.text_search``'s observation."""
    formatted = [
        f"[Passage {p.index}]\nTitle: {p.title}\nURL: {p.url}\nSummary:\n{s}" for p, s in zip(pages, summaries)
    ]
    return f"Tool execution result:\n{PASSAGE_SEPARATOR.join(formatted)}"


def normalize_url(url: str) -> str:
    """``VisitTool._normalize_url``: ``https://`` before a URL without a scheme."""
    return url if urlparse(url).scheme else f"https://{url}"


def truncate_content(content: str) -> str:
    if len(content) <= VISIT_MAX_CONTENT_CHARS:
        return content
    return content[:VISIT_MAX_CONTENT_CHARS] + "\n[Content truncated...]"


def visit_failure(url: str, goal: str, reason: str) -> str:
    """``VisitTool._build_failure_message``."""
    out = f"The useful information in {url} for user goal {goal or 'N/A'} as follows: \n\n"
    out += "Evidence in page: \n" + reason + "\n\n"
    return (
        out + "Summary: \n" + "Unable to retrieve webpage content. Please check the link or try again later." + "\n\n"
    )


def visit_success(url: str, goal: str, evidence: str, summary: str) -> str:
    """``VisitTool._format_success``."""
    out = f"The useful information in {url} for user goal {goal or 'N/A'} as follows: \n\n"
    out += "Evidence in page: \n" + evidence + "\n\n"
    return out + "Summary: \n" + (summary or "No summary generated") + "\n\n"


class Retrieval(ABC):
    """A retrieval backend. Each method returns the observation text (the release's format); a failure the model
    should read is a :class:`~insight_o3.tools.base.ToolError` (its text the release's)."""

    name = "retrieval"

    def describe(self) -> JSONObject:
        """What the run card says about the backend (never a key)."""
        return {"backend": self.name}

    @abstractmethod
    async def text_search(self, query: str, lang: str, top_k: int, max_bytes: int) -> str: ...

    @abstractmethod
    async def image_search(self, image: ToolImage | str, max_bytes: int) -> str: ...

    @abstractmethod
    async def visit_one(self, request: VisitRequest, max_bytes: int) -> str: ...

    def close(self) -> None:
        return None
