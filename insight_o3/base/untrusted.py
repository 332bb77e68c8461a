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

The reply is also *typed* at the same boundary, so no caller checks anything:

* **Shape.** A chat completion must have a list of choice objects, each message's ``content`` a string, null,
  or a list of content parts (the OpenAI schema): the parts' text is joined into one string; content of any
  other type (a number, a dict, a part without text), a choice that is not an object, a ``finish_reason`` that
  is not a string, or a reply nested deeper than :data:`MAX_JSON_DEPTH` raise :class:`MalformedReply` (a
  ``ValueError``: one failed record, retried on the rerun like any failed request).
* **Keys.** Every string is passed through :func:`insight_o3.base.redaction.redact`: a reply that echoes a key of
  this process ("debug: auth=sk-…") is stored, shown, exported and forwarded (to the judge) with ``***`` instead.
* **Usage.** A counter beyond :data:`MAX_TOKENS_PER_CHOICE` × the reply's choices (no model has such a context
  window), or a usage that is not an object, is invalid usage exactly like a negative one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from .json_types import JSONObject
from .redaction import redact
from .workers import WorkerDeadline, WorkerDied, call_with_deadline

UsageState = Literal["ok", "missing", "invalid"]
#: The usage counters a reply must carry as non-negative integers (path in the usage object).
USAGE_COUNTERS = (("prompt_tokens",), ("completion_tokens",), ("completion_tokens_details", "reasoning_tokens"))
#: Tokens one choice can plausibly count (prompt or completion): above every model's context window.
MAX_TOKENS_PER_CHOICE = 10_000_000
#: Nesting a reply (or any JSON value of a user or a server) may have; deeper is malformed.
MAX_JSON_DEPTH = 100


#: Digits an integer of untrusted JSON may have (a 400-digit coordinate overflows every float conversion).
MAX_INT_DIGITS = 30


