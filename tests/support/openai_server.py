"""A real OpenAI-compatible HTTP server on 127.0.0.1 whose answers a test scripts.

Tests talk to it through the ``openai`` SDK exactly as to a real endpoint. The script is a
callable ``script(request: dict, ctx: Call) -> Reply``; helpers below build common replies.
Faults (status codes, ``Retry-After``, delays, malformed bodies, fewer choices than ``n``) are
ordinary replies, so fault-injection tests need no patching.

Run standalone (for CLI tests in a subprocess): ``python -m tests.support.openai_server --port P
--script module:function [--record requests.jsonl]`` (``--record`` keeps every request body, e.g. to
record the requests of another program such as the original release's harness).
"""
from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable


@dataclass
class Reply:
    status: int = 200
    body: dict | str | bytes | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0


@dataclass
class Call:
    index: int            # 0-based index of this request among all requests to this server
    path: str
    model: str | None
    n: int
    headers: dict = field(default_factory=dict)   # request headers, lower-case names


def chat(texts: str | list[str], finish_reason: str | list[str] = "stop", model: str = "scripted",
         prompt_tokens: int = 10) -> Reply:
    """A normal chat.completions reply with one choice per text."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    reasons = [finish_reason] * len(texts) if isinstance(finish_reason, str) else list(finish_reason)
    return Reply(body={
        "id": "chatcmpl-scripted", "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": r}
                    for i, (t, r) in enumerate(zip(texts, reasons))],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5},
    })


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return Reply(status=status, body={"error": {"message": message, "type": "scripted", "code": status}},
                 headers=headers)


def refuse(status: int, echo_key: bool = True):
    """Status-code mode: a script answering every request with ``status`` (401, 403, 404, 500 …), in
    the OpenAI error format; with ``echo_key`` the message quotes the request's bearer token, as
    real servers' "Incorrect API key provided: sk-…" replies do (so tests can check redaction)."""
    def script(request: dict, call: Call) -> Reply:
        token = call.headers.get("authorization", "").split()[-1:] or [""]
        what = {401: "Incorrect API key provided", 403: "Permission denied for key",
                404: f"The model `{request.get('model')}` does not exist"}.get(status, "scripted failure")
        return error(status, f"{what}: {token[0]}" if echo_key and status in (401, 403) else what)
    return script


def malformed() -> Reply:
    return Reply(status=200, body=b"{this is not json", headers={"content-type": "application/json"})


def request_text(request: dict) -> str:
    """All text parts of all messages of a chat request, joined (for scripts that key on content)."""
    out = []
    for m in request.get("messages", []):
        c = m.get("content")
        if isinstance(c, str):
            out.append(c)
        elif isinstance(c, list):
            out.extend(p.get("text", "") for p in c if isinstance(p, dict))
    return "\n".join(out)


def last_user_text(request: dict) -> str:
    for m in reversed(request.get("messages", [])):
        if m.get("role") == "user":
            c = m.get("content")
            return c if isinstance(c, str) else "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
    return ""


def user_message_text(request: dict, which: int = -1) -> str:
    """The exact text of the ``which``-th user message (default: the last): its text parts
    concatenated as a chat template renders them, image parts left out."""
    users = [m for m in request.get("messages", []) if m.get("role") == "user"]
    c = users[which].get("content") if users else ""
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c if isinstance(p, dict) and p.get("type") == "text")


class ScriptedOpenAIServer:
    """``with ScriptedOpenAIServer(script) as srv: srv.base_url`` (…/v1). ``srv.requests`` keeps
    every request body (``keep_bodies=False`` keeps only counts), ``srv.headers`` their headers."""

    def __init__(self, script: Callable[[dict, Call], Reply], host: str = "127.0.0.1", port: int = 0,
                 keep_bodies: bool = True, record: str | None = None):
        self.script = script
        self.keep_bodies = keep_bodies
        self.record = record  # also append every request body, one JSON line each, to this file
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._count = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):  # keep test output clean
                pass

            def _send(self, reply: Reply):
                if reply.delay:
                    time.sleep(reply.delay)
                body = reply.body
                if isinstance(body, (dict, list)):
                    data = json.dumps(body).encode()
                elif isinstance(body, str):
                    data = body.encode()
                else:
                    data = body or b""
                try:
                    self.send_response(reply.status)
                    hdrs = {"content-type": "application/json", **reply.headers}
                    for k, v in hdrs.items():
                        self.send_header(k, v)
                    self.send_header("content-length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # client gave up (timeout test)

            def do_GET(self):
                if self.path.rstrip("/").endswith("/models"):
                    self._send(Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
                else:
                    self._send(error(404, "not found"))

            def do_POST(self):
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length)
                try:
                    req = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    return self._send(error(400, "bad json"))
                with outer._lock:
                    idx = outer._count
                    outer._count += 1
                    if outer.keep_bodies:
                        outer.requests.append(req)
                        outer.headers.append(dict(self.headers))
                    if outer.record:
                        with open(outer.record, "a", encoding="utf-8") as f:
                            f.write(json.dumps(req) + "\n")
                call = Call(index=idx, path=self.path, model=req.get("model"), n=int(req.get("n") or 1),
                            headers={k.lower(): v for k, v in self.headers.items()})
                try:
                    reply = outer.script(req, call)
                except Exception as e:  # a broken script is a 500, visible in the test
                    reply = error(500, f"script raised {e!r}")
                self._send(reply)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def count(self) -> int:
        return self._count

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "ScriptedOpenAIServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--script", required=True, help="module:function returning a script callable")
    ap.add_argument("--record", help="append every request body as a JSON line to this file")
    a = ap.parse_args()
    mod, fn = a.script.split(":")
    script = getattr(importlib.import_module(mod), fn)()
    srv = ScriptedOpenAIServer(script, port=a.port, keep_bodies=False, record=a.record)
    print(f"ready {srv.base_url}", flush=True)
    srv._server.serve_forever()


if __name__ == "__main__":
    main()
