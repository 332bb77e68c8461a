"""A real OpenAI-compatible HTTP server on 127.0.0.1 whose answers a script decides.

For demos and benchmarks that need an endpoint without a key (``scripts/bench_eval.py``), and for the
tests, which talk to it through the ``openai`` SDK exactly as to a real endpoint. The script is a
callable ``script(request: dict, ctx: Call) -> Reply``; helpers below build common replies.
Faults (status codes, ``Retry-After``, delays, a body trickled byte by byte, malformed bodies, fewer
choices than ``n``) are ordinary replies, so fault injection needs no patching.

Serving is event-driven: the accept loop waits on the listening socket and a wake-up pipe, so
:meth:`ScriptedOpenAIServer.stop` returns at once (``socketserver``'s ``serve_forever`` polls its
shutdown flag every 0.5 s). ``block_after=N`` answers the first N requests and holds every later
one until the test calls :meth:`ScriptedOpenAIServer.release` — a deterministic point at which to
kill a client (kill-and-resume tests) instead of racing a slow server.

Run standalone (e.g. for CLI tests in a subprocess): ``python -m insight_o3.endpoints.scripted_server --port P
--script module:function [--record requests.jsonl]`` (``--record`` keeps every request body, e.g. to
record the requests of another program such as the original release's harness).
"""

from __future__ import annotations

import argparse
import importlib
import json
import selectors
import socket
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, TypeAlias

from ..base.json_types import JSONObject


@dataclass
class Reply:
    status: int = 200
    body: dict | str | bytes | None = None
    headers: dict = field(default_factory=dict)
    delay: float = 0.0
    trickle: float = 0.0  # > 0: send the body one byte at a time, this many seconds apart


@dataclass
class Call:
    index: int  # 0-based index of this request among all requests to this server
    path: str
    model: str | None
    n: int
    headers: dict = field(default_factory=dict)  # request headers, lower-case names


#: A script: the reply to one request (its JSON body, and the :class:`Call` it is).
Script: TypeAlias = Callable[[JSONObject, Call], Reply]


def chat(
    texts: str | list[str], finish_reason: str | list[str] = "stop", model: str = "scripted", prompt_tokens: int = 10
) -> Reply:
    """A normal chat.completions reply with one choice per text."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    reasons = [finish_reason] * len(texts) if isinstance(finish_reason, str) else list(finish_reason)
    return Reply(
        body={
            "id": "chatcmpl-scripted",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": i, "message": {"role": "assistant", "content": t}, "finish_reason": r}
                for i, (t, r) in enumerate(zip(texts, reasons))
            ],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5, "total_tokens": prompt_tokens + 5},
        }
    )


def error(status: int, message: str = "scripted error", retry_after: float | None = None) -> Reply:
    headers = {"retry-after": str(retry_after)} if retry_after is not None else {}
    return Reply(
        status=status, body={"error": {"message": message, "type": "scripted", "code": status}}, headers=headers
    )


def refuse(status: int, echo_key: bool = True) -> Script:
    """Status-code mode: a script answering every request with ``status`` (401, 403, 404, 500 …), in
    the OpenAI error format; with ``echo_key`` the message quotes the request's bearer token, as
    real servers' "Incorrect API key provided: sk-…" replies do (so tests can check redaction)."""

    def script(request: dict, call: Call) -> Reply:
        token = call.headers.get("authorization", "").split()[-1:] or [""]
        what = {
            401: "Incorrect API key provided",
            403: "Permission denied for key",
            404: f"The model `{request.get('model')}` does not exist",
        }.get(status, "scripted failure")
        return error(status, f"{what}: {token[0]}" if echo_key and status in (401, 403) else what)

    return script


def refusal(call: Call, role: str, serves: str | None, require_key: bool) -> Reply | None:
    """A real server's refusal of a request for a model it does not serve (vLLM's 404; ``serves`` None: any name is
    served) or, with ``require_key``, of one without a key (none, or ``EMPTY``: a 401); None when it is served. A
    scripted endpoint that refuses like this shows a wiring mistake (the model pointed at the judge's port) at once."""
    if require_key:
        token = call.headers.get("authorization", "").split()
        if len(token) < 2 or token[1] in ("", "EMPTY"):
            return error(401, f"missing API key: the scripted {role} wants one (any value but EMPTY)")
    if serves is not None and call.model != serves:
        return error(404, f"The model `{call.model}` does not exist. (the scripted {role} serves `{serves}`)")
    return None


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


