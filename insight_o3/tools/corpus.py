"""The keyless retrieval backend: a local corpus (a folder of pages and images) indexed into SQLite FTS5.

``insight-o3-index-corpus FOLDER --out corpus.sqlite`` indexes ``*.md``, ``*.txt``, ``*.html`` pages (title: a
page's first ``# heading`` or ``<title>``, else its file name) and ``*.png``, ``*.jpg``, ``*.jpeg``, ``*.webp``
images (a 64-bit difference hash of the pixels). An optional ``corpus.jsonl`` in the folder gives a file its
``url`` and ``title`` (``{"path": "pages/x.md", "url": "https://…", "title": "…"}``); without one a file's URL is
``corpus://<path>``. Queries answer in the release's formats: ``text_search`` ranks pages by BM25 over title and
text and summarises each as the release does when no summariser answers (its first 500 characters);
``image_search`` returns the nearest images by Hamming distance of their hashes as ``title``/``source`` records;
``visit`` reads a page by its URL.
"""

from __future__ import annotations

import asyncio
import html
import html.parser
import json
import os
import re
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from ..base.json_types import JSONObject
from ..imaging.images import ImageError, open_image
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
from .base import BackendFailed, ToolImage

ERR = "Tool execution error:\n"
PAGE_SUFFIXES = (".md", ".txt", ".html", ".htm")
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp")
FORMAT_VERSION = 1
#: bytes of one page read when indexing (a longer file is cut there; the index says so)
MAX_PAGE_BYTES = 8 * 2**20
_WORD = re.compile(r"\w+")


class CorpusError(ValueError):
    """A corpus folder or index that cannot be used (names the file)."""


class _TextOf(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.parts: list[str] = []
        self.title = ""
        self._in: list[str] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self._in.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data: str) -> None:
        where = self._in[-1] if self._in else ""
        if where == "title":
            self.title += data
        elif where not in ("script", "style"):
            self.parts.append(data)


def page_text(path: Path, raw: str) -> tuple[str, str]:
    """(title, text) of a page file."""
    if path.suffix.lower() in (".html", ".htm"):
        p = _TextOf()
        p.feed(raw)
        text = "\n".join(line.strip() for line in "".join(p.parts).splitlines() if line.strip())
        return html.unescape(p.title.strip()) or path.stem, text
    first = raw.lstrip().split("\n", 1)[0]
    title = first.lstrip("#").strip() if first.startswith("#") else path.stem
    return title, raw.strip()


def dhash(img: Image.Image) -> int:
    """A 64-bit difference hash: 9x8 grey thumbnail, one bit per horizontal neighbour comparison."""
    small = img.convert("L").resize((9, 8), Image.Resampling.LANCZOS)
    px = list(small.tobytes())
    bits = 0
    for row in range(8):
        for col in range(8):
            bits = (bits << 1) | int(px[row * 9 + col] > px[row * 9 + col + 1])
    return bits


@dataclass(frozen=True)
class IndexStats:
    pages: int
    images: int
    cut: int  # pages longer than MAX_PAGE_BYTES, indexed up to it
    skipped: list[str]  # files that could not be read (with why)


def _manifest(folder: Path) -> dict[str, JSONObject]:
    path = folder / "corpus.jsonl"
    out: dict[str, JSONObject] = {}
    if not path.exists():
        return out
    for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise CorpusError(f"{path}:{i}: not JSON ({e})") from None
        if not isinstance(row, dict) or not isinstance(row.get("path"), str):
            raise CorpusError(f"{path}:{i}: each line needs a 'path' (a file under the folder)")
        out[row["path"]] = row
    return out


def index_corpus(folder: str | os.PathLike, out: str | os.PathLike) -> IndexStats:
    """Index ``folder`` into a new SQLite file ``out`` (written whole, then moved into place)."""
    root = Path(folder)
    if not root.is_dir():
        raise CorpusError(f"{root}: not a folder")
    manifest = _manifest(root)
    tmp = Path(f"{out}.tmp{os.getpid()}")
    tmp.unlink(missing_ok=True)
    db = sqlite3.connect(tmp)
    pages = images = cut = 0
    skipped: list[str] = []
    try:
        db.executescript(
            """
            CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
            CREATE TABLE pages (id INTEGER PRIMARY KEY, url TEXT UNIQUE, title TEXT, path TEXT, content TEXT);
            CREATE VIRTUAL TABLE pages_fts USING fts5(title, content, content='pages', content_rowid='id');
            CREATE TABLE images (id INTEGER PRIMARY KEY, url TEXT UNIQUE, title TEXT, path TEXT, dhash INTEGER);
            """
        )
        for path in sorted(p for p in root.rglob("*") if p.is_file()):
            rel = path.relative_to(root).as_posix()
            entry = manifest.get(rel, {})
            url = str(entry.get("url") or f"corpus://{rel}")
            suffix = path.suffix.lower()
            if suffix in PAGE_SUFFIXES:
                with open(path, "rb") as fh:
                    data = fh.read(MAX_PAGE_BYTES + 1)
                cut += len(data) > MAX_PAGE_BYTES
                title, text = page_text(path, data[:MAX_PAGE_BYTES].decode("utf-8", errors="replace"))
                title = str(entry.get("title") or title)
                cur = db.execute(
                    "INSERT OR REPLACE INTO pages (url, title, path, content) VALUES (?, ?, ?, ?)",
                    (url, title, rel, text),
                )
                db.execute(
                    "INSERT INTO pages_fts (rowid, title, content) VALUES (?, ?, ?)", (cur.lastrowid, title, text)
                )
                pages += 1
            elif suffix in IMAGE_SUFFIXES:
                try:
                    h = dhash(open_image(str(path)))
                except ImageError as e:
                    skipped.append(f"{rel}: {e}")
                    continue
                title = str(entry.get("title") or path.stem.replace("_", " "))
                db.execute(
                    "INSERT OR REPLACE INTO images (url, title, path, dhash) VALUES (?, ?, ?, ?)",
                    (url, title, rel, h - (1 << 63)),  # SQLite integers are signed 64-bit
                )
                images += 1
        db.executemany(
            "INSERT INTO meta VALUES (?, ?)",
            [("format_version", str(FORMAT_VERSION)), ("folder", str(root.resolve())), ("pages", str(pages))],
        )
        db.commit()
    finally:
        db.close()
    os.replace(tmp, out)
    return IndexStats(pages, images, cut, skipped)


