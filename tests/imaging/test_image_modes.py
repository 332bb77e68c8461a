"""A 16-bit grayscale PNG and an EXIF-rotated JPEG are sent as the released harness sends them:
the 16-bit values clipped to 255 by Pillow's ``convert("RGB")`` (a ramp 0..65535 turns white after its first
0.4 %), the JPEG in its stored orientation (EXIF Orientation ignored). ``tests/golden/image_modes.json`` was
recorded by running the released ``prepare_image`` (tests/support/image_modes.py); docs/fidelity.md row 19a."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import PIL
import pytest

from insight_o3.imaging.images import ImageStore, Resize
from tests.support.image_modes import CASES, make_images, stats

GOLDEN = json.loads((Path(__file__).parents[1] / "golden" / "image_modes.json").read_text())


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    root = tmp_path_factory.mktemp("modes")
    make_images(root)
    return root


@pytest.mark.parametrize("case", GOLDEN["cases"], ids=lambda c: f"{c['file']}@{c['img_max_pixels']}")
def test_sent_as_the_released_harness_sends_it(images, case):
    assert [(c["file"], c["img_max_pixels"]) for c in GOLDEN["cases"]] == CASES
    store = ImageStore()
    url = store.get(images / case["file"], Resize.fit(case["img_max_pixels"])).data_url
    got, want = stats(base64.b64decode(url.split(",", 1)[1])), case["released"]
    assert got["size"] == want["size"]  # the EXIF-rotated JPEG keeps its stored 320x200, as the release sends it
    assert got["mean_rgb"] == pytest.approx(want["mean_rgb"], abs=0.5)  # 16-bit: clipped white, as the release
    assert got["top_left_rgb"] == pytest.approx(want["top_left_rgb"], abs=3)
    if PIL.__version__ == GOLDEN["pillow"]:
        assert got["sha256"] == want["sha256"]  # the same bytes under the Pillow the golden was recorded with
