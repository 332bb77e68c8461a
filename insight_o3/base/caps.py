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
#: Bytes of one reply body (decoded: after gzip …) a client reads; a longer body is refused while it is read
#: (:class:`insight_o3.endpoints.client.DeadlineHttpClient`), so a compressed bomb never inflates past it. It
#: holds every choice of a reply: far above ``n`` replies of :data:`DEFAULT_MAX_REPLY_CHARS` characters each.
MAX_REPLY_BYTES = 64 * 2**20
#: How a cut is marked (``{n}`` characters cut by ``{flag}`` at ``{limit}``).
CUT_MARKER = "\n[… {n} characters cut here ({flag} {limit}) …]\n"


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
