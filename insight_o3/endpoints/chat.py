"""One chat request and what its reply says: the only code that reads a chat completion's choices.

:func:`chat_once` sends one request and returns its first choice as a :class:`Completion`; :func:`chat_choices`
returns every choice (a request with ``n``). The keyword arguments go into the request as they are (nothing is
added: the request bodies the golden payload tests pin stay the same). A reply without a usable first choice
(no ``choices``, or a first choice without a ``message``) raises :class:`NoChoice`: a
:class:`~insight_o3.base.untrusted.MalformedReply`, so a ``ValueError`` of
:data:`~insight_o3.endpoints.errors.EXPECTED_ERRORS` — the item it was for fails with that reason, and the judge
asks again as for any malformed judge reply. Every caller (the agents' drivers, the tool loop, the single-model
solver, the judge, the region describer, the O3-Bench builder steps) reads replies here, under one policy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..base.json_types import JSONObject
from ..base.untrusted import MalformedReply

__all__ = ["Completion", "NoChoice", "chat_choices", "chat_once", "completions_of", "usage_of"]


class NoChoice(MalformedReply):
    """A chat reply without a usable first choice: no ``choices``, or a first choice without a ``message``."""


@dataclass(frozen=True)
class Completion:
    """One choice of a chat reply: its text (``""`` when the server sent no content), its finish reason, and the
    reply's token usage as the server reported it (``None`` values dropped; None when it reported none).
    Every choice of one reply carries the same usage: the server reports it per request."""

    text: str
    finish_reason: str | None
    usage: JSONObject | None

    def token_counts(self) -> dict[str, int]:
        """The usage's top-level integer counters (``prompt_tokens``, ``completion_tokens``, ...), nested
        details left out."""
        return {k: v for k, v in (self.usage or {}).items() if isinstance(v, int) and not isinstance(v, bool)}


def usage_of(reply: Any) -> JSONObject | None:
    """A reply's ``usage`` as a dict without ``None`` values, or None when it has none."""
    u = getattr(reply, "usage", None)
    if u is None:
        return None
    if isinstance(u, dict):
        return {k: v for k, v in u.items() if v is not None}
    dumped: JSONObject = u.model_dump(exclude_none=True)
    return dumped


def completions_of(reply: Any) -> list[Completion]:
    """Every choice of a parsed reply that has a message, in order (a choice without one is left out)."""
    usage = usage_of(reply)
    out = []
    for choice in list(getattr(reply, "choices", None) or []):
        message = getattr(choice, "message", None)
        if message is not None:
            out.append(Completion(message.content or "", choice.finish_reason, usage))
    return out


async def chat_choices(client: Any, model: str, messages: Sequence[JSONObject], **request: Any) -> list[Completion]:
    """One chat request (``request``: the body's other fields, e.g. ``n``, ``temperature``); its choices that
    have a message (:func:`completions_of`). API errors raise as the SDK raises them (after its retries)."""
    reply = await client.chat.completions.create(model=model, messages=messages, **request)
    return completions_of(reply)


async def chat_once(client: Any, model: str, messages: Sequence[JSONObject], **request: Any) -> Completion:
    """One chat request; its first choice. Raises :class:`NoChoice` when the reply has none with a message."""
    reply = await client.chat.completions.create(model=model, messages=messages, **request)
    choices = list(getattr(reply, "choices", None) or [])
    if not choices:
        raise NoChoice("the server returned no choices")
    first = choices[0]
    if getattr(first, "message", None) is None:
        raise NoChoice("the server returned a choice without a message")
    return Completion(first.message.content or "", first.finish_reason, usage_of(reply))
