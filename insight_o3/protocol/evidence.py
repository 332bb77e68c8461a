"""The annotated evidence of a sample: the boxes (original pixels) the answer needs.

O3-Bench lines carry ``layout_infos`` (``{"<id>": {"layout_id", "bbox": [x1, y1, x2, y2], "label"}}``)
and ``target_layouts`` (the ids of the layouts the answer needs, e.g. ``[2, 5]``; a target may also be
given inline as ``{"bbox": [...]}``); TreeBench lines carry ``target_instances`` (a JSON list of
``[x1, y1, x2, y2]`` boxes, written as a string). Other benchmarks have none.

Evaluation records keep every annotation field, so the same function serves the Table 6 oracle
(``--oracle_crops target_layouts``, strict: a malformed annotation is bad input naming the field) and
the failure attribution of finished records (lenient: a malformed box is left out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..base.untrusted import loads
from ..imaging.geometry import Box

#: Annotation fields that hold evidence, in the order they are tried.
EVIDENCE_FIELDS = ("target_layouts", "target_instances")


class EvidenceError(ValueError):
    """A malformed evidence annotation; the message names the sample and the field."""


@dataclass(frozen=True)
class EvidenceBox:
    """One piece of annotated evidence: its layout id (``"#k"`` for unnamed ones) and box."""

    id: str
    box: Box


def _as_box(v: Any) -> Box | None:
    if not isinstance(v, (list, tuple)) or len(v) != 4:
        return None
    try:
        b = tuple(float(x) for x in v)
    except (TypeError, ValueError):
        return None
    if not all(math.isfinite(x) for x in b) or b[2] <= b[0] or b[3] <= b[1]:
        return None
    return (b[0], b[1], b[2], b[3])


def _layout_index(infos: Any) -> dict[str, Any]:
    """``layout_infos`` keyed by layout id (a dict keyed by id, or a list of objects with ``layout_id``)."""
    if isinstance(infos, dict):
        out = {}
        for k, info in infos.items():
            out[str(k)] = info
            if isinstance(info, dict) and info.get("layout_id") is not None:
                out.setdefault(str(info["layout_id"]), info)
        return out
    if isinstance(infos, list):
        return {str(i.get("layout_id", k)): i for k, i in enumerate(infos) if isinstance(i, dict)}
    return {}


def has_evidence(fields: Mapping[str, Any]) -> bool:
    """Whether the sample carries an evidence annotation at all (even an empty or malformed one)."""
    return any(fields.get(f) not in (None, "", []) for f in EVIDENCE_FIELDS)


def evidence_boxes(
    fields: Mapping[str, Any], where: str = "<sample>", strict: bool = False
) -> list[EvidenceBox] | None:
    """The evidence boxes of a sample (annotation fields or a record), or None when it has no
    evidence annotation. ``strict``: a target that names no layout, or a box that is not four finite
    numbers with positive area, raises :class:`EvidenceError` (else it is left out)."""

    def bad(field: str, what: str) -> None:
        if strict:
            raise EvidenceError(f"{where}: field '{field}' {what}")

    targets = fields.get("target_layouts")
    if targets not in (None, "", []):
        if not isinstance(targets, list):
            targets = [targets]
        index = _layout_index(fields.get("layout_infos"))
        out: list[EvidenceBox] = []
        for k, t in enumerate(targets):
            if isinstance(t, dict):
                box = _as_box(t.get("bbox"))
                lid = str(t.get("layout_id", f"#{k}"))
                name = f"target_layouts[{k}].bbox"
            else:
                lid = str(t)
                info = index.get(lid)
                if not isinstance(info, dict):
                    bad("layout_infos", f"has no layout {lid!r} (named by target_layouts[{k}])")
                    continue
                box = _as_box(info.get("bbox"))
                name = f"layout_infos.{lid}.bbox"
            if box is None:
                bad(name, "must be [x1, y1, x2, y2] with x1 < x2 and y1 < y2")
                continue
            out.append(EvidenceBox(lid, box))
        return out
    inst = fields.get("target_instances")
    if inst not in (None, "", []):
        if isinstance(inst, str):
            try:
                inst = loads(inst)
            except json.JSONDecodeError:
                bad("target_instances", "is not a JSON list of boxes")
                return []
        if not isinstance(inst, list):
            bad("target_instances", "must be a list of [x1, y1, x2, y2] boxes")
            return []
        out = []
        for k, v in enumerate(inst):
            box = _as_box(v)
            if box is None:
                bad(f"target_instances[{k}]", "must be [x1, y1, x2, y2] with x1 < x2 and y1 < y2")
                continue
            out.append(EvidenceBox(f"#{k}", box))
        return out
    return None