class _Server(ThreadingHTTPServer):
    """A client that goes away mid-exchange (a cancelled request, a stopped run) is normal for this server:
    no traceback on stderr for it; any other error of a handler is printed as ``socketserver`` does. The listen
    backlog holds a burst of concurrent connections (``socketserver``'s 5 made clients retry refused connects)."""

    request_queue_size = 128

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One HTTP exchange of a :class:`ScriptedOpenAIServer` (reached as ``self.server.scripted``)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *a: Any) -> None:  # keep test output clean
        pass

    def _send(self, reply: Reply) -> None:
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
            if reply.trickle > 0:
                for i in range(len(data)):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # client gave up (timeout test)

    def do_GET(self) -> None:
        if self.path.rstrip("/").endswith("/models"):
            self._send(Reply(body={"object": "list", "data": [{"id": "scripted", "object": "model"}]}))
        else:
            self._send(error(404, "not found"))

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            req = json.loads(raw or b"{}")
        except json.JSONDecodeError:
            return self._send(error(400, "bad json"))
        owner: ScriptedOpenAIServer = self.server.scripted  # type: ignore[attr-defined]
        headers = {k.lower(): v for k, v in self.headers.items()}
        idx = owner._receive(req, headers)
        owner._hold(idx)
        call = Call(index=idx, path=self.path, model=req.get("model"), n=int(req.get("n") or 1), headers=headers)
        try:
            reply = owner.script(req, call)
        except Exception as e:  # a broken script is a 500, visible in the test
            reply = error(500, f"script raised {e!r}")
        self._send(reply)


class ScriptedOpenAIServer:
    """``with ScriptedOpenAIServer(script) as srv: srv.base_url`` (…/v1). ``srv.requests`` keeps
    every request body (``keep_bodies=False`` keeps only counts), ``srv.headers`` their headers (lower-case names).

    ``block_after=N``: requests with index >= N wait (before the script runs) until :meth:`release`;
    :meth:`wait_blocked` waits, without polling, until a given number of them are waiting."""

    def __init__(
        self,
        script: Script,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_bodies: bool = True,
        record: str | None = None,
        block_after: int | None = None,
    ):
        self.script = script
        self.block_after = block_after
        self._released = threading.Event()
        self._held = 0
        self._held_cond = threading.Condition()
        self.keep_bodies = keep_bodies
        self.record = record  # also append every request body, one JSON line each, to this file
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self._count = 0
        self._lock = threading.Lock()
        self._server = _Server((host, port), _Handler)
        self._server.daemon_threads = True
        self._server.scripted = self  # type: ignore[attr-defined]  # the handler's way back to this server
        self._wake_r, self._wake_w = socket.socketpair()
        self._thread = threading.Thread(target=self.serve, daemon=True)

    def _receive(self, req: dict, headers: dict) -> int:
        """Count (and keep, and record) one request; its index."""
        with self._lock:
            idx = self._count
            self._count += 1
            if self.keep_bodies:
                self.requests.append(req)
                self.headers.append(headers)
            if self.record:
                with open(self.record, "a", encoding="utf-8") as f:
                    f.write(json.dumps(req) + "\n")
        return idx

    def _hold(self, index: int) -> None:
        if self.block_after is None or index < self.block_after:
            return
        with self._held_cond:
            self._held += 1
            self._held_cond.notify_all()
        self._released.wait()

    def release(self) -> None:
        """Answer the held requests and every later one (``block_after`` mode)."""
        self._released.set()

    def wait_blocked(self, n: int = 1, timeout: float = 60.0) -> None:
        """Wait until at least ``n`` requests are being held (``block_after`` mode)."""
        with self._held_cond:
            if not self._held_cond.wait_for(lambda: self._held >= n, timeout):
                raise TimeoutError(f"only {self._held} of {n} requests reached the blocked server in {timeout}s")

    def serve(self) -> None:
        """Accept connections until :meth:`stop` (woken by its pipe, no polling interval)."""
        with selectors.DefaultSelector() as sel:
            sel.register(self._server, selectors.EVENT_READ)
            sel.register(self._wake_r, selectors.EVENT_READ)
            while True:
                ready = {key.fileobj for key, _ in sel.select()}
                if self._wake_r in ready:
                    return
                # accept + hand over to a handler thread (socketserver's own step of serve_forever; private,
                # hence not in the stubs)
                self._server._handle_request_noblock()  # type: ignore[attr-defined]

    @property
    def count(self) -> int:
        return self._count

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host.decode() if isinstance(host, bytes) else host}:{port}/v1"

    def start(self) -> ScriptedOpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._released.set()  # held handler threads answer (or find their client gone) and end
        if self._thread.is_alive():
            self._wake_w.send(b"x")
            self._thread.join()
        self._server.server_close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main() -> None:
    ap = argparse.ArgumentParser(allow_abbrev=False)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--script", required=True, help="module:function returning a script callable")
    ap.add_argument("--record", help="append every request body as a JSON line to this file")
    a = ap.parse_args()
    mod, fn = a.script.split(":")
    script = getattr(importlib.import_module(mod), fn)()
    srv = ScriptedOpenAIServer(script, port=a.port, keep_bodies=False, record=a.record)
    print(f"ready {srv.base_url}", flush=True)
    srv.serve()


if __name__ == "__main__":
    main()
