"""A synthetic O3-Bench-like benchmark whose answers are known by construction.

Each image is either a *composite chart* (a grid of bar / line / table sub-charts with titles,
legends and printed values) or a *digital map* (a lettered/numbered grid with streets, places drawn
as category icons, and a legend). A scene is first built as a plain data model (``ChartScene`` /
``MapScene``) with the pixel box of every layout; questions are derived from that model only, and
the image is rendered from it afterwards. So every answer, distractor and evidence box can be
checked against the model without looking at pixels.

Questions follow O3-Bench's format: six options, A–E plus ``F. No right choice``; a fraction of
items (``f_rate``) have F correct (the true answer is left out of A–E). Records are written in
O3-Bench's ``metadata.jsonl`` layout (``file_name`` relative to the output dir, ``subset``,
``question``, ``options``, ``answer``, ``explanation``, ``target_layouts``, ``layout_infos``,
``img_width``, ``img_height``), plus ``question_id`` and ``question_type``.

Everything is derived from ``random.Random`` seeded per image, so output is identical for a seed
(and independent of worker count or of which images were already on disk).
"""

from __future__ import annotations

import math
import os
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import TypeVar

from PIL import Image, ImageDraw, ImageFont

from ..base.json_types import JSONObject
from ..storage.atomic import atomic_writer, write_jsonl_atomic

NO_RIGHT_CHOICE = "No right choice"
LETTERS = "ABCDE"

CHART_TOPICS = [
    "Coffee Exports",
    "Wind Power Output",
    "Solar Capacity",
    "Rail Freight",
    "Hospital Visits",
    "Museum Attendance",
    "Broadband Subscribers",
    "Rice Harvest",
    "Bicycle Sales",
    "Water Usage",
    "Tourist Arrivals",
    "Steel Production",
    "Library Loans",
    "Air Passengers",
    "Fish Catch",
    "Wheat Prices",
    "Housing Starts",
    "Retail Footfall",
    "Patent Filings",
    "Cinema Tickets",
    "Forest Cover",
    "Textile Orders",
    "Port Throughput",
    "EV Registrations",
    "Dairy Output",
    "Cloud Revenue",
    "Vaccine Doses",
    "Bus Ridership",
    "Copper Mining",
    "Student Enrolment",
    "Tea Auctions",
    "Grid Outages",
    "Parcel Volume",
    "Tax Receipts",
    "Game Downloads",
    "Recycling Rate",
    "Crop Insurance",
    "Ferry Crossings",
    "Film Releases",
    "Startup Funding",
]
SERIES_NAMES = ["North", "South", "East", "West", "Central", "Coastal", "Highland", "Delta"]
SERIES_COLORS = [
    (31, 119, 180),
    (255, 127, 14),
    (44, 160, 44),
    (214, 39, 40),
    (148, 103, 189),
    (140, 86, 75),
    (227, 119, 194),
    (127, 127, 127),
]

PLACE_CATEGORIES = [  # (category, icon shape, colour)
    ("Station", "circle", (200, 30, 30)),
    ("Library", "square", (30, 70, 200)),
    ("Hospital", "cross", (20, 150, 60)),
    ("Museum", "triangle", (150, 60, 170)),
    ("Cafe", "diamond", (210, 120, 0)),
    ("School", "hexagon", (0, 140, 150)),
]
NAME_HEADS = [
    "Amber",
    "Birch",
    "Cedar",
    "Dover",
    "Elm",
    "Fern",
    "Glen",
    "Hazel",
    "Iris",
    "Juniper",
    "Kestrel",
    "Linden",
    "Maple",
    "Nettle",
    "Oak",
    "Pine",
    "Quarry",
    "Rowan",
    "Sorrel",
    "Thistle",
    "Umber",
    "Vale",
    "Willow",
    "Yarrow",
]
NAME_TAILS = ["field", "wood", "gate", "brook", "stead", "ford", "haven", "ridge", "mere", "cross", "hurst", "wick"]
STREET_NAMES = [
    "Market St",
    "Harbour Rd",
    "Kings Ave",
    "Mill Lane",
    "Canal St",
    "Bridge Rd",
    "Station Ave",
    "Church Lane",
    "Park Rd",
    "River Walk",
    "Hill St",
    "Garden Ave",
]


# ----------------------------------------------------------------------------------- data model
@dataclass
class DemoLayout:
    layout_id: int
    bbox: tuple[int, int, int, int]  # x1, y1, x2, y2 in image pixels
    label: str


@dataclass
class Panel:
    title: str
    kind: str  # bar | line | table
    series: dict[str, list[int]]  # series name -> one value per year
    bbox: tuple[int, int, int, int]
    layout_id: int
    legend_bbox: tuple[int, int, int, int] | None = None
    legend_layout_id: int | None = None


@dataclass
class ChartScene:
    width: int
    height: int
    title: str
    years: list[int]
    panels: list[Panel]
    layouts: list[DemoLayout]
    series_colors: dict[str, tuple[int, int, int]]

    def panel(self, title: str) -> Panel:
        return next(p for p in self.panels if p.title == title)


