"""The released retrieval chain (``opensearch_infer/search.py`` and ``RL/.../tools/visit_tool.py`` at c5c02a4):
``text_search`` = a Serper search, each of the top-k pages read through the Jina reader, each summarised for the
query by an OpenAI-compatible chat endpoint (a Qwen3-32B in the release; its prompt and settings as released);
``visit`` = the Jina reader, then an extractor model with the release's ``EXTRACTOR_PROMPT``. Keys and addresses
come from the environment variables the release reads (``SERPER_API_KEY``, ``SERPER_SEARCH_URL``,
``JINA_API_KEY``, ``JINA_READER_URL``, ``QWEN_API_BASE``, ``QWEN_MODEL_NAME``, ``EXTRACT_URL``,
``EXTRACT_MODEL``), each service an :class:`~insight_o3.endpoints.endpoint.Endpoint` (the key left out of every
``repr``), never written anywhere and masked in every message. The release sends ``JINA_API_KEY`` to both Jina
addresses (``JINA_READER_URL`` for search, ``READER_URL`` for ``visit``); here the visit reader borrows it under the
key-host rule of every endpoint (:func:`~insight_o3.endpoints.endpoint.borrowed_key`): only to the search reader's
host, unless ``allow_key_to_other_host`` (docs/fidelity.md).

``image_search`` needs a visual lookup the release does not publish (``search.image_search`` takes a
``visual_lookup`` callable; the paper names the Polaris Lens API), so here it answers the release's own error.
The release's HMAC gateway (``API_HOST``/``API_USER``/``API_KEY``) and its Zhipu reader are internal services and
are not implemented.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from ..base.redaction import register_secret
from ..endpoints.endpoint import Endpoint, Sourced, borrowed_key, describe
from .backend import (
    NO_PAGES,
    Page,
    Retrieval,
    VisitRequest,
    fallback_summary,
    format_passages,
    truncate_content,
    visit_failure,
    visit_success,
)
from .base import ToolImage
from .http import HTTPFailed, Response, request

log = logging.getLogger(__name__)

ERR = "Tool execution error:\n"
SERPER_SEARCH_URL = "https://google.serper.dev/search"
JINA_READER_URL = "https://r.jina.ai/"
READER_URL = "https://r.jina.ai"
QWEN_API_BASE = "http://localhost:8000/v1"
QWEN_MODEL_NAME = "Qwen/Qwen3-32B"
EXTRACT_MODEL = "Qwen3-VL-30B-A3B-Instruct"
#: the release's summariser request settings (sent as JSON with ``requests``: ``extra_body`` is a field of the body)
SUMMARY_SETTINGS: JSONObject = {
    "max_tokens": 1024,
    "temperature": 0.3,
    "top_p": 0.95,
    "extra_body": {"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}},
}
IMAGE_SEARCH_UNAVAILABLE = (
    ERR + "image_search requires a visual lookup callable. Configure one via the runner (e.g. an external lens / "
    "similar-image API) before invoking image_search."
)
EXTRACTOR_PROMPT = """Please process the following webpage content and user goal to extract relevant information:

## **Webpage Content** 
{webpage_content}

## **User Goal**
{goal}

## **Task Guidelines**
1. **Content Scanning for Rational**: Locate the **specific sections/data** directly related to the user's goal within the webpage content
2. **Key Extraction for Evidence**: Identify and extract the **most relevant information** from the content, you never miss any important information, output the **full original context** of the content as far as possible, it can be more than three paragraphs.
3. **Summary Output for Summary**: Organize into a concise paragraph with logical flow, prioritizing clarity and judge the contribution of the information to the goal.

**Final Output Requirements**
- Return a valid JSON object only (no code fences, Markdown, comments, or additional text).
- The JSON must contain exactly the keys "rational", "evidence", and "summary".
- Each key must map to a string value. Use an empty string if no content is available.
- Do not include any extra keys or explanatory sentences outside the JSON object.

