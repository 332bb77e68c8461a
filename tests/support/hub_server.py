"""A local stand-in for the Hugging Face Hub's file API on 127.0.0.1, for the download tests (no network).

It serves dataset repositories held in memory, each at one or more commits, the way ``huggingface_hub`` asks for
them: ``GET /api/datasets/<repo>/revision/<rev>`` (the commit of a branch), ``GET /api/datasets/<repo>/tree/<rev>``
(``?recursive``: every file with its size, git blob id and, for an LFS file, its sha256), and ``HEAD``/``GET
/datasets/<repo>/resolve/<rev>/<path>`` (``X-Repo-Commit``, ``ETag`` = the LFS sha256 or the git blob id, byte
ranges for a resumed download). Point ``HF_ENDPOINT`` at :attr:`HubServer.url`.

Test hooks: :attr:`HubServer.requests` logs every request (method, path, Range header); ``corrupt`` paths are
served with other bytes than the tree lists; ``stall`` paths send their first N bytes and then hold the connection
until :meth:`HubServer.release` (a download killed mid-file).
"""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

#: Files from this size on (and every image, table and archive) are LFS files, as the Hub's default .gitattributes.
LFS_FROM = 1024
LFS_SUFFIXES = (".jpg", ".jpeg", ".png", ".parquet", ".zip", ".tsv")


def git_blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class Repo:
    """A dataset repository: commit -> {path: bytes}; ``main`` points to the last commit added."""

    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)
    main: str = ""

    def add(self, files: dict[str, bytes], commit: str | None = None) -> str:
        sha = commit or hashlib.sha1(json.dumps(sorted(files)).encode() + str(len(self.commits)).encode()).hexdigest()
        self.commits[sha] = dict(files)
        self.main = sha
        return sha

    def at(self, rev: str) -> tuple[str, dict[str, bytes]] | None:
        sha = self.main if rev == "main" else rev
        return (sha, self.commits[sha]) if sha in self.commits else None


def is_lfs(path: str, data: bytes) -> bool:
    return len(data) >= LFS_FROM or path.lower().endswith(LFS_SUFFIXES)


class HubServer:
    """The stand-in; ``with HubServer() as hub: hub.repo("org/name").add({...})``."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str, str | None]] = []
        self.corrupt: set[str] = set()
        self.stall: dict[str, int] = {}
        self._released = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def repo(self, repo_id: str) -> Repo:
        return self.repos.setdefault(repo_id, Repo())

    def release(self) -> None:
        self._released.set()

    def start(self) -> HubServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> HubServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self._serve(body=False)

            def do_GET(self) -> None:
                self._serve(body=True)

            def _json(self, obj: object, status: int = 200) -> None:
                data = json.dumps(obj).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _missing(self, what: str) -> None:
                self.send_response(404)
                self.send_header("X-Error-Code", "EntryNotFound" if "file" in what else "RevisionNotFound")
                self.send_header("X-Error-Message", what)
                data = json.dumps({"error": what}).encode()
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)

            def _serve(self, body: bool) -> None:
                path = unquote(urlsplit(self.path).path)
                hub.requests.append((self.command, path, self.headers.get("Range")))
                if path.startswith("/api/datasets/"):
                    rest = path[len("/api/datasets/") :]
                    for verb in ("/revision/", "/tree/"):
                        if verb in rest:
                            repo_id, _, tail = rest.partition(verb)
                            return self._api(repo_id, verb.strip("/"), tail)
                    return self._missing(f"no such API route {path}")
                if path.startswith("/datasets/") and "/resolve/" in path:
                    repo_id, _, tail = path[len("/datasets/") :].partition("/resolve/")
                    rev, _, file_path = tail.partition("/")
                    return self._file(repo_id, rev, file_path, body)
                return self._missing(f"no such route {path}")

            def _api(self, repo_id: str, verb: str, tail: str) -> None:
                rev, _, sub = tail.partition("/")
                found = hub.repos.get(repo_id, Repo()).at(rev)
                if found is None:
                    return self._missing(f"revision {rev} of {repo_id} not found")
                sha, files = found
                if verb == "revision":
                    return self._json(
                        {"id": repo_id, "sha": sha, "siblings": [{"rfilename": p} for p in sorted(files)]}
                    )
                entries = []
                for p, data in sorted(files.items()):
                    if sub and not p.startswith(sub.rstrip("/") + "/"):
                        continue
                    entry: dict[str, object] = {"type": "file", "oid": git_blob_id(data), "size": len(data), "path": p}
                    if is_lfs(p, data):
                        entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                    entries.append(entry)
                return self._json(entries)

            def _file(self, repo_id: str, rev: str, file_path: str, body: bool) -> None:
                found = hub.repos.get(repo_id, Repo()).at(rev)
                if found is None or file_path not in found[1]:
                    return self._missing(f"file {file_path} not found at {rev}")
                sha, files = found
                data = files[file_path]
                etag = hashlib.sha256(data).hexdigest() if is_lfs(file_path, data) else git_blob_id(data)
                if file_path in hub.corrupt:
                    data = bytes(b ^ 0xFF for b in data)
                start = 0
                rng = self.headers.get("Range")
                if rng and rng.startswith("bytes="):
                    start = int(rng[len("bytes=") :].split("-")[0] or 0)
                self.send_response(206 if start else 200)
                self.send_header("X-Repo-Commit", sha)
                self.send_header("ETag", f'"{etag}"')
                if is_lfs(file_path, files[file_path]):
                    self.send_header("X-Linked-Etag", f'"{etag}"')
                    self.send_header("X-Linked-Size", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(len(data) - start))
                if start:
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                self.end_headers()
                if not body:
                    return
                cut = hub.stall.get(file_path)
                if cut is not None and not hub._released.is_set() and start < cut:
                    self.wfile.write(data[start:cut])
                    self.wfile.flush()
                    hub._released.wait(600)
                    self.close_connection = True
                    return
                self.wfile.write(data[start:])

        return Handler