@dataclass
class Place:
    name: str
    category: str
    x: int
    y: int
    col: int  # 0-based grid column
    row: int  # 0-based grid row
    layout_id: int
    bbox: tuple[int, int, int, int]

    def cell(self) -> str:
        return cell_name(self.col, self.row)


@dataclass
class MapScene:
    width: int
    height: int
    title: str
    map_box: tuple[int, int, int, int]
    cols: int
    rows: int
    places: list[Place]
    streets: list[tuple[str, str, int]]  # (name, "h"|"v", pixel coordinate)
    legend_bbox: tuple[int, int, int, int]
    legend_layout_id: int
    layouts: list[DemoLayout]
    categories: list[tuple[str, str, tuple[int, int, int]]] = field(default_factory=list)

    def place(self, name: str) -> Place:
        return next(p for p in self.places if p.name == name)

    def cell_size(self) -> tuple[float, float]:
        x0, y0, x1, y1 = self.map_box
        return (x1 - x0) / self.cols, (y1 - y0) / self.rows


@dataclass
class Question:
    kind: str
    question: str
    options: list[str]  # the five texts of A–E
    answer: str  # letter A–F
    explanation: str
    target_layouts: list[int]

    def options_text(self) -> str:
        lines = [f"{LETTERS[i]}. {t}" for i, t in enumerate(self.options)]
        return "\n".join(lines + [f"F. {NO_RIGHT_CHOICE}"])


def cell_name(col: int, row: int) -> str:
    return f"{chr(ord('A') + col)}{row + 1}"


def clip_box(box: Sequence[int], width: int, height: int) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = box
    return max(0, x1), max(0, y1), min(width, x2), min(height, y2)


