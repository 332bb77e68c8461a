"""Compact trajectory records: prompt texts of the protocol are stored by name, not repeated.

A 6-call InSight-o3 episode repeats the vSearcher system prompt and reminder texts dozens of
times; records replace a text part that equals one of the protocol prompts with
``{"type": "text", "prompt": NAME}``. :func:`expand_messages` restores the full text.
"""
from __future__ import annotations

from .. import prompts

_NAMES = [n for n in dir(prompts) if n.isupper() and n.endswith("PROMPT") and isinstance(getattr(prompts, n), str)]
_BY_TEXT = {getattr(prompts, n): n for n in _NAMES}


def _compact_part(p: dict) -> dict:
    if p.get("type") == "text" and p.get("text") in _BY_TEXT:
        return {"type": "text", "prompt": _BY_TEXT[p["text"]]}
    return p


def compact_messages(messages: list[dict]) -> list[dict]:
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            c = [_compact_part({"type": "text", "text": c})]
        elif isinstance(c, list):
            c = [_compact_part(p) for p in c]
        out.append({**m, "content": c})
    return out


def expand_messages(messages: list[dict]) -> list[dict]:
    """Inverse of :func:`compact_messages` (nested ``search`` trajectories are expanded too)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, list):
            c = [{"type": "text", "text": getattr(prompts, p["prompt"])} if "prompt" in p else p for p in c]
        m = {**m, "content": c}
        if isinstance(m.get("search"), dict) and "trajectory" in m["search"]:
            m["search"] = {**m["search"], "trajectory": expand_messages(m["search"]["trajectory"])}
        out.append(m)
    return out
