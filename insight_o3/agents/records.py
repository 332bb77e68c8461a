"""Compact trajectory records: prompt texts of the protocol are stored by name, not repeated.

A 6-call InSight-o3 episode repeats the vSearcher system prompt and reminder texts dozens of
times; records replace a text part that equals one of the protocol prompts with
``{"type": "text", "prompt": NAME}`` (plus ``"fill": {...}`` for the filled vSearcher user
prompts). :func:`expand_messages` restores the full text.
"""

from __future__ import annotations

import re

from ..base.json_types import JSONObject
from ..protocol import prompts

_NAMES = [n for n in dir(prompts) if n.isupper() and n.endswith("PROMPT") and isinstance(getattr(prompts, n), str)]
_BY_TEXT = {getattr(prompts, n): n for n in _NAMES}
#: prompts stored with their placeholder values
_FILLED = {
    n: re.compile(re.escape(getattr(prompts, n)).replace(re.escape("{target}"), "(?P<target>.*)"), re.DOTALL)
    for n in ("VSEARCHER_FIRST_USER_PROMPT", "VSEARCHER_SIMPLE_USER_PROMPT")
}


def _compact_part(p: JSONObject) -> JSONObject:
    if p.get("type") != "text" or not isinstance(p.get("text"), str):
        return p
    if p["text"] in _BY_TEXT:
        return {"type": "text", "prompt": _BY_TEXT[p["text"]]}
    for name, pattern in _FILLED.items():
        m = pattern.fullmatch(p["text"])
        if m:
            return {"type": "text", "prompt": name, "fill": m.groupdict()}
    return p


def _expand_part(p: JSONObject) -> JSONObject:
    if "prompt" not in p:
        return p
    text = getattr(prompts, p["prompt"])
    return {"type": "text", "text": prompts.fill(text, **p["fill"]) if p.get("fill") else text}


def compact_messages(messages: list[JSONObject]) -> list[JSONObject]:
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            c = [_compact_part({"type": "text", "text": c})]
        elif isinstance(c, list):
            c = [_compact_part(p) for p in c]
        out.append({**m, "content": c})
    return out


def expand_messages(messages: list[JSONObject]) -> list[JSONObject]:
    """Inverse of :func:`compact_messages` (nested ``search`` trajectories are expanded too)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = [_expand_part(p) for p in c]
        m = {**m, "content": c}
        if isinstance(m.get("search"), dict) and "trajectory" in m["search"]:
            m["search"] = {**m["search"], "trajectory": expand_messages(m["search"]["trajectory"])}
        out.append(m)
    return out
