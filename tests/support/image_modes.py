"""Images whose decoding differs between harnesses: a 16-bit grayscale PNG and an EXIF-rotated JPEG.

``make_images(dir)`` writes them deterministically; ``tests/golden/image_modes.json`` holds what the released
harness (m-Just/InSight-o3 ``21acec8``, ``insight_o3.inference.prepare_image``: ``Image.open(path).convert("RGB")``,
the LANCZOS budget, JPEG at PIL's default quality) sends for each, recorded by ``record(dir)`` run with the
released tree on ``sys.path`` (see tests/golden/README.md); ``stats(jpeg_bytes)`` is what is compared.
"""

from __future__ import annotations

import base64
import hashlib
import io
from pathlib import Path

import numpy as np
from PIL import Image

#: (file name, image budget in pixels or None) of every recorded case.
CASES = [
    ("gray16.png", None),
    ("gray16.png", 20000),
    ("exif_rot6.jpg", None),
    ("exif_rot6.jpg", 20000),
]
ORIENTATION = 0x0112


def make_images(root: Path) -> None:
    """A 300x200 16-bit grayscale PNG (a horizontal ramp 0..65535, mode ``I;16``) and a 320x200 JPEG, red in its
    stored top-left quarter and blue elsewhere, with EXIF Orientation 6 (shown rotated 90 degrees clockwise)."""
    root.mkdir(parents=True, exist_ok=True)
    ramp = (np.arange(300, dtype=np.uint32) * 65535 // 299).astype(np.uint16)
    Image.fromarray(np.tile(ramp, (200, 1))).save(root / "gray16.png")
    im = Image.new("RGB", (320, 200), (20, 40, 220))
    im.paste((230, 20, 20), (0, 0, 160, 100))
    exif = Image.Exif()
    exif[ORIENTATION] = 6
    im.save(root / "exif_rot6.jpg", quality=95, exif=exif)


def stats(jpeg: bytes) -> dict:
    """What a sent image is compared by: its size, its mean RGB and its top-left pixel (decoded), and the sha256
    of its bytes (equal bytes under the same Pillow)."""
    im = Image.open(io.BytesIO(jpeg))
    arr = np.asarray(im.convert("RGB"), dtype=np.float64)
    return {
        "size": list(im.size),
        "mean_rgb": [round(float(v), 1) for v in arr.reshape(-1, 3).mean(axis=0)],
        "top_left_rgb": [int(v) for v in arr[0, 0]],
        "sha256": hashlib.sha256(jpeg).hexdigest(),
    }


def record(root: Path) -> list[dict]:
    """Run the released ``prepare_image`` (importable as ``insight_o3.inference`` from the released tree) on the
    cases; what ``tests/golden/image_modes.json`` holds."""
    from insight_o3.inference import prepare_image  # the RELEASED module: run with its tree first on sys.path

    make_images(root)
    out = []
    for name, budget in CASES:
        jpeg = base64.b64decode(prepare_image(str(root / name), None, budget))
        out.append({"file": name, "img_max_pixels": budget, "released": stats(jpeg)})
    return out
