"""The typed rows that pass between the steps of an O3-Bench build (see :mod:`.workspace` for the files).

Every ``from_dict`` validates and raises :class:`BuildFileError` naming the file, line and field, so a
hand-edited or truncated workspace file is a clear error, never a traceback from deep inside a step.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..base.json_types import JSONObject
from ..storage.jsonl import iter_jsonl


class BuildFileError(ValueError):
    """A workspace or input file that cannot be used; the message names the file, line and field."""


def read_text_file(path: str | os.PathLike, what: str) -> tuple[str, bytes]:
    """A user's text file (a prompt, a rules file) as text and as its bytes (for its sha256); :class:`BuildFileError`
    naming ``what`` and the file when it cannot be read or is not UTF-8."""
    try:
        raw = Path(path).read_bytes()
    except OSError as e:
        raise BuildFileError(f"{what} {path}: cannot read the file ({e.strerror or e})") from None
    try:
        return raw.decode("utf-8"), raw
    except UnicodeDecodeError as e:
        raise BuildFileError(f"{what} {path}: not UTF-8 text ({e.reason} at byte {e.start})") from None


def _need(obj: dict, name: str, kind: type | tuple[type, ...], where: str) -> Any:
    v = obj.get(name)
    if v is None or isinstance(v, bool) or not isinstance(v, kind):
        got = "missing" if name not in obj else f"{type(v).__name__} {v!r}"[:80]
        raise BuildFileError(f"{where}: field '{name}' must be {_kind_name(kind)}, got {got}")
    return v


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = [k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,))]
    return " or ".join(
        {"str": "a string", "int": "an integer", "float": "a number", "list": "a list"}.get(n, n) for n in names
    )


def _box(v: Any, where: str, name: str = "bbox") -> tuple[float, float, float, float]:
    try:
        x1, y1, x2, y2 = (float(c) for c in v)
    except (TypeError, ValueError):
        raise BuildFileError(f"{where}: field '{name}' must be 4 numbers [x1, y1, x2, y2], got {v!r}") from None
    if not (x2 > x1 and y2 > y1):
        raise BuildFileError(f"{where}: field '{name}' is empty or inverted: {v!r}")
    return (x1, y1, x2, y2)


@dataclass(frozen=True)
class SourceLayout:
    """One layout box of an image: ``layout_id`` (1-based, unique per image), ``bbox`` in original pixels."""

    layout_id: int
    bbox: tuple[float, float, float, float]
    label: str
    score: float | None = None

    def to_dict(self) -> JSONObject:
        return {
            "layout_id": self.layout_id,
            "bbox": [round(v, 2) for v in self.bbox],
            "label": self.label,
            "score": None if self.score is None else round(self.score, 4),
        }

    @classmethod
    def from_dict(cls, obj: Any, where: str) -> SourceLayout:
        if not isinstance(obj, dict):
            raise BuildFileError(f"{where}: a layout must be an object")
        lid = _need(obj, "layout_id", int, where)
        score = obj.get("score")
        if score is not None and (isinstance(score, bool) or not isinstance(score, (int, float))):
            raise BuildFileError(f"{where}: field 'score' must be a number or null")
        return cls(lid, _box(obj.get("bbox"), where), str(obj.get("label", "")), score)


@dataclass
class SourceImage:
    """A candidate image with its layouts. ``key`` is ``"<subset>/<file stem>"``, unique in the workspace;
    ``image`` is the absolute path of the original file."""

    key: str
    subset: str
    image: str
    width: int
    height: int
    layouts: list[SourceLayout]
    layout_file: str = ""

    def layout(self, layout_id: int) -> SourceLayout | None:
        return next((lay for lay in self.layouts if lay.layout_id == layout_id), None)

    @property
    def layout_ids(self) -> set[int]:
        return {lay.layout_id for lay in self.layouts}

    def layout_infos(self) -> dict[str, JSONObject]:
        """O3-Bench's ``layout_infos`` field: ``{"<id>": {"layout_id", "bbox", "label"}}``."""
        return {
            str(lay.layout_id): {
                "layout_id": lay.layout_id,
                "bbox": [round(v, 2) for v in lay.bbox],
                "label": lay.label,
            }
            for lay in self.layouts
        }

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["layouts"] = [lay.to_dict() for lay in self.layouts]
        return d

    @classmethod
    def from_dict(cls, obj: dict, where: str) -> SourceImage:
        raw = _need(obj, "layouts", list, where)
        layouts = [SourceLayout.from_dict(x, f"{where}: layouts[{i}]") for i, x in enumerate(raw)]
        ids = [lay.layout_id for lay in layouts]
        if len(set(ids)) != len(ids):
            raise BuildFileError(f"{where}: field 'layouts': layout ids repeat")
        return cls(
            key=_need(obj, "key", str, where),
            subset=_need(obj, "subset", str, where),
            image=_need(obj, "image", str, where),
            width=_need(obj, "width", int, where),
            height=_need(obj, "height", int, where),
            layouts=layouts,
            layout_file=str(obj.get("layout_file") or ""),
        )


@dataclass
class BenchItem:
    """A multiple-choice item on its way to the benchmark.

    ``item_id`` is ``"<image key>#q<k>"`` (k: position in the synthesizer's array); ``options`` is the text
    block ``"A. …\\nB. …\\n…\\nF. No right choice"``; ``target_layouts`` are the layout ids the explanation
    cites (sorted). ``origin`` says where the current text comes from ("synthesized" or "edited")."""

    item_id: str
    image_key: str
    subset: str
    question: str
    options: str
    answer: str
    explanation: str
    target_layouts: list[int] = field(default_factory=list)
    origin: str = "synthesized"

    def to_dict(self) -> JSONObject:
        return asdict(self)

    @classmethod
    def from_dict(cls, obj: dict, where: str) -> BenchItem:
        targets = _need(obj, "target_layouts", list, where)
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in targets):
            raise BuildFileError(f"{where}: field 'target_layouts' must be a list of layout ids")
        return cls(
            item_id=_need(obj, "item_id", str, where),
            image_key=_need(obj, "image_key", str, where),
            subset=_need(obj, "subset", str, where),
            question=_need(obj, "question", str, where),
            options=_need(obj, "options", str, where),
            answer=_need(obj, "answer", str, where),
            explanation=_need(obj, "explanation", str, where),
            target_layouts=list(targets),
            origin=str(obj.get("origin") or "synthesized"),
        )


_T = TypeVar("_T")


def read_rows(path: str | os.PathLike, parse: Callable[[JSONObject, str], _T], what: str) -> list[_T]:
    """Every line of a workspace JSONL file through ``parse(obj, "<file>:<line>")``."""
    return [parse(obj, where) for where, _, obj in iter_jsonl(path, BuildFileError, what=what)]


def read_sources(path: str | os.PathLike) -> dict[str, SourceImage]:
    """``sources.jsonl`` as ``{key: SourceImage}`` in file order (duplicate keys are an error)."""
    out: dict[str, SourceImage] = {}
    for where, _, obj in iter_jsonl(path, BuildFileError, what="sources file"):
        src = SourceImage.from_dict(obj, where)
        if src.key in out:
            raise BuildFileError(f"{where}: field 'key': duplicate {src.key!r}")
        out[src.key] = src
    return out


def read_items(path: str | os.PathLike, what: str = "items file") -> list[BenchItem]:
    items = read_rows(path, BenchItem.from_dict, what)
    seen: set[str] = set()
    for it in items:
        if it.item_id in seen:
            raise BuildFileError(f"{path}: item_id {it.item_id!r} appears twice")
        seen.add(it.item_id)
    return items