def fts_query(text: str) -> str:
    """An FTS5 query of the words of ``text`` (each quoted, any of them): model text never reaches FTS5 syntax."""
    words = [w for w in _WORD.findall(text.lower()) if w]
    return " OR ".join('"' + w.replace('"', "") + '"' for w in dict.fromkeys(words))


class LocalCorpus(Retrieval):
    """Answers from an index made by :func:`index_corpus` (read-only)."""

    name = "local"

    def __init__(self, index: str | os.PathLike, max_image_distance: int = 64):
        self.index = Path(index)
        if not self.index.is_file():
            raise CorpusError(f"{self.index}: corpus index not found (make one with insight-o3-index-corpus FOLDER)")
        self._conn: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        self.max_image_distance = max_image_distance
        try:
            rows = self._query("SELECT value FROM meta WHERE key='format_version'")
        except sqlite3.DatabaseError as e:
            raise CorpusError(f"{self.index}: not a corpus index ({e})") from None
        version = rows[0][0] if rows else None
        if version is None or int(version) != FORMAT_VERSION:
            raise CorpusError(f"{self.index}: corpus index format {version} (this code reads {FORMAT_VERSION})")

    def _db(self) -> sqlite3.Connection:
        with self._lock:
            if self._conn is None:
                self._conn = sqlite3.connect(f"file:{self.index}?mode=ro", uri=True, check_same_thread=False)
            return self._conn

    def _query(self, sql: str, params: tuple = ()) -> list[tuple]:
        db = self._db()
        with self._lock:
            return db.execute(sql, params).fetchall()

    def describe(self) -> JSONObject:
        n = self._query("SELECT (SELECT count(*) FROM pages), (SELECT count(*) FROM images)")[0]
        return {"backend": "local", "index": str(self.index), "pages": n[0], "images": n[1]}

    def search_pages(self, query: str, top_k: int) -> list[Page]:
        q = fts_query(query)
        if not q or top_k <= 0:
            return []
        rows = self._query(
            "SELECT p.url, p.title, p.content FROM pages_fts JOIN pages p ON p.id = pages_fts.rowid "
            "WHERE pages_fts MATCH ? ORDER BY bm25(pages_fts), p.id LIMIT ?",
            (q, min(top_k, 20)),
        )
        return [Page(i, url, title, content) for i, (url, title, content) in enumerate(rows, start=1)]

    async def text_search(self, query: str, lang: str, top_k: int, max_bytes: int) -> str:
        pages = await asyncio.to_thread(self.search_pages, query, top_k)
        if not pages:
            return NO_PAGES
        return format_passages(pages, [fallback_summary(p.content) for p in pages])

    def nearest_images(self, image: ToolImage | str, k: int = 5) -> list[JSONObject]:
        if isinstance(image, str):
            found = self._query("SELECT dhash FROM images WHERE url = ?", (image,))
            row = found[0] if found else None
            if row is None:
                raise BackendFailed(f"{ERR}image_search: the local corpus has no image at {image!r}.")
            h = row[0] + (1 << 63)
        else:
            h = dhash(open_image(image.path))
        scored = []
        for url, title, stored in self._query("SELECT url, title, dhash FROM images ORDER BY id"):
            d = bin(h ^ (stored + (1 << 63))).count("1")
            if d <= self.max_image_distance:
                scored.append((d, url, title))
        scored.sort(key=lambda t: (t[0], t[1]))
        return [{"title": title, "source": url} for _, url, title in scored[:k]]

    async def image_search(self, image: ToolImage | str, max_bytes: int) -> str:
        found = await asyncio.to_thread(self.nearest_images, image)
        return "Tool execution result:\n" + json.dumps(found, ensure_ascii=False, indent=2)

    async def visit_one(self, request: VisitRequest, max_bytes: int) -> str:
        found = await asyncio.to_thread(self._query, "SELECT content FROM pages WHERE url = ?", (request.url,))
        row = found[0] if found else None
        if row is None:
            return visit_failure(request.url, request.goal, "Unable to fetch webpage content: not in the local corpus")
        content = row[0]
        if not content:
            return visit_failure(request.url, request.goal, "Webpage content is empty")
        content = truncate_content(content)
        return visit_success(request.url, request.goal, content, "Summary service unavailable. Returning raw content.")

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None
