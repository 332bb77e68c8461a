"""Inputs of ``build_region_localization``: images with layout-detector JSON whose chart boxes are known, and the
command line that describes them against a scripted endpoint."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from PIL import Image

N_IMAGES = 3  # 3 charts per image -> 9 boxes


def make_inputs(tmp: Path) -> tuple[Path, Path]:
    """``images/`` with :data:`N_IMAGES` images and ``layouts/`` with their detector JSON: 3 charts and a header each."""
    img_dir, lay_dir = tmp / "images", tmp / "layouts"
    img_dir.mkdir()
    lay_dir.mkdir()
    for i in range(N_IMAGES):
        Image.new("RGB", (600, 800), (240, 240, 240)).save(img_dir / f"info{i}.png")
        boxes = [
            {"cls_id": 0, "label": "chart", "score": 0.9, "coordinate": [50, 50 + 250 * k, 400, 250 + 250 * k]}
            for k in range(3)
        ]
        boxes.append({"cls_id": 1, "label": "header", "score": 0.9, "coordinate": [0, 0, 600, 40]})
        (lay_dir / f"info{i}.json").write_text(
            json.dumps({"input_path": f"/elsewhere/info{i}.png", "page_index": None, "boxes": boxes})
        )
    return img_dir, lay_dir


def command(img_dir, lay_dir, out, base_url, concurrency=2) -> list[str]:
    """``python -m insight_o3.scripts.build_region_localization`` over them against a scripted describer."""
    return [
        sys.executable,
        "-m",
        "insight_o3.scripts.build_region_localization",
        "--layouts",
        str(lay_dir),
        "--image_dir",
        str(img_dir),
        "--out_dir",
        str(out),
        "--model",
        "scripted",
        "--base_url",
        base_url,
        "--api_key",
        "sk-test-secret-123",
        "--concurrency",
        str(concurrency),
        "--no_progress",
        "--max_retries",
        "0",
    ]
