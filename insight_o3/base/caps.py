"""Size caps on text that comes from servers: what a record stores, what a report shows.

A server may send a reply of any size (a 10 MB reply is one request away). Records keep at most
``--max_reply_chars`` characters of each reply text (:data:`DEFAULT_MAX_REPLY_CHARS`, far above what
``max_completion_tokens: 16384`` can produce, so a real reply is never cut), the report shows at most
``report --max_text_chars`` of each text (:data:`DEFAULT_MAX_TEXT_CHARS`). A cut text keeps its beginning and its
end — an answer is at the end (``<answer>``, ``\\boxed{}``; the judge reads the last 1000 characters) — around a
marker that says how many characters were cut and by which flag: :func:`cut_middle`, the one implementation.
The run judges the full reply before its record is written; ``rejudge`` reads the stored (possibly cut) one.
"""

from __future__ import annotations

from typing import Any

from .json_types import JSONObject

#: Characters of one reply text a record keeps (``evaluate``/``evaluate_vsearch --max_reply_chars``).
DEFAULT_MAX_REPLY_CHARS = 200_000
#: Characters of one text the HTML report shows (``report --max_text_chars``).
DEFAULT_MAX_TEXT_CHARS = 20_000
#: JSON bytes one character of a reply text can take in a body: a code point outside the BMP written as a
#: surrogate-pair escape (``\\ud83d\\ude00``, 12 bytes — ``json.dumps``' default ``ensure_ascii`` does it);
#: raw UTF-8 takes at most 4 bytes, an escaped control character or BMP code point 6.
JSON_BYTES_PER_CHAR = 12
#: Texts of one choice that may each be a whole reply long: ``message.content`` and the ``reasoning_content``
#: that reasoning servers (vLLM, DeepSeek) send beside it.
TEXTS_PER_CHOICE = 2
#: Bytes of a reply body besides its texts: id, model, usage and its details, finish reasons, a server's extra
#: fields (``system_fingerprint``, ``prompt_logprobs: null`` …) — a few hundred bytes a choice; room to spare.
ENVELOPE_BYTES = 256 * 2**10
#: The body cap of a client whose records keep whole replies (``max_reply_chars`` None), and of the endpoint
#: check's models list.
MAX_REPLY_BYTES = 64 * 2**20
#: How a cut is marked (``{n}`` characters cut by ``{flag}`` at ``{limit}``).
CUT_MARKER = "\n[… {n} characters cut here ({flag} {limit}) …]\n"


def reply_body_cap(max_reply_chars: int | None, choices: int = 1) -> int:
    """Bytes of one reply body (decoded: after gzip …) a client reads, from the run's ``--max_reply_chars``: a body
    longer than this is refused while it is read (:class:`insight_o3.endpoints.client.DeadlineHttpClient`: one
    failed request), so a compressed bomb never inflates past it and ``concurrency`` bodies bound the memory.

    It is ``--max_reply_chars`` in bytes, for the worst case: ``choices`` (the request's ``n``) ×
    :data:`TEXTS_PER_CHOICE` texts × ``max_reply_chars`` characters × :data:`JSON_BYTES_PER_CHAR` +
    :data:`ENVELOPE_BYTES`. So a reply whose every text fits in what a record keeps is never refused, however the
    server encodes it; a longer one is kept cut (:func:`cut_middle`) while it fits, refused past that. Default:
    4.9 MB a choice. ``max_reply_chars`` None (records keep whole replies): :data:`MAX_REPLY_BYTES`."""
    if max_reply_chars is None:
        return MAX_REPLY_BYTES
    return max(1, choices) * TEXTS_PER_CHOICE * max_reply_chars * JSON_BYTES_PER_CHAR + ENVELOPE_BYTES


def cut_middle(text: str, limit: int | None, flag: str = "--max_reply_chars") -> str:
    """``text`` when it has at most ``limit`` characters (or ``limit`` is None), else its first and last
    ``limit // 2`` characters around :data:`CUT_MARKER`."""
    if limit is None or len(text) <= limit:
        return text
    head = limit // 2
    tail = limit - head
    marker = CUT_MARKER.format(n=len(text) - head - tail, flag=flag, limit=limit)
    return text[:head] + marker + (text[-tail:] if tail else "")


def cut_messages(
    messages: list[JSONObject] | None, limit: int | None, flag: str = "--max_reply_chars"
) -> list[JSONObject] | None:
    """A copy of a trajectory with every text of an assistant message cut to ``limit`` (:func:`cut_middle`),
    nested ``search`` trajectories (the vSearcher's) included; other messages are our own prompts, kept."""
    if messages is None or limit is None:
        return messages
    out = []
    for m in messages:
        if not isinstance(m, dict):
            out.append(m)
            continue
        if m.get("role") == "assistant":
            c = m.get("content")
            if isinstance(c, str):
                m = {**m, "content": cut_middle(c, limit, flag)}
            elif isinstance(c, list):
                m = {**m, "content": [_cut_part(p, limit, flag) for p in c]}
        search = m.get("search")
        if isinstance(search, dict) and isinstance(search.get("trajectory"), list):
            m = {**m, "search": {**search, "trajectory": cut_messages(search["trajectory"], limit, flag)}}
        out.append(m)
    return out


def _cut_part(p: Any, limit: int, flag: str) -> Any:
    if isinstance(p, dict) and isinstance(p.get("text"), str):
        return {**p, "text": cut_middle(p["text"], limit, flag)}
    return p
