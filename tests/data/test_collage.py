"""Collage synthesis (Algorithm 1): constraints on every collage, exact target mapping, determinism."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from insight_o3.data.collage import (
    CollageConfig,
    CollageInfeasible,
    PoolArrays,
    panelize,
    plan_collage,
    render_collage,
    scale_interval,
)
from insight_o3.data.source_pool import PoolError, filter_small_targets, load_pool
from tests.support.collage_config import CFG, CFG_FLAGS

REPO = Path(__file__).resolve().parents[2]


def _smooth_image(rng: np.random.Generator, w: int, h: int) -> np.ndarray:
    """Low-frequency colour pattern (so resampling differences stay small) plus a few shapes."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    f = rng.uniform(0.005, 0.03, size=(3, 2))
    ph = rng.uniform(0, 6.28, size=3)
    img = np.stack([127 + 120 * np.sin(xx * f[c, 0] + yy * f[c, 1] + ph[c]) for c in range(3)], axis=-1)
    return img.clip(0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def pool_file(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pool")
    rng = np.random.default_rng(123)
    rows = []
    for i in range(40):
        w, h = int(rng.integers(320, 900)), int(rng.integers(320, 900))
        Image.fromarray(_smooth_image(rng, w, h)).save(d / f"src{i}.png")
        bw, bh = int(rng.integers(20, 60)), int(rng.integers(20, 60))
        x, y = int(rng.integers(0, w - bw)), int(rng.integers(0, h - bh))
        rows.append(
            {
                "id": f"s{i}",
                "image": f"src{i}.png",
                "width": w,
                "height": h,
                "bbox": [x, y, x + bw, y + bh],
                "question": f"What is in region {i}?",
                "answer": f"thing {i}",
                "options": ["A. one", "B. two"] if i % 2 else None,
                "source": "synthetic",
            }
        )
    # one item whose target is too large for C.1 (filtered out)
    rows.append({**rows[0], "id": "big", "bbox": [0, 0, rows[0]["width"], rows[0]["height"]]})
    path = d / "pool.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _check_plan(plan, pool: PoolArrays, cfg: CollageConfig) -> None:
    W, H = plan.width, plan.height
    assert W % cfg.grid == 0 and H % cfg.grid == 0
    cover = np.zeros((H, W), dtype=np.int32)
    for t in plan.tiles:
        x1, y1, x2, y2 = t.box
        assert 0 <= x1 < x2 <= W and 0 <= y1 < y2 <= H
        cover[y1:y2, x1:x2] += 1
    assert cover.max() == 1, "tiles overlap"
    assert cover.min() == 1, "canvas not fully covered"
    tgt = plan.target
    bx1, by1, bx2, by2 = plan.target_bbox
    assert (bx2 - bx1) * (by2 - by1) / (W * H) <= cfg.bbox_cap + 1e-12
    tw, th = tgt.box[2] - tgt.box[0], tgt.box[3] - tgt.box[1]
    assert min(tw, th) >= cfg.min_short_edge
    ids = sorted(t.tile_id for t in plan.tiles)
    assert ids == list(range(1, len(plan.tiles) + 1))
    lb = tgt.label_box
    assert lb[2] <= bx1 or lb[0] >= bx2 or lb[3] <= by1 or lb[1] >= by2, "ID label covers the target bbox"
    paths = [pool.items[t.pool_index].image for t in plan.tiles]
    assert len(set(paths)) == len(paths), "an image appears twice in one collage"


def test_every_plan_satisfies_the_constraints(pool_file):
    items = filter_small_targets(load_pool(pool_file))
    assert "big" not in {it.id for it in items}
    pool = PoolArrays.build(items)
    usage = np.zeros(len(pool))
    rng = np.random.default_rng(0)
    made = 0
    for k in range(len(pool)):
        try:
            plan = plan_collage(pool, k, CFG, rng, usage)
        except CollageInfeasible:
            continue
        _check_plan(plan, pool, CFG)
        made += 1
    assert made >= len(pool) * 0.9
    assert usage.sum() > made  # fills counted


def test_target_bbox_crops_to_the_source_pixels(pool_file):
    items = filter_small_targets(load_pool(pool_file))
    pool = PoolArrays.build(items)
    rng = np.random.default_rng(5)
    for k in range(3):
        plan = plan_collage(pool, k, CFG, rng, np.zeros(len(pool)))
        canvas = np.asarray(render_collage(plan, pool)).astype(np.float32)
        src = Image.open(items[k].image).convert("RGB")
        bx1, by1, bx2, by2 = plan.target_bbox
        # integer canvas box strictly inside the float box, and the source pixels it maps back to
        cx1, cy1, cx2, cy2 = int(np.ceil(bx1)), int(np.ceil(by1)), int(np.floor(bx2)), int(np.floor(by2))
        sx, sy = plan.target.scale
        x0, y0 = plan.target.box[:2]
        sbox = ((cx1 - x0) / sx, (cy1 - y0) / sy, (cx2 - x0) / sx, (cy2 - y0) / sy)
        ref = np.asarray(src.resize((cx2 - cx1, cy2 - cy1), Image.Resampling.BICUBIC, box=sbox)).astype(np.float32)
        got = canvas[cy1:cy2, cx1:cx2]
        assert got.shape == ref.shape
        assert np.abs(got - ref).mean() < 4.0, "target bbox does not show the source bbox pixels"
        # the label is drawn somewhere on each tile: a black box under it
        lb = plan.target.label_box
        assert canvas[lb[1] + 1, lb[0] + 1].max() < 10


def test_panelize_respects_guards():
    cfg = CollageConfig(grid=32, min_panel_side=64, max_panel_area=50_000, panel_aspect=(0.5, 2.0))
    panels, residual = panelize((0, 0, 1024, 96), np.random.default_rng(1), cfg)
    assert not residual
    assert sum(w * h for _, _, w, h in panels) == 1024 * 96
    for x, _y, w, h in panels:
        assert 0.5 <= w / h <= 2.0 and w * h <= 50_000 and x % 32 == 0 and w % 32 == 0
    panels, residual = panelize((0, 0, 1024, 32), np.random.default_rng(1), cfg)
    assert residual == [(0, 0, 1024, 32)] and not panels


def test_scale_interval_constraints():
    cfg = CollageConfig(min_short_edge=200, bbox_cap=2e-4, target_scale=(0.1, 4.0))
    lo, hi = scale_interval(s_star=250_000, rho_src=0.01, r_star=1.0, canvas_area=1e7, cfg=cfg)
    assert lo == pytest.approx(200**2 / 250_000)
    assert hi == pytest.approx(2e-4 * 1e7 / (0.01 * 250_000))
    assert scale_interval(250_000, 0.039, 1.0, 2e6, cfg) is None


def test_pool_errors_name_file_line_and_field(tmp_path):
    p = tmp_path / "pool.jsonl"
    Image.new("RGB", (100, 80)).save(tmp_path / "a.png")
    good = {
        "id": "a",
        "image": "a.png",
        "width": 100,
        "height": 80,
        "bbox": [1, 1, 5, 5],
        "question": "q",
        "answer": "x",
    }
    p.write_text(json.dumps(good) + "\n{broken\n")
    with pytest.raises(PoolError, match=r"pool.jsonl:2: malformed JSON"):
        load_pool(p)
    p.write_text(json.dumps({**good, "bbox": [1, 1, 500, 5]}) + "\n")
    with pytest.raises(PoolError, match=r"pool.jsonl:1: field 'bbox'.*outside"):
        load_pool(p)
    p.write_text(json.dumps({**good, "image": "missing.png"}) + "\n")
    with pytest.raises(PoolError, match=r"pool.jsonl:1: image file not found"):
        load_pool(p)
    p.write_text(json.dumps({**good, "width": 90}) + "\n")
    with pytest.raises(PoolError, match=r"is 100x80, the row says 90x80"):
        load_pool(p)
    p.write_text(json.dumps({k: v for k, v in good.items() if k != "question"}) + "\n")
    with pytest.raises(PoolError, match=r"missing field 'question'"):
        load_pool(p)


def _run_cli(pool_file: Path, out: Path, workers: int, n: int = 5) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "insight_o3.scripts.generate_collages",
        "--source_pool",
        str(pool_file),
        "--out_dir",
        str(out),
        "--num_collages",
        str(n),
        "--seed",
        "7",
        "--num_workers",
        str(workers),
        "--chunk_size",
        "2",
        "--image_format",
        "jpg",
        "--no_progress",
        *CFG_FLAGS,
    ]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120)