class UntrustedJSONError(json.JSONDecodeError):
    """JSON that parses but is beyond the bounds of :func:`loads` (so every ``except json.JSONDecodeError`` of a
    reader treats it as the malformed JSON it is for us)."""

    def __init__(self, msg: str):
        super().__init__(msg, "", 0)

    def __str__(self) -> str:
        return self.msg


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise UntrustedJSONError(f"an integer of {len(text.lstrip('-'))} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def loads(text: str | bytes, *, max_depth: int = MAX_JSON_DEPTH, max_chars: int | None = None) -> Any:
    """``json.loads`` for JSON of a user or a server, bounded: at most ``max_chars`` characters, ``max_depth``
    levels of nesting, integers of :data:`MAX_INT_DIGITS` digits, and only finite numbers (``NaN``,
    ``Infinity``, ``1e999`` are refused). Raises :class:`UntrustedJSONError` (a ``json.JSONDecodeError``) naming
    the field (``layout_infos.1.bbox[2]``) where one is at fault."""
    if max_chars is not None and len(text) > max_chars:
        raise UntrustedJSONError(f"longer than {max_chars} characters")
    try:
        value = json.loads(text, parse_int=_bounded_int)
    except RecursionError:
        raise UntrustedJSONError(f"nested more than {max_depth} levels deep") from None
    problem = json_problem(value, max_depth)
    if problem is not None:
        raise UntrustedJSONError(problem)
    return value


#: Characters of text :func:`loads_repaired` tries to repair (a model's JSON reply is a few kilobytes; the repair
#: library is pure Python, so a longer text is not repaired).
MAX_REPAIR_CHARS = 200_000


@dataclass(frozen=True)
class JSONRepair:
    """What :func:`loads_repaired` repaired: the strict parser's first error (``Expecting property name enclosed
    in double quotes at line 9 column 1``: a trailing comma) and what the repair library logged, with its name
    and version."""

    error: str
    actions: tuple[str, ...]
    library: str

    def to_dict(self) -> JSONObject:
        return {"error": self.error, "actions": list(self.actions), "library": self.library}


def loads_repaired(
    text: str, *, max_depth: int = MAX_JSON_DEPTH, max_repair_chars: int = MAX_REPAIR_CHARS
) -> tuple[Any, JSONRepair | None]:
    """:func:`loads`, and for text that is not valid JSON (trailing commas, comments, single quotes, a missing
    comma, unquoted keys, Python literals) the value the ``json-repair`` library makes of it, with what was
    repaired (None when nothing was). The repaired value is held to the same bounds as strict JSON (it is
    serialised and read back through :func:`loads`); JSON beyond the bounds (a bomb) is never repaired, and
    neither is text longer than ``max_repair_chars``: both raise :class:`UntrustedJSONError`, as does text the
    library cannot repair into anything bounded. The library is pure Python and quadratic on some damage: code that
    must stay responsive (an event loop) calls :func:`loads_repaired_in_worker`."""
    strict = _strict_or_repairable(text, max_depth, max_repair_chars)
    if not isinstance(strict, str):
        return strict
    return _repair(text, strict, max_depth)


def _strict_or_repairable(text: str, max_depth: int, max_repair_chars: int) -> tuple[Any, None] | str:
    """``(value, None)`` for valid JSON within the bounds; else the strict parser's error, for text to repair.
    Raises :class:`UntrustedJSONError` for JSON beyond the bounds and for text too long to repair."""
    try:
        return loads(text, max_depth=max_depth), None
    except UntrustedJSONError:
        raise
    except json.JSONDecodeError as e:
        error = f"{e.msg} at line {e.lineno} column {e.colno}"
    if len(text) > max_repair_chars:
        raise UntrustedJSONError(f"{error}; not repaired: longer than {max_repair_chars} characters")
    return error


def _repair(text: str, error: str, max_depth: int) -> tuple[Any, JSONRepair]:
    import json_repair  # here: only a damaged reply needs it

    try:
        value, log = json_repair.repair_json(str(text), return_objects=True, logging=True)
        canonical = json.dumps(value, allow_nan=True)
    except Exception as e:  # noqa: BLE001 - whatever the library raises (RecursionError for a bomb) is a failure
        raise UntrustedJSONError(f"{error}; cannot be repaired ({type(e).__name__})") from None
    try:
        value = loads(canonical, max_depth=max_depth)
    except UntrustedJSONError as e:
        raise UntrustedJSONError(f"{error}; the repaired value is out of bounds: {e}") from None
    actions = tuple(str(x.get("text", x)) if isinstance(x, dict) else str(x) for x in log or ())
    version = _dist_version("json-repair")
    return value, JSONRepair(error, actions, f"json-repair {version}")


#: Seconds a repair may take in its worker: a model's damaged reply is repaired in milliseconds (0.2 s for 200,000
#: characters of trailing commas), but the library is quadratic on some damage (a 200,000-character reply: an hour).
REPAIR_DEADLINE_S = 10.0


def _repair_outcome(text: str, error: str, max_depth: int) -> tuple[Any, JSONRepair | None, str | None]:
    """:func:`_repair` in a worker process: its value and repair, or the message of its failure (an exception of
    ours does not cross the process boundary as itself)."""
    try:
        value, repair = _repair(text, error, max_depth)
    except UntrustedJSONError as e:
        return None, None, str(e)
    return value, repair, None


async def loads_repaired_in_worker(
    text: str,
    *,
    max_depth: int = MAX_JSON_DEPTH,
    max_repair_chars: int = MAX_REPAIR_CHARS,
    deadline_s: float = REPAIR_DEADLINE_S,
) -> tuple[Any, JSONRepair | None]:
    """:func:`loads_repaired` that never blocks the event loop on a repair: strict JSON is read here (linear, in C),
    a repair runs in a worker process (:func:`insight_o3.base.workers.call_with_deadline`) killed after
    ``deadline_s`` seconds or when the awaiting task is cancelled; a repair that does not finish in time raises
    :class:`UntrustedJSONError` like one that fails."""
    strict = _strict_or_repairable(text, max_depth, max_repair_chars)
    if not isinstance(strict, str):
        return strict
    try:
        value, repair, failure = await call_with_deadline(
            _repair_outcome, text, strict, max_depth, deadline_s=deadline_s, preload=[__name__]
        )
    except WorkerDeadline as e:
        raise UntrustedJSONError(f"{strict}; not repaired: the repair {e}") from None
    except WorkerDied as e:
        raise UntrustedJSONError(f"{strict}; not repaired: {e}") from None
    if failure is not None:
        raise UntrustedJSONError(failure)
    return value, repair


def _dist_version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"


def json_problem(value: Any, max_depth: int = MAX_JSON_DEPTH) -> str | None:
    """Why a parsed JSON value is out of bounds (nested past ``max_depth``, a number that is not finite), naming
    the field; None when it is within them. Iterative: any depth is safe to check."""
    stack: list[tuple[Any, int, tuple]] = [(value, 0, ())]
    while stack:
        obj, depth, path = stack.pop()
        if isinstance(obj, float):
            if not math.isfinite(obj):
                return f"field '{_path_text(path)}' is {obj} (not a finite number)"
        elif isinstance(obj, (dict, list)):
            if depth >= max_depth:
                return f"nested more than {max_depth} levels deep (at '{_path_text(path)}')"
            items = obj.items() if isinstance(obj, dict) else enumerate(obj)
            stack.extend((v, depth + 1, (*path, k)) for k, v in items)
    return None


def _path_text(path: tuple) -> str:
    out = ""
    for k in path:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out or "(top level)"


class MalformedReply(ValueError):
    """A reply that is not a usable answer (see the module docstring): one failed request, with this reason."""


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
    return map_strings(obj, escape_text)


def map_strings(obj: Any, fn: Callable[[str], str], max_depth: int | None = None) -> tuple[Any, int]:
    """:func:`escape_strings` with ``fn`` in place of :func:`escape_text` (``fn`` returns its argument itself
    when nothing changes). With ``max_depth``, a value nested deeper raises :class:`MalformedReply`."""
    counter = [0]
    return _walk(obj, fn, counter, 0, max_depth), counter[0]


def _walk(obj: Any, fn: Callable[[str], str], counter: list[int], depth: int, max_depth: int | None) -> Any:
    if isinstance(obj, str):
        clean = fn(obj)
        if clean is not obj:
            counter[0] += 1
        return clean
    if obj is None or isinstance(obj, (int, float)):
        return obj
    if max_depth is not None and depth > max_depth:
        raise MalformedReply(f"the reply is nested more than {max_depth} levels deep")
    depth += 1
    if isinstance(obj, list):
        for i, v in enumerate(obj):
            obj[i] = _walk(v, fn, counter, depth, max_depth)
        return obj
    if isinstance(obj, tuple):
        return tuple(_walk(v, fn, counter, depth, max_depth) for v in obj)
    if isinstance(obj, dict):
        _walk_dict(obj, fn, counter, depth, max_depth)
        return obj
    for d in _model_fields(obj):
        _walk_dict(d, fn, counter, depth, max_depth)
    return obj


def _walk_dict(d: dict, fn: Callable[[str], str], counter: list[int], depth: int, max_depth: int | None) -> None:
    for key in list(d):
        value = _walk(d[key], fn, counter, depth, max_depth)
        new_key = fn(key) if isinstance(key, str) else key
        if new_key is not key:
            del d[key]
            counter[0] += 1
        d[new_key] = value


def _model_fields(obj: Any) -> list[dict[str, Any]]:
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


def usage_state(usage: Any, choices: int = 1) -> UsageState:
    """``"ok"``, ``"missing"`` (no usage object) or ``"invalid"`` (not an object, or a counter that is not a
    non-negative integer of at most :data:`MAX_TOKENS_PER_CHOICE` × ``choices``)."""
    if usage is None:
        return "missing"
    if isinstance(usage, (str, int, float, list, tuple)):
        return "invalid"
    ceiling = MAX_TOKENS_PER_CHOICE * max(1, choices)
    for path in USAGE_COUNTERS:
        v = usage
        for name in path:
            v = _get(v, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= ceiling):
            return "invalid"
    return "ok"


@dataclass(frozen=True)
class ReplyCheck:
    """What :func:`check_reply` did to one reply: strings escaped, strings with a key masked, the state of its
    usage."""

    escaped: int = 0
    usage: UsageState = "ok"
    redacted: int = 0


def check_reply(reply: Any, chat: bool = False) -> ReplyCheck:
    """Make one parsed reply safe to store, show and count, in place (see the module docstring): escape its
    text, mask known keys in it, drop usage that is not valid (``reply.usage = None``). With ``chat`` (a chat
    completion) also type it (:func:`type_chat_reply`). Raises :class:`MalformedReply`."""
    tally = [0, 0]

    def clean(text: str) -> str:
        escaped = escape_text(text)
        tally[0] += escaped is not text
        masked = redact(escaped)
        if masked != escaped:
            tally[1] += 1
            return masked
        return escaped

    try:
        map_strings(reply, clean, MAX_JSON_DEPTH)
        n_choices = type_chat_reply(reply) if chat else 1
    except RecursionError:  # pragma: no cover - MAX_JSON_DEPTH is far below the interpreter's limit
        raise MalformedReply("the reply is nested too deeply") from None
    usage = _get(reply, "usage")
    state = usage_state(usage, n_choices)
    if state == "invalid":
        if isinstance(reply, dict):
            reply["usage"] = None
        else:
            object.__setattr__(reply, "usage", None)
    return ReplyCheck(tally[0], state, tally[1])


def type_chat_reply(reply: Any) -> int:
    """Check that ``reply`` (a parsed chat completion) has the types its readers rely on, making content parts one
    string; the number of choices. Raises :class:`MalformedReply` (see the module docstring)."""
    if isinstance(reply, (str, int, float, list, tuple)) or reply is None:
        raise MalformedReply(f"the reply is a JSON {type(reply).__name__}, not a chat completion object")
    choices = _get(reply, "choices")
    if choices is None:
        return 0  # an error object, or no choices: the readers say so
    if not isinstance(choices, list):
        raise MalformedReply(f"'choices' is a {type(choices).__name__}, not a list")
    for i, choice in enumerate(choices):
        if choice is None or isinstance(choice, (str, int, float, list)):
            raise MalformedReply(f"choice {i} is a {type(choice).__name__}, not an object")
        finish = _get(choice, "finish_reason")
        if finish is not None and not isinstance(finish, str):
            raise MalformedReply(f"choice {i}: finish_reason is a {type(finish).__name__}, not a string")
        message = _get(choice, "message")
        if message is None:
            continue
        if isinstance(message, (str, int, float, list)):
            raise MalformedReply(f"choice {i}: message is a {type(message).__name__}, not an object")
        content = _get(message, "content")
        if content is None or isinstance(content, str):
            continue
        text = content_text(content)
        if text is None:
            raise MalformedReply(
                f"choice {i}: message content is a {type(content).__name__}, not text or a list of text parts"
            )
        if isinstance(message, dict):
            message["content"] = text
        else:
            object.__setattr__(message, "content", text)
    return len(choices)


def content_text(content: Any) -> str | None:
    """The text of a message's ``content``: a string as it is; a list of content parts (``{"type": "text",
    "text": ...}``; a part of another type, e.g. an image or a refusal without text, adds nothing) joined;
    None for anything else (a number, a dict, a part that is not an object or whose text is not a string)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return None
    out = []
    for part in content:
        if isinstance(part, str):
            out.append(part)
            continue
        if not isinstance(part, dict):
            return None
        text = part.get("text")
        if part.get("type", "text") == "text" and not isinstance(text, str):
            return None
        if isinstance(text, str):
            out.append(text)
    return "".join(out)
