"""The retrieval tools — ``text_search``, ``web_search``, ``image_search``, ``visit`` — over a backend chosen by
the run: the released chain (:mod:`.web`: Serper + Jina + a summariser, keys from the environment), a local
corpus indexed into SQLite FTS5 (:mod:`.corpus`, the keyless default) or a record/replay store (:mod:`.store`).
Every backend answers in the release's observation format, so the model cannot tell them apart by form.

Arguments are read as OpenSearch-VL reads them (``opensearch_infer/tools.py`` ``execute_tool``: ``q`` or
``query``, ``hl`` or ``lang``, ``top_k``; ``web_search`` is ``text_search``; ``image_search`` takes ``url`` — an
image reference or a URL — or ``image``). ``visit`` is the RL rollout's tool
(``RL/.../tools/visit_tool.py``: ``url`` one or a list, at most 5, and ``goal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..base.json_types import JSONObject
from .backend import Retrieval, VisitRequest, normalize_url
from .base import BadArguments, Observation, ToolImage, Unavailable
from .tool import Tool, ToolContext

ERR = "Tool execution error:\n"
VISIT_SEPARATOR = "\n\n=======\n\n"
VISIT_MAX_URLS = 5


def _backend(ctx: ToolContext) -> Retrieval:
    if ctx.retrieval is None:
        raise Unavailable(f"{ERR}no retrieval backend is configured for this run.")
    return ctx.retrieval


class TextSearchTool(Tool):
    """``text_search`` (also ``local_search``): the release's Serper + Jina + summariser, or the run's backend."""

    name = "text_search"
    schema: JSONObject = {
        "name": "text_search",
        "description": "Search for text documents and summarise the top pages for the query.",
        "parameters": {
            "type": "object",
            "properties": {
                "q": {"type": "string"},
                "query": {"type": "string", "description": "Alias for 'q'."},
                "hl": {"type": "string", "default": "en"},
                "lang": {"type": "string", "description": "Alias for 'hl'.", "default": "en"},
                "top_k": {"type": "integer", "default": 5},
            },
            "required": [],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        query = arguments.get("q") or arguments.get("query") or ""
        if not query:
            raise BadArguments(f"{ERR}'q' is required for text_search.")
        lang = arguments.get("hl", "en") or arguments.get("lang", "en")
        try:
            top_k = int(arguments.get("top_k", 5))
        except (TypeError, ValueError, OverflowError) as e:
            raise BadArguments(f"{ERR}invalid argument 'top_k' for text_search: {e}") from None
        if not isinstance(query, str) or not isinstance(lang, str):
            raise BadArguments(f"{ERR}'q' and 'hl' of text_search must be strings.")
        return Observation(await _backend(ctx).text_search(query, lang, top_k, ctx.limits.page_bytes))


class WebSearchTool(TextSearchTool):
    """``web_search``: the release runs ``text_search`` for it (same backbone, same arguments)."""

    name = "web_search"
    schema: JSONObject = {
        "name": "web_search",
        "description": "Perform a web search query to retrieve up-to-date information.",
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "string"}, "hl": {"type": "string", "default": "en"}},
            "required": ["q"],
        },
    }


class ImageSearchTool(Tool):
    """``image_search`` (also ``local_image_search``, ``lens_scan``): an image reference or a URL."""

    name = "image_search"
    schema: JSONObject = {
        "name": "image_search",
        "description": "Visually identify the contents of an image (an image reference or a URL).",
        "parameters": {
            "type": "object",
            "properties": {"url": {"type": "string", "description": "Image reference (e.g., 'img_1') or a URL."}},
            "required": ["url"],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        ref, url_param = arguments.get("image", ""), arguments.get("url", "")
        target: ToolImage | str
        if url_param:
            if isinstance(url_param, str) and url_param in ctx.images:
                target = ctx.images.get(url_param)
            else:
                target = str(url_param)
        elif ref:
            if not isinstance(ref, str) or ref not in ctx.images:
                raise BadArguments(f"{ERR}Image reference '{ref}' not found. Available: {list(ctx.images)}")
            target = ctx.images.get(ref)
        else:
            raise BadArguments(f"{ERR}image_search requires either a 'url' or an image reference.")
        return Observation(await _backend(ctx).image_search(target, ctx.limits.page_bytes))


class VisitTool(Tool):
    """``visit``: each URL (at most 5) read and summarised for ``goal``, answers joined by ``=======``."""

    name = "visit"
    schema: JSONObject = {
        "name": "visit",
        "description": "Visit webpage(s) and return the summary of the content.",
        "parameters": {
            "type": "object",
            "properties": {
                "url": {
                    "type": ["string", "array"],
                    "items": {"type": "string"},
                    "minItems": 1,
                    "description": "The URL(s) of the webpage(s) to visit. Can be a single URL or an array of URLs.",
                },
                "goal": {"type": "string", "description": "The goal of the visit for webpage(s)."},
            },
            "required": ["url", "goal"],
        },
    }

    async def run(self, arguments: Mapping[str, Any], ctx: ToolContext) -> Observation:
        url, goal = arguments.get("url", ""), arguments.get("goal", "")
        urls = [url] if isinstance(url, str) else url
        if not isinstance(urls, list) or not all(isinstance(u, str) for u in urls):
            raise BadArguments(f"{ERR}'url' of visit must be a string or a list of strings.")
        if not urls:
            return Observation("[Visit] No valid URL provided")
        backend = _backend(ctx)
        goal = goal if isinstance(goal, str) else str(goal)
        out = [
            await backend.visit_one(VisitRequest(normalize_url(u), goal), ctx.limits.page_bytes)
            for u in urls[:VISIT_MAX_URLS]
        ]
        return Observation(VISIT_SEPARATOR.join(out))
