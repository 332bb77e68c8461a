"""What a server sends is untrusted: the one place that makes its text storable and its usage countable.

Every API client (:class:`insight_o3.endpoints.client.GuardedAsyncOpenAI`) passes each parsed reply through
:func:`check_reply` before anything else sees it:

* **Text.** A JSON string may hold code points that cannot be written as UTF-8 (a lone surrogate such
  as ``"\\ud800"``, also what ``surrogatepass`` decoding makes of CESU-8 bytes). Every such string of the
  reply is *escaped*: each unencodable code point becomes its Python escape (the six characters
  ``\\ud800``), so the text stays readable, nothing else changes, and the reply is counted as escaped
  (:attr:`ReplyCheck.escaped`; the run counts them per endpoint, see :mod:`insight_o3.endpoints.guard`).
* **Usage.** ``usage.prompt_tokens``, ``completion_tokens`` and ``completion_tokens_details.reasoning_tokens``
  must be non-negative integers (absent/null counts as 0). A reply whose usage breaks that (``-1000``,
  ``"12"``, ``3.5``, ``true``) has its usage *dropped*: it is treated exactly as a reply without usage
  (:attr:`ReplyCheck.usage` ``"invalid"`` / ``"missing"``). Missing usage is **flagged, not estimated**:
  the request is counted in the record's ``usage.<role>.unreported_requests`` (see :mod:`insight_o3.endpoints.usage`),
  so token totals, costs and ``--max_tokens_total`` are known lower bounds wherever that count is not 0,
  and the run says so.

:func:`escape_strings` is also the backstop of :mod:`insight_o3.storage.record_log`: a record that still
holds such text is written escaped (and marked) instead of failing the run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

UsageState = Literal["ok", "missing", "invalid"]
#: The usage counters a reply must carry as non-negative integers (path in the usage object).
USAGE_COUNTERS = (("prompt_tokens",), ("completion_tokens",), ("completion_tokens_details", "reasoning_tokens"))


def escape_text(text: str) -> str:
    """``text`` with every code point UTF-8 cannot encode (lone surrogates) replaced by its escape ``\\udXXX``."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


def escape_strings(obj: Any) -> tuple[Any, int]:
    """``obj`` (str, list, tuple, dict, or a pydantic model such as the SDK's replies) with every string
    escaped (:func:`escape_text`); containers and models are changed in place. Returns the object and how
    many strings (keys included) were changed."""
    if isinstance(obj, str):
        clean = escape_text(obj)
        return clean, int(clean is not obj)
    if isinstance(obj, list):
        n = 0
        for i, v in enumerate(obj):
            obj[i], k = escape_strings(v)
            n += k
        return obj, n
    if isinstance(obj, tuple):
        items = [escape_strings(v) for v in obj]
        return tuple(v for v, _ in items), sum(k for _, k in items)
    if isinstance(obj, dict):
        return obj, _escape_dict(obj)
    fields = _model_fields(obj)
    n = 0
    for d in fields:
        n += _escape_dict(d)
    return obj, n


def _escape_dict(d: dict) -> int:
    n = 0
    for key in list(d):
        value, k = escape_strings(d[key])
        n += k
        new_key = escape_text(key) if isinstance(key, str) else key
        if new_key is not key:
            del d[key]
            n += 1
        d[new_key] = value
    return n


def _model_fields(obj: Any) -> list[dict]:
    """The field dicts of a pydantic model (declared fields and extras), [] for anything else."""
    if not hasattr(type(obj), "model_fields"):
        return []
    out = [vars(obj)]
    extra = getattr(obj, "__pydantic_extra__", None)
    if isinstance(extra, dict):
        out.append(extra)
    return out


def _get(obj: Any, name: str) -> Any:
    if obj is None:
        return None
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def usage_state(usage: Any) -> UsageState:
    """``"ok"``, ``"missing"`` (no usage object) or ``"invalid"`` (a counter that is not a non-negative integer)."""
    if usage is None:
        return "missing"
    for path in USAGE_COUNTERS:
        v = usage
        for name in path:
            v = _get(v, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return "invalid"
    return "ok"


@dataclass(frozen=True)
class ReplyCheck:
    """What :func:`check_reply` did to one reply: strings escaped, and the state of its usage."""

    escaped: int = 0
    usage: UsageState = "ok"


def check_reply(reply: Any) -> ReplyCheck:
    """Make one parsed reply safe to store and count, in place (see the module docstring): escape its
    text, drop usage that is not valid (``reply.usage = None``)."""
    _, escaped = escape_strings(reply)
    usage = _get(reply, "usage")
    state = usage_state(usage)
    if state == "invalid":
        if isinstance(reply, dict):
            reply["usage"] = None
        else:
            object.__setattr__(reply, "usage", None)
    return ReplyCheck(escaped, state)