Example:
{{"rational": "Explain why the information is relevant to the goal.", "evidence": "Quote or paraphrase the key supporting content from the webpage.", "summary": "Provide a concise summary that connects the evidence back to the goal."}}
"""  # noqa: W291, E501


def summary_prompt(content: str, query: str, title: str) -> str:
    """``summarize_with_qwen``'s prompt."""
    return (
        f"Based on the following webpage content, provide a concise summary "
        f'that is relevant to the query: "{query}"\n\n'
        f"Webpage Title: {title}\n"
        f"Content:\n{content[:2000]}\n\n"
        f"Please provide a focused summary (2-4 sentences) that directly "
        f"addresses the query. Focus on the most relevant information."
    )


def _from(env: Mapping[str, str], name: str, default: str | None = None) -> Sourced:
    """The value of variable ``name`` in ``env`` (an empty one is unset), else ``default``, with where it came from."""
    if env.get(name):
        return Sourced(env[name], f"${name}")
    return Sourced(default, "the release's default" if default else "none")


@dataclass(frozen=True, kw_only=True)
class WebSettings:
    """Where the chain's services are, each an :class:`Endpoint` (its key never shown nor written): ``serper``
    (search, ``X-API-KEY``), ``jina`` (the search's page reader, ``Bearer`` key), ``reader`` (``visit``'s reader;
    the Jina key when on Jina's host) and ``summarizer`` (keyless, as released)."""

    serper: Endpoint = field(default_factory=lambda: Endpoint(base_url=SERPER_SEARCH_URL))
    jina: Endpoint = field(default_factory=lambda: Endpoint(base_url=JINA_READER_URL))
    reader: Endpoint = field(default_factory=lambda: Endpoint(base_url=READER_URL))  # RL visit_tool.py: POST
    summarizer: Endpoint = field(default_factory=lambda: Endpoint(base_url=QWEN_API_BASE))
    summarizer_model: str = QWEN_MODEL_NAME
    extract_urls: tuple[str, ...] = ()
    extract_model: str = EXTRACT_MODEL
    reader_attempts: int = 5  # run_with_retries_async's attempts for the visit reader
    retry_delay: float = 1.0

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, *, allow_key_to_other_host: bool = False) -> WebSettings:
        """The release's variables (``os.environ`` unless ``env``); each address and key source said in the log.
        Raises :class:`~insight_o3.endpoints.endpoint.KeyHostError` when ``READER_URL`` is on another host than
        ``JINA_READER_URL`` and ``allow_key_to_other_host`` is not set (the Jina key would go there)."""
        e = os.environ if env is None else env
        serper_url, serper_key = _from(e, "SERPER_SEARCH_URL", SERPER_SEARCH_URL), _from(e, "SERPER_API_KEY")
        jina_url, jina_key = _from(e, "JINA_READER_URL", JINA_READER_URL), _from(e, "JINA_API_KEY")
        reader_url = _from(e, "READER_URL", READER_URL)
        reader_key = borrowed_key(
            "visit reader", reader_url, Sourced(None, "none"), "Jina reader", jina_url, jina_key,
            allow_key_to_other_host,
        )  # fmt: skip
        register_secret(serper_key.value, jina_key.value)
        for role, url, key in (
            ("web search", serper_url, serper_key),
            ("page reader", jina_url, jina_key),
            ("visit reader", reader_url, reader_key),
        ):
            log.info("endpoints: %s", describe(role, url, key))
        return cls(
            serper=Endpoint(base_url=serper_url.value, api_key=serper_key.value),
            jina=Endpoint(base_url=jina_url.value, api_key=jina_key.value),
            reader=Endpoint(base_url=reader_url.value, api_key=reader_key.value),
            summarizer=Endpoint(base_url=e.get("QWEN_API_BASE") or QWEN_API_BASE),
            summarizer_model=e.get("QWEN_MODEL_NAME") or QWEN_MODEL_NAME,
            extract_urls=tuple(u.strip() for u in e.get("EXTRACT_URL", "").split(",") if u.strip()),
            extract_model=e.get("EXTRACT_MODEL") or EXTRACT_MODEL,
        )

    def public(self) -> JSONObject:
        """The run card's view: addresses and models, whether each key is set, never a key."""
        return {
            "serper_url": self.serper.base_url,
            "serper_key_set": bool(self.serper.api_key),
            "jina_url": self.jina.base_url,
            "jina_key_set": bool(self.jina.api_key),
            "reader_url": self.reader.base_url,
            "summarizer_base": self.summarizer.base_url,
            "summarizer_model": self.summarizer_model,
            "extract_urls": list(self.extract_urls),
            "extract_model": self.extract_model,
        }


