"""Conversation records that hold image *references*, never pixels.

A message is a plain dict (JSON-ready) in the chat format, except that image parts are
``{"type": "image", "image": ImageRef.to_dict()}`` (and, for a view made by a harness's own pipeline of operations
on the original file, ``"view"``: :meth:`~insight_o3.imaging.view_ops.Resize.to_json`). :func:`to_openai` turns such messages into
OpenAI ``image_url`` parts by encoding each reference through an :class:`ImageStore` (cached), so
the same records drive API calls, are written to result files, and let notebooks redraw crops.
Extra keys on a message (e.g. ``"search"``) are kept in records and dropped for the API.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..base.json_types import JSONObject
from ..imaging.images import EncodedImage, ImageRef
from ..imaging.view_ops import Resize

API_KEYS = ("role", "content")


def text_part(text: str) -> JSONObject:
    return {"type": "text", "text": text}


def image_part(ref: ImageRef, view: Resize | None = None) -> JSONObject:
    """An image part; ``view``: how its pixels are made from the decoded original file (a harness whose views its
    own pipeline of crops and resizes decides), kept in the record as :meth:`Resize.to_json`."""
    part: JSONObject = {"type": "image", "image": ref.to_dict()}
    if view is not None:
        part["view"] = view.to_json()
    return part


def part_view(part: dict) -> Resize | None:
    """The rendering an image part carries (:func:`image_part`'s ``view``), or None for a plain reference."""
    view = part.get("view")
    return None if view is None else Resize.from_json(view)


def message(role: str, *parts: JSONObject | str, **extra: Any) -> JSONObject:
    content = [text_part(p) if isinstance(p, str) else p for p in parts]
    return {"role": role, "content": content, **extra}


def image_refs(messages: list[dict]) -> list[ImageRef]:
    out: list[ImageRef] = []
    for m in messages:
        if isinstance(m.get("content"), list):
            out.extend(ImageRef.from_dict(p["image"]) for p in m["content"] if p.get("type") == "image")
    return out


def message_text(m: dict) -> str:
    c = m.get("content")
    if isinstance(c, str):
        return c
    return "".join(p.get("text", "") for p in c or [] if p.get("type") == "text")


def to_openai(
    messages: list[dict],
    encode: Callable[[ImageRef], EncodedImage],
    image_url_extra: dict | None = None,
    join_text: bool = True,
    encode_part: Callable[[dict], EncodedImage] | None = None,
) -> list[JSONObject]:
    """Chat messages for the API; ``encode`` maps an ImageRef to its (cached) encoded view (``encode_part``, when
    given, maps the whole image part instead: a part whose pixels its own keys decide, such as a crop ``pipeline``).

    The original's shapes: user content is always a list of parts in the stored order (its
    ``query_api`` builds ``[image_url, text]`` even for text-only turns), adjacent text parts are sent
    as one (chat templates concatenate them anyway); system and assistant messages with text only are
    plain strings. ``join_text=False`` keeps adjacent text parts apart (a harness that sends them so,
    e.g. DeepEyes's tool response)."""
    out = []
    for m in messages:
        c = m.get("content")
        if isinstance(c, str):
            out.append({"role": m["role"], "content": c if m["role"] != "user" else [text_part(c)]})
            continue
        parts: list[dict] = []
        for p in c or []:
            if p.get("type") == "image":
                enc = encode_part(p) if encode_part is not None else encode(ImageRef.from_dict(p["image"]))
                parts.append({"type": "image_url", "image_url": {"url": enc.data_url, **(image_url_extra or {})}})
            elif join_text and parts and parts[-1]["type"] == "text":
                parts[-1] = text_part(parts[-1]["text"] + p["text"])
            else:
                parts.append(text_part(p["text"]))
        if m["role"] != "user" and all(p["type"] == "text" for p in parts):
            out.append({"role": m["role"], "content": "".join(p["text"] for p in parts)})
        else:
            out.append({"role": m["role"], "content": parts})
    return out