def _digest(out: Path) -> tuple[str, dict]:
    rows = (out / "collages.jsonl").read_text()
    imgs = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((out / "images").glob("*.jpg"))}
    return rows, imgs


def test_cli_same_seed_same_output_any_workers_and_resume(pool_file, tmp_path):
    r1 = _run_cli(pool_file, tmp_path / "w1", 1)
    assert r1.returncode == 0, r1.stderr
    r2 = _run_cli(pool_file, tmp_path / "w2", 2)
    assert r2.returncode == 0, r2.stderr
    assert _digest(tmp_path / "w1") == _digest(tmp_path / "w2")
    rows = [json.loads(line) for line in (tmp_path / "w1" / "collages.jsonl").read_text().splitlines()]
    assert [r["index"] for r in rows] == list(range(5))
    for r in rows:
        assert f"#{r['target_tile_id']}" in r["question"]
        assert r["source_ids"][0] == r["target_source_id"]
        assert sum(t["is_target"] for t in r["tiles"]) == 1
        assert Image.open(tmp_path / "w1" / r["image"]).size == (r["width"], r["height"])
    # resume: drop the last rows (and tear a line), rerun -> identical result
    out = tmp_path / "w1"
    lines = (out / "collages.jsonl").read_text().splitlines(keepends=True)
    (out / "collages.jsonl").write_text("".join(lines[:3]) + lines[3][:20])
    os.remove(out / "images" / "collage-00000004.jpg")
    r3 = _run_cli(pool_file, out, 2)
    assert r3.returncode == 0, r3.stderr
    assert _digest(out) == _digest(tmp_path / "w2")


def test_a_pool_too_small_for_any_collage_is_an_error_with_a_hint(pool_file, tmp_path, capsys):
    """A pool too small for any collage is an error with a hint, not {"collages": 0, "failures": N} with exit 0."""
    from insight_o3.scripts import generate_collages

    small = pool_file.parent / "small.jsonl"
    small.write_text("".join(pool_file.read_text().splitlines(keepends=True)[:3]))
    out = tmp_path / "out"
    argv = ["--source_pool", str(small), "--output_dir", str(out), "--num_collages", "2", "--no_progress"]
    assert generate_collages.main(argv) == 2
    err = capsys.readouterr().err
    assert "no collage could be built from 3 pool item(s)" in err and "failures.jsonl" in err
    assert "larger pool" in err and "--canvas_area" in err
    assert len((out / "failures.jsonl").read_text().splitlines()) == 2  # the failures are kept for a look
