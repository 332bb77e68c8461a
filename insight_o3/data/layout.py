"""Layout-box filtering and merging for the region-localization data (Appendix C.2).

Input: PP-DocLayout detections in PaddleOCR's JSON output form, one JSON object per image::

    {"input_path": "infographicVQA_train/12345.jpeg",
     "boxes": [{"cls_id": 2, "label": "text", "score": 0.87, "coordinate": [x1, y1, x2, y2]}, ...]}

(what ``LayoutDetection(model_name="PP-DocLayout_plus-L").predict(...)`` results write with
``res.save_to_json(dir)``; a ``{"res": {...}}`` wrapper is accepted too). ``image`` may replace
``input_path``. Coordinates are image pixels.

Rules, in order (:func:`process_layout`):

1. keep only ``text, image, table, chart, figure_title, paragraph_title``;
2. drop boxes with area > ``max_area_ratio`` (1/4) of the image, ``chart_max_area_ratio`` (0.8) for charts;
3. greedy merge: repeatedly merge the pair with the least effort
   ``1 - (area(a) + area(b)) / area(enclosing box)`` while that effort is at most the pair's threshold
   (``title_merge_threshold`` 0.15 when either box is a figure/paragraph title, else
   ``merge_threshold`` 0.1); a merge is skipped when the enclosing box would exceed
   ``merge_max_area_ratio`` (0.25) of the image or have an aspect ratio outside
   ``[1/max_aspect, max_aspect]`` (1:5..5:1); charts and tables are never merged. A merged box takes
   the label of its largest member and remembers the members' labels;
4. drop (1) charts/tables enclosing another chart/table, (2) unmerged images containing no text or
   title box, (3) unmerged titles, (4) unmerged texts, (5) boxes with area ratio < ``min_area_ratio``
   (0.001), (6) boxes with aspect ratio outside ``[1/max_aspect, max_aspect]``.

"Containing"/"enclosing" means at least ``contain_ratio`` (0.9) of the inner box's area lies inside.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from ..base.setting_kinds import Kind, kind_field
from ..base.untrusted import loads
from ..imaging.geometry import Box, box_area

#: Characters one layout JSON file may have (a page of PaddleX layout output is a few kB).
MAX_LAYOUT_CHARS = 64 * 2**20
#: Boxes one image's layout may have (a PaddleX page has tens to a few hundred; step 3 merges pairwise).
MAX_LAYOUT_BOXES = 5_000
KEEP_LABELS = ("text", "image", "table", "chart", "figure_title", "paragraph_title")
TITLE_LABELS = ("figure_title", "paragraph_title")
NEVER_MERGE = ("chart", "table")


class LayoutError(ValueError):
    """Unusable layout input; the message names the file and the box."""


@dataclass(frozen=True)
class LayoutRules:
    """C.2 thresholds (every one is a flag of ``build_region_localization``)."""

    max_area_ratio: float = kind_field(Kind.RESULT, default=0.25)
    chart_max_area_ratio: float = kind_field(Kind.RESULT, default=0.8)
    merge_threshold: float = kind_field(Kind.RESULT, default=0.1)
    title_merge_threshold: float = kind_field(Kind.RESULT, default=0.15)
    merge_max_area_ratio: float = kind_field(Kind.RESULT, default=0.25)
    max_aspect: float = kind_field(Kind.RESULT, default=5.0)
    min_area_ratio: float = kind_field(Kind.RESULT, default=0.001)
    contain_ratio: float = kind_field(Kind.RESULT, default=0.9)
    #: not in the paper (detector threshold 0.01 already applies); 0 = keep all
    min_score: float = kind_field(Kind.RESULT, default=0.0)


@dataclass
class LayoutBox:
    label: str
    box: tuple[float, float, float, float]
    score: float = 1.0
    members: list[str] = field(default_factory=list)  # labels of merged detections (empty: unmerged)

    @property
    def merged(self) -> bool:
        return len(self.members) > 1

    @property
    def area(self) -> float:
        return box_area(self.box)

    @property
    def aspect(self) -> float:
        return (self.box[2] - self.box[0]) / (self.box[3] - self.box[1])


@dataclass
class LayoutDoc:
    image: str
    boxes: list[LayoutBox]
    source_file: str = ""


# ----------------------------------------------------------------------------- reading
def parse_layout(obj: dict, where: str, image_size: tuple[int, int] | None = None) -> LayoutDoc:
    """One PaddleOCR-style layout result → :class:`LayoutDoc` (boxes validated against the image)."""
    if not isinstance(obj, dict):
        raise LayoutError(f"{where}: expected a JSON object")
    if "res" in obj and isinstance(obj["res"], dict):
        obj = obj["res"]
    image = obj.get("input_path") or obj.get("image")
    if not image:
        raise LayoutError(f"{where}: missing field 'input_path' (or 'image')")
    raw = obj.get("boxes")
    if not isinstance(raw, list):
        raise LayoutError(f"{where}: field 'boxes' must be a list")
    if len(raw) > MAX_LAYOUT_BOXES:
        raise LayoutError(
            f"{where}: field 'boxes' holds {len(raw)} boxes (at most {MAX_LAYOUT_BOXES}: merging is quadratic)"
        )
    out = []
    for i, b in enumerate(raw):
        bw = f"{where}: boxes[{i}]"
        if not isinstance(b, dict) or "label" not in b or "coordinate" not in b:
            raise LayoutError(f"{bw}: needs 'label' and 'coordinate'")
        c = b["coordinate"]
        try:
            x1, y1, x2, y2 = (float(v) for v in c)
        except (TypeError, ValueError):
            raise LayoutError(f"{bw}: field 'coordinate' must be 4 numbers, got {c!r}") from None
        if x2 <= x1 or y2 <= y1:
            raise LayoutError(f"{bw}: field 'coordinate' is empty or inverted: {c!r}")
        if image_size is not None:
            W, H = image_size
            if x1 < -1 or y1 < -1 or x2 > W + 1 or y2 > H + 1:
                raise LayoutError(f"{bw}: box {c!r} lies outside the {W}x{H} image {image}")
            x1, y1, x2, y2 = max(0.0, x1), max(0.0, y1), min(float(W), x2), min(float(H), y2)
        try:
            score = float(b.get("score", 1.0))
        except (TypeError, ValueError):
            raise LayoutError(f"{bw}: field 'score' must be a number") from None
        out.append(LayoutBox(str(b["label"]), (x1, y1, x2, y2), score))
    return LayoutDoc(str(image), out, where)


def iter_layout_files(path: str) -> Iterator[tuple[str, Any]]:
    """``(where, object)`` from a directory of ``*.json`` files, one ``.json`` file or a ``.jsonl``."""
    if os.path.isdir(path):
        for name in sorted(os.listdir(path)):
            if name.endswith(".json"):
                yield from iter_layout_files(os.path.join(path, name))
        return
    if not os.path.isfile(path):
        raise LayoutError(f"layout input not found: {path}")
    with open(path, encoding="utf-8") as f:
        if path.endswith(".jsonl"):
            for lineno, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        yield f"{path}:{lineno}", loads(line)
                    except json.JSONDecodeError as e:
                        raise LayoutError(f"{path}:{lineno}: malformed JSON line ({e})") from None
        else:
            try:
                yield path, loads(f.read(MAX_LAYOUT_CHARS + 1), max_chars=MAX_LAYOUT_CHARS)
            except json.JSONDecodeError as e:
                raise LayoutError(f"{path}: malformed JSON ({e})") from None


# ----------------------------------------------------------------------------- rules
def _enclose(a: Box, b: Box) -> Box:
    return (min(a[0], b[0]), min(a[1], b[1]), max(a[2], b[2]), max(a[3], b[3]))


def _contains(outer: Box, inner: Box, ratio: float) -> bool:
    ix1, iy1 = max(outer[0], inner[0]), max(outer[1], inner[1])
    ix2, iy2 = min(outer[2], inner[2]), min(outer[3], inner[3])
    a = box_area(inner)
    return a > 0 and box_area((ix1, iy1, ix2, iy2)) >= ratio * a


def _aspect_ok(box: Box, max_aspect: float) -> bool:
    ar = (box[2] - box[0]) / (box[3] - box[1])
    return 1 / max_aspect <= ar <= max_aspect


def merge_effort(a: Box, b: Box) -> float:
    """``1 - summed_area / min_enclosing_area`` (can be negative for overlapping boxes)."""
    return 1.0 - (box_area(a) + box_area(b)) / box_area(_enclose(a, b))


def greedy_merge(boxes: list[LayoutBox], image_area: float, rules: LayoutRules) -> list[LayoutBox]:
    """Step 3: least-effort-first merging of mergeable boxes (charts/tables untouched)."""
    import numpy as np  # here, so that the rules (build_region_localization's flags) load without numpy

    fixed = [b for b in boxes if b.label in NEVER_MERGE]
    cur = [LayoutBox(b.label, b.box, b.score, [b.label]) for b in boxes if b.label not in NEVER_MERGE]
    # remember member areas per label so a merged box takes its largest member's label
    areas = [{b.label: b.area} for b in cur]
    while len(cur) > 1:
        B = np.array([b.box for b in cur])
        x1, y1 = np.minimum.outer(B[:, 0], B[:, 0]), np.minimum.outer(B[:, 1], B[:, 1])
        x2, y2 = np.maximum.outer(B[:, 2], B[:, 2]), np.maximum.outer(B[:, 3], B[:, 3])
        enc_w, enc_h = x2 - x1, y2 - y1
        enc = enc_w * enc_h
        a = (B[:, 2] - B[:, 0]) * (B[:, 3] - B[:, 1])
        effort = 1.0 - (a[:, None] + a[None, :]) / enc
        is_title = np.array([b.label in TITLE_LABELS for b in cur])
        thr = np.where(is_title[:, None] | is_title[None, :], rules.title_merge_threshold, rules.merge_threshold)
        ar = enc_w / enc_h
        ok = (
            (effort <= thr)
            & (enc <= rules.merge_max_area_ratio * image_area)
            & (ar >= 1 / rules.max_aspect)
            & (ar <= rules.max_aspect)
        )
        np.fill_diagonal(ok, False)
        ok = np.triu(ok)
        if not ok.any():
            break
        cand = np.where(ok, effort, np.inf)
        i, j = np.unravel_index(int(np.argmin(cand)), cand.shape)  # least effort first (ties: lowest index)
        merged_areas = dict(areas[i])
        for k, v in areas[j].items():
            merged_areas[k] = merged_areas.get(k, 0.0) + v
        label = max(merged_areas.items(), key=lambda kv: (kv[1], kv[0]))[0]
        new = LayoutBox(
            label, _enclose(cur[i].box, cur[j].box), max(cur[i].score, cur[j].score), cur[i].members + cur[j].members
        )
        cur = [b for k, b in enumerate(cur) if k not in (i, j)] + [new]
        areas = [m for k, m in enumerate(areas) if k not in (i, j)] + [merged_areas]
    return fixed + cur


def process_layout(doc: LayoutDoc, image_size: tuple[int, int], rules: LayoutRules = LayoutRules()) -> list[LayoutBox]:
    """All C.2 rules; returns the final search targets in a deterministic order (top-to-bottom)."""
    W, H = image_size
    img_area = float(W * H)
    boxes = [b for b in doc.boxes if b.label in KEEP_LABELS and b.score >= rules.min_score]  # 1
    boxes = [
        b
        for b in boxes  # 2
        if b.area <= (rules.chart_max_area_ratio if b.label == "chart" else rules.max_area_ratio) * img_area
    ]
    texts = [b.box for b in boxes if b.label == "text" or b.label in TITLE_LABELS]
    boxes = greedy_merge(boxes, img_area, rules)  # 3
    out = []
    ct = [b for b in boxes if b.label in NEVER_MERGE]
    for b in boxes:  # 4
        if b.label in NEVER_MERGE and any(o is not b and _contains(b.box, o.box, rules.contain_ratio) for o in ct):
            continue  # (1)
        if b.label == "image" and not b.merged and not any(_contains(b.box, t, rules.contain_ratio) for t in texts):
            continue  # (2)
        if b.label in TITLE_LABELS and not b.merged:
            continue  # (3)
        if b.label == "text" and not b.merged:
            continue  # (4)
        if b.area / img_area < rules.min_area_ratio:
            continue  # (5)
        if not _aspect_ok(b.box, rules.max_aspect):
            continue  # (6)
        out.append(b)
    out.sort(key=lambda b: (b.box[1], b.box[0], b.box[2], b.box[3]))
    return out