def base_font_size(width: int, height: int) -> int:
    return max(7, min(width, height) // 110)


# ----------------------------------------------------------------------------------- MCQ helper
def make_mcq(rng: random.Random, correct: str, distractors: list[str], f_correct: bool) -> tuple[list[str], str]:
    """Five options A–E and the answer letter. With ``f_correct`` the correct text is left out
    and the answer is F. ``distractors`` must all differ from ``correct``; needs ≥5 of them
    (4 suffice when F is not the answer)."""
    pool = list(dict.fromkeys(d for d in distractors if d != correct))
    need = 5 if f_correct else 4
    if len(pool) < need:
        raise ValueError(f"need {need} distinct distractors for {correct!r}, got {len(pool)}")
    chosen = rng.sample(pool, need)
    if f_correct:
        return chosen, "F"
    pos = rng.randrange(5)
    chosen.insert(pos, correct)
    return chosen, LETTERS[pos]


def numeric_distractors(rng: random.Random, correct: int, near: list[int], spread: int) -> list[str]:
    """Plausible wrong numbers: values seen nearby first, then small offsets of the truth."""
    out = [v for v in near if v != correct and v > 0]
    rng.shuffle(out)
    offsets = [d for d in range(-spread, spread + 1) if d != 0]
    rng.shuffle(offsets)
    out += [correct + d for d in offsets if correct + d > 0]
    return [str(v) for v in dict.fromkeys(out)]


# ----------------------------------------------------------------------------------- charts
def _grid_shape(n: int, width: int, height: int) -> tuple[int, int]:
    """Rows × cols for n panels that keeps panels roughly square."""
    best: tuple[float, int, int] = (math.inf, 1, n)
    for cols in range(1, n + 1):
        rows = math.ceil(n / cols)
        aspect = (width / cols) / (height / rows)
        score = abs(math.log(aspect / 1.15)) + 0.05 * (rows * cols - n)
        if score < best[0]:
            best = (score, rows, cols)
    return best[1], best[2]


def build_chart_scene(rng: random.Random, width: int, height: int) -> ChartScene:
    fs = base_font_size(width, height)
    n_panels = rng.randint(8, 12)
    start = rng.randint(2008, 2018)
    years = list(range(start, start + rng.randint(5, 6)))
    series_pool = rng.sample(SERIES_NAMES, 5)
    colors = {s: SERIES_COLORS[SERIES_NAMES.index(s)] for s in series_pool}
    titles = rng.sample(CHART_TOPICS, n_panels)
    kinds = [rng.choice(["bar", "bar", "line", "table"]) for _ in range(n_panels)]
    series_sets = [sorted(rng.sample(series_pool, rng.randint(2, 4)), key=series_pool.index) for _ in range(n_panels)]
    n_values = sum(len(s) for s in series_sets) * len(years)
    values = rng.sample(range(10, 10 + max(1000, 2 * n_values)), n_values)  # all distinct: no ties
    it = iter(values)

    header_h = int(fs * 3.2)
    margin = fs
    rows, cols = _grid_shape(n_panels, width - 2 * margin, height - header_h - 2 * margin)
    pw = (width - 2 * margin) / cols
    ph = (height - header_h - 2 * margin) / rows
    layouts = [DemoLayout(1, (margin, margin // 2, width - margin, header_h), "figure_title")]
    panels = []
    for i in range(n_panels):
        r, c = divmod(i, cols)
        x0 = int(margin + c * pw + fs * 0.4)
        y0 = int(header_h + margin + r * ph + fs * 0.4)
        box = (x0, y0, int(x0 + pw - fs * 0.8), int(y0 + ph - fs * 0.8))
        series = {s: [next(it) for _ in years] for s in series_sets[i]}
        lid = len(layouts) + 1
        layouts.append(DemoLayout(lid, box, f"{'table' if kinds[i] == 'table' else 'chart'}: {titles[i]}"))
        panel = Panel(titles[i], kinds[i], series, box, lid)
        if kinds[i] != "table":
            lw = int(max(len(s) for s in series) * fs * 0.62 + fs * 2.2)
            lh = int(len(series) * fs * 1.25 + fs * 0.6)
            lx1 = box[2] - int(fs * 0.5)
            ly0 = box[1] + int(fs * 2.4)
            panel.legend_bbox = (lx1 - lw, ly0, lx1, ly0 + lh)
            panel.legend_layout_id = len(layouts) + 1
            layouts.append(DemoLayout(panel.legend_layout_id, panel.legend_bbox, f"legend: {titles[i]}"))
        panels.append(panel)
    title = f"Regional Statistics Digest {years[0]}-{years[-1]}"
    return ChartScene(width, height, title, years, panels, layouts, colors)


def chart_questions(rng: random.Random, scene: ChartScene, k: int, f_rate: float) -> list[Question]:
    makers = [_q_max_across_panels, _q_peak_year, _q_sum_two_panels, _q_top_series]
    return _pick_questions(rng, scene, makers, k, f_rate)


#: The scene type a question maker reads.
_S = TypeVar("_S", ChartScene, MapScene)


def _pick_questions(
    rng: random.Random,
    scene: _S,
    makers: Sequence[Callable[[random.Random, _S, bool], Question | None]],
    k: int,
    f_rate: float,
) -> list[Question]:
    out: list[Question] = []
    order = rng.sample(makers, len(makers))
    attempts = 0
    while len(out) < k and attempts < 40:
        maker = order[attempts % len(order)]
        attempts += 1
        q = maker(rng, scene, rng.random() < f_rate)
        if q is not None and all(q.question != o.question for o in out):
            out.append(q)
    return out


def _unused_titles(scene: ChartScene) -> list[str]:
    used = {p.title for p in scene.panels}
    return [t for t in CHART_TOPICS if t not in used]


def _q_max_across_panels(rng: random.Random, scene: ChartScene, f_correct: bool) -> Question | None:
    series = rng.choice(sorted({s for p in scene.panels for s in p.series}))
    yi = rng.randrange(len(scene.years))
    cands = [p for p in scene.panels if series in p.series]
    if len(cands) < 2:
        return None
    best = max(cands, key=lambda p: p.series[series][yi])
    others = [p.title for p in cands if p is not best]
    fillers = [p.title for p in scene.panels if series not in p.series] + _unused_titles(scene)
    rng.shuffle(fillers)
    options, answer = make_mcq(rng, best.title, others + fillers, f_correct)
    year = scene.years[yi]
    vals = ", ".join(f"'{p.title}' {p.series[series][yi]}" for p in cands)
    expl = (
        f"Sub-charts with series '{series}' report for {year}: {vals} [layouts "
        f"{', '.join(str(p.layout_id) for p in cands)}]. The largest is '{best.title}' "
        f"({best.series[series][yi]})" + (", which is not among A-E, so F." if answer == "F" else ".")
    )
    targets = sorted({best.layout_id} | {p.layout_id for p in cands if p.title in options})
    return Question(
        "chart_max_across_panels",
        f"Across all sub-charts that report the series '{series}', which sub-chart shows "
        f"the largest '{series}' value for {year}?",
        options,
        answer,
        expl,
        targets,
    )


def _q_peak_year(rng: random.Random, scene: ChartScene, f_correct: bool) -> Question | None:
    panel = rng.choice(scene.panels)
    series = rng.choice(list(panel.series))
    vals = panel.series[series]
    peak = scene.years[vals.index(max(vals))]
    distract = [str(y) for y in scene.years if y != peak]
    distract += [str(y) for y in (scene.years[0] - 2, scene.years[0] - 1, scene.years[-1] + 1, scene.years[-1] + 2)]
    options, answer = make_mcq(rng, str(peak), distract, f_correct)
    expl = (
        f"In '{panel.title}' [layout {panel.layout_id}] the '{series}' values by year are "
        + ", ".join(f"{y}: {v}" for y, v in zip(scene.years, vals))
        + f"; the peak is in {peak}"
        + (", not listed, so F." if answer == "F" else ".")
    )
    targets = [panel.layout_id] + ([panel.legend_layout_id] if panel.legend_layout_id else [])
    return Question(
        "chart_peak_year",
        f"In the sub-chart titled '{panel.title}', in which year does the series '{series}' reach its highest value?",
        options,
        answer,
        expl,
        targets,
    )


def _q_sum_two_panels(rng: random.Random, scene: ChartScene, f_correct: bool) -> Question | None:
    series = rng.choice(sorted({s for p in scene.panels for s in p.series}))
    cands = [p for p in scene.panels if series in p.series]
    if len(cands) < 2:
        return None
    p1, p2 = rng.sample(cands, 2)
    yi = rng.randrange(len(scene.years))
    total = p1.series[series][yi] + p2.series[series][yi]
    near = [p1.series[series][j] + p2.series[series][j] for j in range(len(scene.years)) if j != yi]
    near += [p1.series[series][yi] + p.series[series][yi] for p in cands if p not in (p1, p2)]
    options, answer = make_mcq(rng, str(total), numeric_distractors(rng, total, near, 12), f_correct)
    year = scene.years[yi]
    expl = (
        f"'{p1.title}' [layout {p1.layout_id}] shows {series}={p1.series[series][yi]} in {year}; "
        f"'{p2.title}' [layout {p2.layout_id}] shows {p2.series[series][yi]}; the sum is {total}"
        + (", not listed, so F." if answer == "F" else ".")
    )
    return Question(
        "chart_sum_two_panels",
        f"What is the sum of the '{series}' values for {year} in the sub-charts titled '{p1.title}' and '{p2.title}'?",
        options,
        answer,
        expl,
        sorted([p1.layout_id, p2.layout_id]),
    )


def _q_top_series(rng: random.Random, scene: ChartScene, f_correct: bool) -> Question | None:
    panel = rng.choice([p for p in scene.panels if len(p.series) >= 3] or scene.panels)
    yi = rng.randrange(len(scene.years))
    best = max(panel.series, key=lambda s: panel.series[s][yi])
    distract = [s for s in panel.series if s != best] + [s for s in SERIES_NAMES if s not in panel.series]
    options, answer = make_mcq(rng, best, distract, f_correct)
    year = scene.years[yi]
    expl = (
        f"In '{panel.title}' [layout {panel.layout_id}] the {year} values are "
        + ", ".join(f"{s}: {v[yi]}" for s, v in panel.series.items())
        + f"; the largest is {best}"
        + (", not listed, so F." if answer == "F" else ".")
    )
    targets = [panel.layout_id] + ([panel.legend_layout_id] if panel.legend_layout_id else [])
    return Question(
        "chart_top_series",
        f"In the sub-chart titled '{panel.title}', which series has the largest value in {year}?",
        options,
        answer,
        expl,
        targets,
    )


# ----------------------------------------------------------------------------------- maps
def build_map_scene(rng: random.Random, width: int, height: int) -> MapScene:
    fs = base_font_size(width, height)
    header_h = int(fs * 3.2)
    legend_w = int(max(width * 0.16, fs * 11))
    label = int(fs * 1.8)  # room for grid labels around the map
    map_box = (label, header_h + label, width - legend_w - label, height - label)
    mw, mh = map_box[2] - map_box[0], map_box[3] - map_box[1]
    cols = max(4, min(12, round(mw / (fs * 11))))
    rows = max(4, min(12, round(mh / (fs * 11))))
    cw, ch = mw / cols, mh / rows
    cats = list(PLACE_CATEGORIES)
    names = [h + t for h in NAME_HEADS for t in NAME_TAILS]
    rng.shuffle(names)

    layouts = [DemoLayout(1, (label, fs // 2, width - legend_w - label, header_h), "figure_title")]
    lx0 = width - legend_w + fs // 2
    legend_bbox = (lx0, header_h + label, width - fs // 2, header_h + label + int(fs * (2.6 + 1.6 * len(cats))))
    layouts.append(DemoLayout(2, legend_bbox, "legend"))

    cells = [(c, r) for r in range(rows) for c in range(cols)]
    n_places = max(len(cats) * 2, int(len(cells) * rng.uniform(0.45, 0.6)))
    chosen = rng.sample(cells, min(n_places, len(cells)))
    icon = fs * 0.7
    places = []
    for i, (c, r) in enumerate(chosen):
        cat = cats[i % len(cats)][0] if i < len(cats) * 2 else rng.choice(cats)[0]
        x = int(map_box[0] + (c + rng.uniform(0.2, 0.35)) * cw)
        y = int(map_box[1] + (r + rng.uniform(0.3, 0.7)) * ch)
        name = names[i]
        tw = int(len(name) * fs * 0.62)
        bbox = clip_box(
            (
                int(x - icon - 2),
                int(y - max(icon, fs * 0.7) - 2),
                int(x + icon + fs * 0.4 + tw),
                int(y + max(icon, fs * 0.7) + 2),
            ),
            width,
            height,
        )
        lid = len(layouts) + 1
        layouts.append(DemoLayout(lid, bbox, f"{cat}: {name}"))
        places.append(Place(name, cat, x, y, c, r, lid, bbox))
    streets = []
    street_names = rng.sample(STREET_NAMES, min(len(STREET_NAMES), 4 + rng.randint(0, 4)))
    for j, sname in enumerate(street_names):
        if j % 2 == 0:
            streets.append((sname, "h", int(map_box[1] + rng.randint(1, rows - 1) * ch - ch * 0.12)))
        else:
            streets.append((sname, "v", int(map_box[0] + rng.randint(1, cols - 1) * cw - cw * 0.1)))
    title = f"District Map: {rng.choice(NAME_HEADS)} Quarter"
    return MapScene(width, height, title, map_box, cols, rows, places, streets, legend_bbox, 2, layouts, cats)


def map_questions(rng: random.Random, scene: MapScene, k: int, f_rate: float) -> list[Question]:
    makers = [_q_column_category, _q_locate_cell, _q_nearest, _q_count_in_row]
    return _pick_questions(rng, scene, makers, k, f_rate)


def _q_column_category(rng: random.Random, scene: MapScene, f_correct: bool) -> Question | None:
    groups: dict[tuple[int, str], list[Place]] = {}
    for p in scene.places:
        groups.setdefault((p.col, p.category), []).append(p)
    unique = [g[0] for g in groups.values() if len(g) == 1]
    if not unique:
        return None
    ans = rng.choice(unique)
    col = chr(ord("A") + ans.col)
    same_col = [p.name for p in scene.places if p.col == ans.col and p is not ans]
    same_cat = [p.name for p in scene.places if p.category == ans.category and p is not ans]
    rng.shuffle(same_col)
    rng.shuffle(same_cat)
    options, answer = make_mcq(
        rng, ans.name, same_col[:3] + same_cat + [p.name for p in scene.places if p is not ans], f_correct
    )
    expl = (
        f"The legend [layout {scene.legend_layout_id}] shows {ans.category} icons; the only one in "
        f"column {col} is {ans.name} in {ans.cell()} [layout {ans.layout_id}]"
        + (", which is not listed, so F." if answer == "F" else ".")
    )
    return Question(
        "map_column_category",
        f"Which place in grid column {col} is marked with the icon that the legend assigns to '{ans.category}'?",
        options,
        answer,
        expl,
        [scene.legend_layout_id, ans.layout_id],
    )


def _q_locate_cell(rng: random.Random, scene: MapScene, f_correct: bool) -> Question | None:
    p = rng.choice(scene.places)
    around = [(p.col + dc, p.row + dr) for dc in (-1, 0, 1) for dr in (-1, 0, 1) if (dc, dr) != (0, 0)]
    near = [cell_name(c, r) for c, r in around if 0 <= c < scene.cols and 0 <= r < scene.rows]
    far = [cell_name(c, r) for c in range(scene.cols) for r in range(scene.rows)]
    rng.shuffle(near)
    rng.shuffle(far)
    options, answer = make_mcq(rng, p.cell(), near + far, f_correct)
    expl = (
        f"{p.name} is drawn with the {p.category} icon (legend, layout {scene.legend_layout_id}) at "
        f"column {p.cell()[0]}, row {p.row + 1} [layout {p.layout_id}], i.e. cell {p.cell()}"
        + (", which is not listed, so F." if answer == "F" else ".")
    )
    return Question(
        "map_locate_cell",
        f"In which grid cell is the {p.category.lower()} named '{p.name}' located?",
        options,
        answer,
        expl,
        [scene.legend_layout_id, p.layout_id],
    )


def _q_nearest(rng: random.Random, scene: MapScene, f_correct: bool) -> Question | None:
    src = rng.choice(scene.places)
    cats = [c[0] for c in scene.categories if c[0] != src.category]
    rng.shuffle(cats)
    for cat in cats:
        cands = sorted(
            (p for p in scene.places if p.category == cat), key=lambda p: math.hypot(p.x - src.x, p.y - src.y)
        )
        if len(cands) < 2:
            continue
        d0 = math.hypot(cands[0].x - src.x, cands[0].y - src.y)
        d1 = math.hypot(cands[1].x - src.x, cands[1].y - src.y)
        if d0 > 0.8 * d1:  # require a clear margin so the answer is unambiguous by eye
            continue
        ans = cands[0]
        others = [p.name for p in cands[1:]] + [p.name for p in scene.places if p.category != cat and p is not src]
        options, answer = make_mcq(rng, ans.name, others[:4] + rng.sample(others[4:], len(others[4:])), f_correct)
        expl = (
            f"'{src.name}' is in {src.cell()} [layout {src.layout_id}]. Of the {cat} icons (legend, layout "
            f"{scene.legend_layout_id}), the closest is {ans.name} in {ans.cell()} [layout {ans.layout_id}]; "
            f"the next closest, {cands[1].name}, is clearly farther"
            + (". It is not listed, so F." if answer == "F" else ".")
        )
        return Question(
            "map_nearest",
            f"Which {cat.lower()} is closest in straight-line distance to the place named '{src.name}'?",
            options,
            answer,
            expl,
            sorted({scene.legend_layout_id, src.layout_id, ans.layout_id}),
        )
    return None


def _q_count_in_row(rng: random.Random, scene: MapScene, f_correct: bool) -> Question | None:
    cat = rng.choice(scene.categories)[0]
    row = rng.randrange(scene.rows)
    hits = [p for p in scene.places if p.category == cat and p.row == row]
    n = len(hits)
    options, answer = make_mcq(rng, str(n), [str(v) for v in range(0, n + 8) if v != n], f_correct)
    expl = (
        f"Row {row + 1} contains {n} {cat} icon(s) (legend, layout {scene.legend_layout_id})"
        + (": " + ", ".join(f"{p.name} in {p.cell()}" for p in hits) if hits else "")
        + (". The count is not listed, so F." if answer == "F" else ".")
    )
    return Question(
        "map_count_in_row",
        f"How many places marked with the '{cat}' icon lie in grid row {row + 1}?",
        options,
        answer,
        expl,
        [scene.legend_layout_id] + [p.layout_id for p in hits],
    )


# ----------------------------------------------------------------------------------- rendering
@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    import matplotlib  # only for the bundled DejaVu font file

    path = os.path.join(matplotlib.get_data_path(), "fonts", "ttf", "DejaVuSans.ttf")
    size = max(6, int(size))
    try:
        return ImageFont.truetype(path, size)
    except OSError:
        return ImageFont.load_default(size=size)


def _text(
    draw: ImageDraw.ImageDraw,
    xy: tuple[int, int],
    text: str,
    size: int,
    fill: tuple[int, int, int] = (20, 20, 20),
    anchor: str = "la",
) -> None:
    draw.text(xy, text, font=_font(size), fill=fill, anchor=anchor)


def render_chart(scene: ChartScene) -> Image.Image:
    fs = base_font_size(scene.width, scene.height)
    img = Image.new("RGB", (scene.width, scene.height), (255, 255, 255))
    d = ImageDraw.Draw(img)
    tb = scene.layouts[0].bbox
    _text(d, ((tb[0] + tb[2]) // 2, (tb[1] + tb[3]) // 2), scene.title, int(fs * 1.8), anchor="mm")
    for p in scene.panels:
        x0, y0, x1, y1 = p.bbox
        d.rectangle(p.bbox, outline=(170, 170, 170), width=max(1, fs // 12))
        _text(d, ((x0 + x1) // 2, y0 + int(fs * 1.2)), p.title, int(fs * 1.15), anchor="mm")
        if p.kind == "table":
            _draw_table(d, p, scene.years, fs)
        else:
            _draw_plot(d, p, scene, fs)
            _draw_legend(d, p, scene.series_colors, fs)
    return img


def _draw_legend(d: ImageDraw.ImageDraw, p: Panel, colors: dict[str, tuple[int, int, int]], fs: int) -> None:
    if p.legend_bbox is None:  # plots always get one (build_chart_scene); tables do not
        return
    lx0, ly0, lx1, ly1 = p.legend_bbox
    d.rectangle(p.legend_bbox, fill=(250, 250, 250), outline=(120, 120, 120), width=1)
    for i, s in enumerate(p.series):
        y = ly0 + int(fs * 0.3 + i * fs * 1.25)
        d.rectangle((lx0 + fs // 3, y + fs // 8, lx0 + fs // 3 + int(fs * 0.9), y + int(fs * 0.95)), fill=colors[s])
        _text(d, (lx0 + int(fs * 1.6), y), s, fs)


def _plot_area(p: Panel, fs: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = p.bbox
    top = (p.legend_bbox[3] if p.legend_bbox else y0 + fs * 2.4) + fs * 1.2
    return int(x0 + fs * 1.2), int(top), int(x1 - fs * 0.8), int(y1 - fs * 1.8)


def _draw_plot(d: ImageDraw.ImageDraw, p: Panel, scene: ChartScene, fs: int) -> None:
    ax0, ay0, ax1, ay1 = _plot_area(p, fs)
    vmax = max(max(v) for v in p.series.values()) * 1.08
    scale = (ay1 - ay0) / vmax
    d.line((ax0, ay1, ax1, ay1), fill=(60, 60, 60), width=max(1, fs // 10))
    d.line((ax0, ay0, ax0, ay1), fill=(60, 60, 60), width=max(1, fs // 10))
    n_years, n_series = len(scene.years), len(p.series)
    gw = (ax1 - ax0) / n_years
    for j, y in enumerate(scene.years):
        _text(d, (int(ax0 + (j + 0.5) * gw), ay1 + fs // 4), str(y), int(fs * 0.8), anchor="ma")
    if p.kind == "bar":
        bw = gw * 0.8 / n_series
        vfs = int(min(fs * 0.7, bw / 1.9))
        for k, (s, vals) in enumerate(p.series.items()):
            for j, v in enumerate(vals):
                bx = ax0 + j * gw + gw * 0.1 + k * bw
                top = ay1 - v * scale
                d.rectangle((int(bx), int(top), int(bx + bw * 0.92), ay1), fill=scene.series_colors[s])
                _text(d, (int(bx + bw * 0.46), int(top) - 2), str(v), vfs, anchor="md")
    else:
        vfs = int(fs * 0.62)
        r = max(2, fs // 5)
        labels: dict[int, list[tuple[int, int, str]]] = {}
        for s, vals in p.series.items():
            pts = [(int(ax0 + (j + 0.5) * gw), int(ay1 - v * scale)) for j, v in enumerate(vals)]
            d.line(pts, fill=scene.series_colors[s], width=max(1, fs // 7))
            for j, ((x, yv), v) in enumerate(zip(pts, vals)):
                d.ellipse((x - r, yv - r, x + r, yv + r), fill=scene.series_colors[s])
                labels.setdefault(j, []).append((yv, v, s))
        # value labels: top to bottom per year, pushed down so that close values never overlap
        lh = int(vfs * 1.15)
        for j, items in labels.items():
            x = int(ax0 + (j + 0.5) * gw)
            prev_bottom = -(10**9)
            for yv, v, s in sorted(items):
                bottom = max(yv - r - 1, prev_bottom + lh)
                d.text(
                    (x + (r + 2 if bottom > yv - r - 1 else 0), bottom),
                    str(v),
                    font=_font(vfs),
                    fill=scene.series_colors[s],
                    anchor="ld" if bottom > yv - r - 1 else "md",
                    stroke_width=max(1, vfs // 10),
                    stroke_fill=(255, 255, 255),
                )
                prev_bottom = bottom


def _draw_table(d: ImageDraw.ImageDraw, p: Panel, years: list[int], fs: int) -> None:
    x0, y0, x1, y1 = p.bbox
    tx0, ty0, tx1 = int(x0 + fs * 0.8), int(y0 + fs * 2.6), int(x1 - fs * 0.8)
    n_rows, n_cols = len(p.series) + 1, len(years) + 1
    rh = min(fs * 1.9, (y1 - fs * 0.8 - ty0) / n_rows)
    cw = (tx1 - tx0) / n_cols
    tfs = int(min(fs * 0.9, rh * 0.55, cw / 3.6))
    for i in range(n_rows + 1):
        yy = int(ty0 + i * rh)
        d.line((tx0, yy, tx1, yy), fill=(130, 130, 130), width=1)
    for j in range(n_cols + 1):
        xx = int(tx0 + j * cw)
        d.line((xx, ty0, xx, int(ty0 + n_rows * rh)), fill=(130, 130, 130), width=1)
    d.rectangle((tx0 + 1, ty0 + 1, tx1 - 1, int(ty0 + rh) - 1), fill=(225, 232, 245))
    cells = [["Series"] + [str(y) for y in years]] + [[s] + [str(v) for v in vals] for s, vals in p.series.items()]
    for i, row in enumerate(cells):
        for j, txt in enumerate(row):
            _text(d, (int(tx0 + (j + 0.5) * cw), int(ty0 + (i + 0.5) * rh)), txt, tfs, anchor="mm")


def _draw_icon(d: ImageDraw.ImageDraw, shape: str, x: int, y: int, r: float, color: tuple[int, int, int]) -> None:
    if shape == "circle":
        d.ellipse((x - r, y - r, x + r, y + r), fill=color)
    elif shape == "square":
        d.rectangle((x - r, y - r, x + r, y + r), fill=color)
    elif shape == "cross":
        t = r / 3
        d.rectangle((x - r, y - t, x + r, y + t), fill=color)
        d.rectangle((x - t, y - r, x + t, y + r), fill=color)
    elif shape == "triangle":
        d.polygon([(x, y - r), (x - r, y + r), (x + r, y + r)], fill=color)
    elif shape == "diamond":
        d.polygon([(x, y - r), (x + r, y), (x, y + r), (x - r, y)], fill=color)
    else:  # hexagon
        d.regular_polygon((x, y, r), 6, fill=color)


def render_map(scene: MapScene) -> Image.Image:
    fs = base_font_size(scene.width, scene.height)
    img = Image.new("RGB", (scene.width, scene.height), (246, 243, 236))
    d = ImageDraw.Draw(img)
    tb = scene.layouts[0].bbox
    _text(d, ((tb[0] + tb[2]) // 2, (tb[1] + tb[3]) // 2), scene.title, int(fs * 1.8), anchor="mm")
    x0, y0, x1, y1 = scene.map_box
    cw, ch = scene.cell_size()
    d.rectangle(scene.map_box, fill=(236, 242, 230), outline=(90, 90, 90), width=max(1, fs // 8))
    for c in range(scene.cols + 1):
        d.line((int(x0 + c * cw), y0, int(x0 + c * cw), y1), fill=(190, 190, 190), width=1)
    for r in range(scene.rows + 1):
        d.line((x0, int(y0 + r * ch), x1, int(y0 + r * ch)), fill=(190, 190, 190), width=1)
    for c in range(scene.cols):
        cx = int(x0 + (c + 0.5) * cw)
        _text(d, (cx, y0 - fs // 3), chr(ord("A") + c), fs, anchor="md")
        _text(d, (cx, y1 + fs // 3), chr(ord("A") + c), fs, anchor="ma")
    for r in range(scene.rows):
        cy = int(y0 + (r + 0.5) * ch)
        _text(d, (x0 - fs // 3, cy), str(r + 1), fs, anchor="rm")
        _text(d, (x1 + fs // 3, cy), str(r + 1), fs, anchor="lm")
    sw = max(2, fs // 2)
    for name, orient, pos in scene.streets:
        if orient == "h":
            d.line((x0, pos, x1, pos), fill=(255, 255, 255), width=sw)
            _text(d, (int(x0 + cw * 0.6), pos), name, int(fs * 0.7), fill=(110, 110, 110), anchor="lm")
        else:
            d.line((pos, y0, pos, y1), fill=(255, 255, 255), width=sw)
            _text(d, (pos, int(y1 - ch * 0.2)), name, int(fs * 0.7), fill=(110, 110, 110), anchor="mm")
    shapes = {c: (s, col) for c, s, col in scene.categories}
    icon = fs * 0.7
    for p in scene.places:
        shape, color = shapes[p.category]
        _draw_icon(d, shape, p.x, p.y, icon, color)
        _text(d, (int(p.x + icon + fs * 0.3), p.y), p.name, int(fs * 0.85), anchor="lm")
    lb = scene.legend_bbox
    d.rectangle(lb, fill=(255, 255, 255), outline=(90, 90, 90), width=max(1, fs // 10))
    _text(d, (lb[0] + fs // 2, lb[1] + fs // 2), "Legend", int(fs * 1.1))
    for i, (cat, shape, color) in enumerate(scene.categories):
        y = int(lb[1] + fs * (2.4 + 1.6 * i))
        _draw_icon(d, shape, lb[0] + int(fs * 1.1), y, icon, color)
        _text(d, (lb[0] + int(fs * 2.2), y), cat, fs, anchor="lm")
    return img


# ----------------------------------------------------------------------------------- dataset
@dataclass
class DemoItem:
    """One generated image with its scene and questions (before writing)."""

    index: int
    subset: str  # chart | map
    file_name: str  # relative to the output dir
    scene: ChartScene | MapScene
    questions: list[Question]


def image_rng(seed: int, index: int) -> random.Random:
    return random.Random(f"demo-bench:{seed}:{index}")


def image_size(rng: random.Random, min_side: int, max_side: int) -> tuple[int, int]:
    return rng.randint(min_side, max_side), rng.randint(min_side, max_side)


def build_item(
    seed: int,
    index: int,
    *,
    subset: str,
    n_questions: int,
    size: tuple[int, int] | None,
    min_side: int,
    max_side: int,
    f_rate: float,
) -> DemoItem:
    rng = image_rng(seed, index)
    w, h = size if size else image_size(rng, min_side, max_side)
    scene: ChartScene | MapScene
    if subset == "chart":
        scene = chart = build_chart_scene(rng, w, h)
        qs = chart_questions(rng, chart, n_questions, f_rate)
    else:
        scene = map_scene = build_map_scene(rng, w, h)
        qs = map_questions(rng, map_scene, n_questions, f_rate)
    return DemoItem(index, subset, f"images/{subset}/{subset}_{index:04d}.png", scene, qs)


def render(item: DemoItem) -> Image.Image:
    return render_chart(item.scene) if isinstance(item.scene, ChartScene) else render_map(item.scene)


def records(item: DemoItem) -> list[JSONObject]:
    s = item.scene
    infos = {str(l.layout_id): {"layout_id": l.layout_id, "bbox": list(l.bbox), "label": l.label} for l in s.layouts}
    return [
        {
            "question_id": f"{item.subset}_{item.index:04d}_q{k}",
            "file_name": item.file_name,
            "subset": item.subset,
            "question": q.question,
            "options": q.options_text(),
            "answer": q.answer,
            "explanation": q.explanation,
            "target_layouts": q.target_layouts,
            "layout_infos": infos,
            "img_width": s.width,
            "img_height": s.height,
            "question_type": q.kind,
        }
        for k, q in enumerate(item.questions)
    ]


def write_image(item: DemoItem, out_dir: Path, compress_level: int = 3) -> bool:
    """Render and save atomically unless a file of the right size is already there (resume)."""
    path = out_dir / item.file_name
    if path.exists():
        try:
            with Image.open(path) as im:
                if im.size == (item.scene.width, item.scene.height):
                    return False
        except OSError:
            pass  # unreadable leftover: redraw it
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_writer(path, "wb") as f:
        render(item).save(f, format="PNG", compress_level=compress_level)
    return True


def write_metadata(items: list[DemoItem], out_dir: Path) -> Path:
    path = out_dir / "metadata.jsonl"
    write_jsonl_atomic(path, (rec for item in items for rec in records(item)))
    return path


def plan(
    num_images: int, *, seed: int, chart_fraction: float, questions_per_image: int, num_questions: int | None
) -> list[tuple[int, str, int]]:
    """(index, subset, number of questions) per image; deterministic for the seed."""
    rng = random.Random(f"demo-bench-plan:{seed}")
    n_chart = round(num_images * chart_fraction)
    subsets = ["chart"] * n_chart + ["map"] * (num_images - n_chart)
    rng.shuffle(subsets)
    if num_questions is None:
        counts = [questions_per_image] * num_images
    else:
        if num_questions < num_images:
            raise ValueError("num_questions must be at least num_images (one question per image minimum)")
        base, extra = divmod(num_questions, num_images)
        counts = [base + (1 if i < extra else 0) for i in range(num_images)]
    return [(i, s, k) for i, (s, k) in enumerate(zip(subsets, counts))]


def draw_demo(
    out_dir: Path, num_images: int, *, seed: int, questions_per_image: int, min_side: int
) -> tuple[list[DemoItem], Path]:
    """The offline data demos' inputs: ``num_images`` images (half charts, half maps, sides ``min_side`` to 1.4x it)
    with ``questions_per_image`` questions each, drawn under ``out_dir`` (images already there with the right size
    are kept) with their ``metadata.jsonl``. Returns the items and that file."""
    layout = plan(
        num_images, seed=seed, chart_fraction=0.5, questions_per_image=questions_per_image, num_questions=None
    )
    items = [
        build_item(
            seed, i, subset=s, n_questions=k, size=None, min_side=min_side, max_side=int(min_side * 1.4), f_rate=0.1
        )
        for i, s, k in layout
    ]
    for item in items:
        write_image(item, out_dir)
    return items, write_metadata(items, out_dir)
