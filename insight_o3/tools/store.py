"""Retrieval that replays: every search and visit result is kept content-addressed with the run, and a later
run can be answered from it alone.

A store is a folder: ``objects/<aa>/<sha256>`` holds each observation's bytes (named by their sha256) and
``index.jsonl`` (a crash-safe :class:`~insight_o3.storage.record_log.RecordLog`) maps each request's key — the
sha256 of the request as canonical JSON: the tool, its normalised arguments, an image's sha256 — to its object.
:class:`Recording` wraps any backend and writes what it answers; :class:`Replay` answers only from a store and
never opens a connection, so ``--retrieval replay`` runs with the network unreachable and gives the recorded
observations byte for byte. A request the store lacks is a clear tool error, never a network call.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

from ..base.json_types import JSONObject
from ..storage.atomic import atomic_writer
from ..storage.record_log import RecordLog
from .backend import Retrieval, VisitRequest
from .base import BackendFailed, ErrorKind, ToolError, ToolImage, error_of

ERR = "Tool execution error:\n"


def request_key(request: JSONObject) -> str:
    return hashlib.sha256(json.dumps(request, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def image_digest(image: ToolImage) -> str:
    return hashlib.sha256(Path(image.path).read_bytes()).hexdigest()


class RetrievalStore:
    """The store in ``folder`` (created on the first write)."""

    def __init__(self, folder: str | Path):
        self.folder = Path(folder)
        self._log: RecordLog | None = None
        self._lock = threading.Lock()

    def _index(self) -> RecordLog:
        with self._lock:
            if self._log is None:
                self.folder.mkdir(parents=True, exist_ok=True)
                self._log = RecordLog.open(str(self.folder / "index.jsonl"))
            return self._log

    def _object(self, digest: str) -> Path:
        return self.folder / "objects" / digest[:2] / digest

    def get(self, request: JSONObject) -> tuple[str, str | None] | None:
        """The observation recorded for ``request`` and its error kind (None: a result), or None."""
        entry = self._index().records.get(request_key(request))
        if entry is None:
            return None
        data = self._object(entry["object"]).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["object"]:
            raise BackendFailed(f"{ERR}retrieval store {self.folder}: object {entry['object']} is corrupt")
        return data.decode("utf-8"), entry.get("error_kind")

    def put(self, request: JSONObject, observation: str, backend: str, error_kind: str | None = None) -> None:
        data = observation.encode("utf-8")
        digest = hashlib.sha256(data).hexdigest()
        path = self._object(digest)
        index = self._index()
        with self._lock:
            if not path.exists():
                path.parent.mkdir(parents=True, exist_ok=True)
                with atomic_writer(path, "wb") as fh:
                    fh.write(data)
        key = request_key(request)
        if key not in index.records or index.records[key].get("object") != digest:
            entry = {"sample_key": key, "request": request, "object": digest, "backend": backend}
            index.append({**entry, "error_kind": error_kind} if error_kind else entry)

    def __len__(self) -> int:
        return len(self._index().records)

    def close(self) -> None:
        with self._lock:
            if self._log is not None:
                self._log.close()
                self._log = None


def _text_request(query: str, lang: str, top_k: int) -> JSONObject:
    return {"tool": "text_search", "q": query, "hl": lang, "top_k": top_k}


def _image_request(image: ToolImage | str) -> JSONObject:
    if isinstance(image, ToolImage):
        return {"tool": "image_search", "image_sha256": image_digest(image)}
    return {"tool": "image_search", "url": image}


def _visit_request(v: VisitRequest) -> JSONObject:
    return {"tool": "visit", "url": v.url, "goal": v.goal}


class Recording(Retrieval):
    """``inner``'s answers, each also written to ``store`` (its successes and its error texts alike: a replay
    gives what the model saw)."""

    def __init__(self, inner: Retrieval, store: RetrievalStore):
        self.inner, self.store = inner, store
        self.name = inner.name

    def describe(self) -> JSONObject:
        return {**self.inner.describe(), "recorded_to": str(self.store.folder)}

    async def _keep(self, request: JSONObject, answer: Awaitable[str]) -> str:
        try:
            out = await answer
        except ToolError as e:
            self.store.put(request, e.text, self.name, e.kind.value)
            raise
        self.store.put(request, out, self.name)
        return out

    async def text_search(self, query: str, lang: str, top_k: int, max_bytes: int) -> str:
        return await self._keep(
            _text_request(query, lang, top_k), self.inner.text_search(query, lang, top_k, max_bytes)
        )

    async def image_search(self, image: ToolImage | str, max_bytes: int) -> str:
        return await self._keep(_image_request(image), self.inner.image_search(image, max_bytes))

    async def visit_one(self, request: VisitRequest, max_bytes: int) -> str:
        return await self._keep(_visit_request(request), self.inner.visit_one(request, max_bytes))


class Replay(Retrieval):
    """Answers from ``source`` only (and copies each answer into ``record_to``, so a replayed run replays too)."""

    name = "replay"

    def __init__(self, source: RetrievalStore, record_to: RetrievalStore | None = None):
        self.source, self.record_to = source, record_to

    def describe(self) -> JSONObject:
        return {"backend": "replay", "from": str(self.source.folder), "entries": len(self.source)}

    def _answer(self, request: JSONObject) -> str:
        found = self.source.get(request)
        if found is None:
            raise BackendFailed(
                f"{ERR}retrieval replay: {self.source.folder} holds no result for this {request['tool']} request "
                f"({json.dumps({k: v for k, v in request.items() if k != 'tool'}, ensure_ascii=False)[:300]})."
            )
        out, kind = found
        if self.record_to is not None:
            self.record_to.put(request, out, "replay", kind)
        if kind is not None:
            raise error_of(ErrorKind(kind), out)
        return out

    async def text_search(self, query: str, lang: str, top_k: int, max_bytes: int) -> str:
        return self._answer(_text_request(query, lang, top_k))

    async def image_search(self, image: ToolImage | str, max_bytes: int) -> str:
        return self._answer(_image_request(image))

    async def visit_one(self, request: VisitRequest, max_bytes: int) -> str:
        return self._answer(_visit_request(request))


def describe_store(folder: str | Path) -> dict[str, Any]:
    s = RetrievalStore(folder)
    try:
        return {"folder": str(folder), "entries": len(s)}
    finally:
        s.close()
