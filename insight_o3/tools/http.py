"""Bounded HTTP for the tools' services (Serper, Jina, a summariser, a layout-parsing API): one request, a
timeout, and at most ``max_bytes`` of the body read (a 200 MB page costs ``max_bytes``, not 200 MB). Standard
library only (``urllib``), run in a thread by the caller. Keys travel in headers only and are registered for
redaction, so an error message never carries one."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from ..base.redaction import redact, register_secret


@dataclass(frozen=True)
class Response:
    status: int
    body: bytes
    truncated: bool  # the body was longer than max_bytes (the rest was not read)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.body)


class HTTPFailed(Exception):
    """No response (connection refused, DNS, timeout); the message is redacted."""


def request(
    url: str,
    *,
    method: str = "GET",
    headers: dict[str, str] | None = None,
    json_body: Any = None,
    data: bytes | None = None,
    timeout: float = 60.0,
    max_bytes: int = 20 * 2**20,
) -> Response:
    """One HTTP request; a non-2xx status is a :class:`Response` too (its body read within ``max_bytes``)."""
    hdrs = dict(headers or {})
    for k, v in hdrs.items():
        if k.lower() in ("authorization", "x-api-key"):
            register_secret(v, v.removeprefix("Bearer ").removeprefix("token "))
    body = data
    if json_body is not None:
        body = json.dumps(json_body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    req = urllib.request.Request(url, data=body, headers=hdrs, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read(max_bytes + 1)
            return Response(resp.status, raw[:max_bytes], len(raw) > max_bytes)
    except urllib.error.HTTPError as e:
        try:
            raw = e.read(max_bytes + 1)
        except OSError:
            raw = b""
        return Response(e.code, raw[:max_bytes], len(raw) > max_bytes)
    except (urllib.error.URLError, OSError, ValueError) as e:
        raise HTTPFailed(redact(f"{type(e).__name__}: {e}")) from None