class WebChain(Retrieval):
    """The released chain over HTTP (blocking calls run in threads; each body read within the page cap)."""

    name = "web"

    def __init__(self, settings: WebSettings):
        self.s = settings

    def describe(self) -> JSONObject:
        return {"backend": "web", **self.s.public()}

    # ------------------------------------------------------------------ text_search
    def _search(self, query: str, lang: str, top_k: int, max_bytes: int) -> list[JSONObject]:
        if not self.s.serper.api_key:
            raise RuntimeError(
                "Serper is not configured. Either set API_HOST/API_USER/API_KEY "
                "for the gateway, or set SERPER_API_KEY for direct access."
            )
        r = request(
            self.s.serper.base_url or SERPER_SEARCH_URL,
            method="POST",
            headers={"X-API-KEY": self.s.serper.api_key, "Content-Type": "application/json"},
            json_body={"q": query, "hl": lang, "num": min(top_k, 20)},
            timeout=60,
            max_bytes=max_bytes,
        )
        if not 200 <= r.status < 300:
            raise RuntimeError(f"{r.status} Error for url: {self.s.serper.base_url}")
        data = r.json()
        organic = data.get("organic", []) if isinstance(data, dict) else []
        return [o for o in organic or [] if isinstance(o, dict)]

    def _read(self, url: str, max_bytes: int) -> str:
        headers = {"Accept": "application/json"}
        if self.s.jina.api_key:
            headers["Authorization"] = f"Bearer {self.s.jina.api_key}"
        r = request(
            (self.s.jina.base_url or JINA_READER_URL).rstrip("/") + "/" + url,
            headers=headers,
            timeout=30,
            max_bytes=max_bytes,
        )
        if r.status != 200:
            return ""
        try:
            data = r.json()
        except ValueError:
            return r.text
        if isinstance(data, dict):
            if "data" in data and isinstance(data["data"], dict):
                return str(data["data"].get("content", ""))
            return str(data.get("content", ""))
        return ""

    def _summarize(self, content: str, query: str, title: str, max_bytes: int) -> str:
        payload = {
            "model": self.s.summarizer_model,
            "messages": [{"role": "user", "content": summary_prompt(content, query, title)}],
            **SUMMARY_SETTINGS,
        }
        try:
            r = request(
                f"{(self.s.summarizer.base_url or QWEN_API_BASE).rstrip('/')}/chat/completions",
                method="POST",
                headers={"Content-Type": "application/json"},
                json_body=payload,
                timeout=60,
                max_bytes=max_bytes,
            )
            if r.status == 200:
                choices = r.json().get("choices", [])
                if choices:
                    summary = choices[0].get("message", {}).get("content", "")
                    if summary:
                        return str(summary).strip()
        except (HTTPFailed, ValueError, AttributeError):
            pass
        return fallback_summary(content)

    def text_search_sync(self, query: str, lang: str, top_k: int, max_bytes: int) -> str:
        try:
            organic = self._search(query, lang, top_k, max_bytes)
        except (RuntimeError, HTTPFailed, ValueError) as exc:
            return f"{ERR}Text search failed: {exc}"
        if not organic:
            return NO_PAGES
        pages = []
        for idx, item in enumerate(organic[:top_k], start=1):
            url, title = str(item.get("link", "")), str(item.get("title", ""))
            content = str(item.get("snippet", ""))
            if url:
                try:
                    fetched = self._read(url, max_bytes)
                    if fetched:
                        content = fetched
                except HTTPFailed:
                    pass
            pages.append(Page(idx, url, title, content))
        return format_passages(pages, [self._summarize(p.content, query, p.title, max_bytes) for p in pages])

    async def text_search(self, query: str, lang: str, top_k: int, max_bytes: int) -> str:
        return await asyncio.to_thread(self.text_search_sync, query, lang, top_k, max_bytes)

    async def image_search(self, image: ToolImage | str, max_bytes: int) -> str:
        return IMAGE_SEARCH_UNAVAILABLE

    # ------------------------------------------------------------------ visit
    def _reader(self, url: str, max_bytes: int) -> Response:
        last: Exception | None = None
        for attempt in range(max(1, self.s.reader_attempts)):
            try:
                return request(
                    self.s.reader.base_url or READER_URL,
                    method="POST",
                    headers={"Authorization": self.s.reader.api_key} if self.s.reader.api_key else {},
                    data=f"url={url}".encode(),
                    timeout=60,
                    max_bytes=max_bytes,
                )
            except HTTPFailed as e:
                last = e
                if attempt + 1 < self.s.reader_attempts:
                    time.sleep(self.s.retry_delay)
        assert last is not None
        raise last

    def _extract(self, content: str, goal: str, max_bytes: int) -> JSONObject | None:
        if not self.s.extract_urls:
            return None
        url = self.s.extract_urls[0]
        if not url.rstrip("/").endswith("/v1/chat/completions"):
            url = f"{url.rstrip('/')}/v1/chat/completions"
        payload = {
            "model": self.s.extract_model,
            "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": EXTRACTOR_PROMPT.format(webpage_content=content, goal=goal or "N/A")},
            ],
            "max_tokens": 16384,
        }
        try:
            r = request(url, method="POST", json_body=payload, timeout=60, max_bytes=max_bytes)
            if r.status != 200:
                return None
            result = r.json()
        except (HTTPFailed, ValueError):
            return None
        raw = None
        if isinstance(result, dict):
            choices = result.get("choices")
            if isinstance(choices, list) and choices and isinstance(choices[0], dict):
                msg = choices[0].get("message")
                if isinstance(msg, dict) and isinstance(msg.get("content"), str) and msg["content"].strip():
                    raw = msg["content"]
        if raw is None:
            return None
        candidate = raw.strip()
        if candidate.startswith("`"):
            candidate = candidate.strip("`")
        try:
            parsed = json.loads(candidate)
        except json.JSONDecodeError:
            return {"rational": "", "evidence": candidate, "summary": candidate}
        return parsed if isinstance(parsed, dict) else None

    def visit_sync(self, v: VisitRequest, max_bytes: int) -> str:
        try:
            r = self._reader(v.url, max_bytes)
            if r.status != 200:
                raise RuntimeError(f"Reader API returned HTTP {r.status}")
        except (HTTPFailed, RuntimeError) as exc:
            return visit_failure(v.url, v.goal, f"Unable to fetch webpage content: {exc}")
        content = r.text
        if not content:
            return visit_failure(v.url, v.goal, "Webpage content is empty")
        content = truncate_content(content)
        summary = self._extract(content, v.goal, max_bytes)
        if summary is None:
            return visit_success(v.url, v.goal, content, "Summary service unavailable. Returning raw content.")
        evidence = str(summary.get("evidence") or content)
        return visit_success(v.url, v.goal, evidence, str(summary.get("summary") or ""))

    async def visit_one(self, request: VisitRequest, max_bytes: int) -> str:
        return await asyncio.to_thread(self.visit_sync, request, max_bytes)
