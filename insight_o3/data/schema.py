"""The intermediate JSONL rows written by the two training-data pipelines.

Both files are JSON Lines, one object per line, UTF-8. Image paths are relative to the directory
that holds the JSONL file (``--out_dir``) unless absolute. Boxes are ``[x1, y1, x2, y2]`` in pixels of
the image named by the row (half-open, like PIL's ``crop``). ``sample_key`` is unique per file and
is what resuming keys on. The training recipe's ``create_parquet_dataset.py`` packs these rows.

``collages.jsonl`` (``python -m insight_o3.scripts.generate_collages``), one :class:`CollageRow`:

=================  ============================================================================
sample_key         ``"collage-<index:08d>"``
index              0-based collage index (the generator is reproducible per index and seed)
image              collage image file, e.g. ``images/collage-00000012.jpg``
width, height      canvas size in pixels
question           the QA question with the target tile referenced by its visible ID
                   (``--question_template``, default ``"Look at image #{tile_id} in the collage.
                   {question}"``)
source_question    the question as in the source pool
options            list of option strings, or null for open questions
answer             ground-truth answer (as in the source pool)
target_bbox        the source bbox mapped exactly onto the canvas (floats)
target_tile_id     the visible ID of the target tile
tiles              list of :class:`TileRow` (target included), in placement order
source_ids         pool ids of all tiles, target first
target_source_id   pool id of the target item
source             the ``source`` column of the target item (e.g. ``viscot/textvqa``)
seed               the ``--seed`` of the run
attempts           rejection-loop attempts used for this collage (Algorithm 1, ``T``)
=================  ============================================================================

:class:`TileRow`: ``id`` (visible ID drawn on the tile), ``source_id``, ``image`` (source path),
``box_on_canvas`` (integer ``[x1, y1, x2, y2]``), ``crop_box_in_source`` (integer box of the source
image that was resized into the tile: the whole image for the target, a centre crop for fills),
``scale`` (``[sx, sy]``: canvas pixels per source pixel), ``label_box`` (where the ID is drawn, canvas
pixels; never overlaps the target bbox), ``is_target``.

Canvas box of a source point ``(u, v)``: ``(x1 + (u - cx1) * sx, y1 + (v - cy1) * sy)`` with
``box_on_canvas = [x1, y1, ...]`` and ``crop_box_in_source = [cx1, cy1, ...]``.

``regions.jsonl`` (``python -m insight_o3.scripts.build_region_localization``), one :class:`RegionRow`:
``sample_key`` (``"<image stem>#<box index>"``), ``image`` (path of the source image, as resolved),
``width``, ``height``, ``description`` (the model's ``region_description={...}`` content), ``bbox``,
``label`` (layout class after merging), ``source`` (``--source``, default ``infographicvqa``),
``merged_from`` (layout classes of the detections merged into this box).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..base.json_types import JSONObject


@dataclass
class TileRow:
    id: int
    source_id: str
    image: str
    box_on_canvas: list[int]
    crop_box_in_source: list[int]
    scale: list[float]
    label_box: list[int]
    is_target: bool


@dataclass
class CollageRow:
    sample_key: str
    index: int
    image: str
    width: int
    height: int
    question: str
    source_question: str
    options: list[str] | None
    answer: str
    target_bbox: list[float]
    target_tile_id: int
    tiles: list[TileRow]
    source_ids: list[str]
    target_source_id: str
    source: str
    seed: int
    attempts: int

    def to_dict(self) -> JSONObject:
        return asdict(self)


@dataclass
class RegionRow:
    sample_key: str
    image: str
    width: int
    height: int
    description: str
    bbox: list[float]
    label: str
    source: str
    merged_from: list[str] = field(default_factory=list)

    def to_dict(self) -> JSONObject:
        return asdict(self)
