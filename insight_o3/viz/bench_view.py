"""Browse a benchmark in the ``metadata.jsonl`` layout (O3-Bench, the demo benchmark, others).

O3-Bench lines carry ``layout_infos`` (``{"1": {"layout_id", "bbox", "label"}, ...}``, boxes in
original pixels) and ``target_layouts`` (the ids of the layouts the answer needs); other benchmarks
simply have none. The statistics mirror the paper's Figure 4 (layouts per sample by category) and
Figure 5 (resolution distribution).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from PIL import Image

from ..evaluation.samples import load_samples
from ..imaging.images import ImageError, image_size
from ..protocol.sample import Sample
from .draw import LAYOUT_COLOR, TARGET_COLOR, DrawBox, ImageResolver, draw_boxes, image_data_url, placeholder
from .plots import new_figure
from .templating import render


@dataclass
class BenchLayout:
    layout_id: str
    bbox: tuple[float, float, float, float] | None
    label: str
    is_target: bool


def load_bench(
    ann_file: str | os.PathLike, img_dir: str | os.PathLike | None = None, check_images: bool = True
) -> list[Sample]:
    """The samples of an annotation file (images resolved under ``img_dir``, default: the file's
    directory). Errors name the file, line and field (see :mod:`insight_o3.evaluation.samples`)."""
    ann_file = Path(ann_file)
    return load_samples(ann_file, img_dir if img_dir is not None else ann_file.parent, check_images=check_images)


def _bbox(v: Any) -> tuple[float, float, float, float] | None:
    if isinstance(v, (list, tuple)) and len(v) == 4:
        try:
            return tuple(float(x) for x in v)  # type: ignore[return-value]
        except (TypeError, ValueError):
            return None
    return None


def layouts(sample: Sample) -> list[BenchLayout]:
    """All annotated layouts of a sample, targets flagged (empty when the benchmark has none)."""
    infos = sample.extra.get("layout_infos") or {}
    if isinstance(infos, list):
        infos = {str(i.get("layout_id", k)): i for k, i in enumerate(infos) if isinstance(i, dict)}
    raw_targets = sample.extra.get("target_layouts") or []
    if not isinstance(raw_targets, list):
        raw_targets = [raw_targets]
    target_ids = {str(t) for t in raw_targets if not isinstance(t, dict)}
    out = []
    for key, info in infos.items():
        if not isinstance(info, dict):
            continue
        lid = str(info.get("layout_id", key))
        out.append(
            BenchLayout(
                lid, _bbox(info.get("bbox")), str(info.get("label", "")), lid in target_ids or str(key) in target_ids
            )
        )
    for t in raw_targets:  # targets given inline as {"bbox": ...} rather than by id
        if isinstance(t, dict) and _bbox(t.get("bbox")):
            out.append(BenchLayout(str(t.get("layout_id", "")), _bbox(t.get("bbox")), str(t.get("label", "")), True))
    return out


def _image_size(sample: Sample) -> tuple[int, int] | None:
    w, h = sample.extra.get("img_width"), sample.extra.get("img_height")
    if isinstance(w, (int, float)) and isinstance(h, (int, float)) and w > 0 and h > 0:
        return int(w), int(h)
    try:
        return image_size(sample.image_path)
    except ImageError:
        return None


def bench_table(samples: list[Sample]) -> pd.DataFrame:
    """One row per sample: key, category, image, width, height, megapixels, long side, n_layouts,
    n_targets, answer (sizes from ``img_width``/``img_height`` or the image header)."""
    rows = []
    for s in samples:
        size = _image_size(s)
        lay = layouts(s)
        rows.append(
            {
                "key": s.key,
                "category": s.category,
                "image": s.image,
                "width": size[0] if size else np.nan,
                "height": size[1] if size else np.nan,
                "n_layouts": len(lay),
                "n_targets": sum(x.is_target for x in lay),
                "answer": s.answer,
            }
        )
    df = pd.DataFrame(rows)
    df["megapixels"] = df["width"] * df["height"] / 1e6
    df["long_side"] = df[["width", "height"]].max(axis=1)
    return df


def category_summary(df: pd.DataFrame) -> pd.DataFrame:
    """Per category: questions, distinct images, mean layouts/targets, mean width/height."""
    g = df.groupby("category")
    out = pd.DataFrame(
        {
            "questions": g.size(),
            "images": g["image"].nunique(),
            "mean_layouts": g["n_layouts"].mean(),
            "mean_targets": g["n_targets"].mean(),
            "mean_width": g["width"].mean(),
            "mean_height": g["height"].mean(),
        }
    )
    total = pd.DataFrame(
        {
            "questions": [len(df)],
            "images": [df["image"].nunique()],
            "mean_layouts": [df["n_layouts"].mean()],
            "mean_targets": [df["n_targets"].mean()],
            "mean_width": [df["width"].mean()],
            "mean_height": [df["height"].mean()],
        },
        index=["all"],
    )
    return pd.concat([out, total]).round(2)


def plot_category_counts(df: pd.DataFrame) -> Figure:
    fig, ax = new_figure(1, 1, (5, 3))
    counts = df["category"].value_counts().sort_index()
    ax.bar(counts.index.astype(str), counts.values, color="#4C72B0")
    for i, v in enumerate(counts.values):
        ax.text(i, v, str(v), ha="center", va="bottom", fontsize=9)
    ax.set_ylabel("questions")
    ax.set_title("Questions per category")
    fig.tight_layout()
    return fig


def plot_layout_counts(df: pd.DataFrame) -> Figure:
    """Figure 4-style: distribution of the number of layouts and of target layouts per sample,
    one series per category."""
    fig, axes = new_figure(1, 2, (10, 3.4))
    for ax, col, title in (
        (axes[0], "n_layouts", "Layouts per sample"),
        (axes[1], "n_targets", "Target layouts per sample"),
    ):
        cats = sorted(df["category"].astype(str).unique())
        hi = int(df[col].max()) if len(df) else 0
        bins = np.arange(0, hi + 2) - 0.5
        ax.hist([df.loc[df["category"].astype(str) == c, col] for c in cats], bins=bins, label=cats, stacked=False)
        ax.set_xlabel(col.replace("n_", "number of ").replace("_", " "))
        ax.set_ylabel("samples")
        ax.set_title(f"{title} (mean {df[col].mean():.1f})" if len(df) else title)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_resolution(df: pd.DataFrame) -> Figure:
    """Figure 5-style: width x height scatter by category and a histogram of the longer side."""
    fig, axes = new_figure(1, 2, (10, 3.6))
    d = df.dropna(subset=["width", "height"]).drop_duplicates("image")
    for c in sorted(d["category"].astype(str).unique()):
        sub = d[d["category"].astype(str) == c]
        axes[0].scatter(sub["width"], sub["height"], s=18, alpha=0.7, label=c)
    axes[0].set_xlabel("width (px)")
    axes[0].set_ylabel("height (px)")
    axes[0].set_title(f"Image resolution ({len(d)} images)")
    if len(d):
        axes[0].legend(fontsize=8)
        axes[1].hist(d["long_side"], bins=min(20, max(5, len(d))), color="#55A868")
        axes[1].set_title(f"Longer side (mean W {d['width'].mean():.0f}, H {d['height'].mean():.0f})")
    axes[1].set_xlabel("longer side (px)")
    axes[1].set_ylabel("images")
    fig.tight_layout()
    return fig


def draw_sample(
    sample: Sample, max_px: int = 1024, show_all_layouts: bool = True, resolver: ImageResolver | None = None
) -> Image.Image:
    """The sample's image with its target layouts (red) and the other layouts (grey, dashed)."""
    resolver = resolver or ImageResolver()
    try:
        img = resolver.open(sample.image_path)
    except ImageError as e:
        return placeholder(str(e))
    boxes = []
    for lay in layouts(sample):
        if lay.bbox is None or (not lay.is_target and not show_all_layouts):
            continue
        label = f"{lay.layout_id} {lay.label}".strip()
        boxes.append(
            DrawBox(lay.bbox, label, TARGET_COLOR if lay.is_target else LAYOUT_COLOR, dashed=not lay.is_target)
        )
    boxes.sort(key=lambda b: b.color == TARGET_COLOR)  # targets on top
    return draw_boxes(img, boxes, max_px)


def sample_html(sample: Sample, thumb_px: int = 768, resolver: ImageResolver | None = None) -> str:
    """An HTML card: image with layouts, question, options, answer, explanation (inline image)."""
    img = draw_sample(sample, thumb_px, resolver=resolver)
    return render(
        "bench_sample.html.j2",
        s=sample,
        src=image_data_url(img),
        targets=[f"{x.layout_id} ({x.label})" for x in layouts(sample) if x.is_target],
        explanation=str(sample.extra.get("explanation") or ""),
    )
