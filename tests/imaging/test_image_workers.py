"""Where image work runs: every distinct view is rendered once, askers of a view being rendered wait
without occupying a worker (so distinct images render in parallel), and worker processes produce
exactly the bytes of an in-process render."""

from __future__ import annotations

import asyncio
import base64
import io
import signal
import threading

import numpy as np
import pytest
from PIL import Image

from insight_o3.imaging.images import ImageError, ImageStore, Resize
from insight_o3.imaging.view_ops import Crop, Resample, ResizeTo


@pytest.fixture
def images(tmp_path):
    paths = []
    rng = np.random.default_rng(0)
    for i in range(3):
        p = tmp_path / f"im{i}.png"
        Image.fromarray(rng.integers(0, 256, (120 + 10 * i, 160, 3), dtype=np.uint8)).save(p)
        paths.append(str(p))
    return paths


def test_a_waiting_duplicate_does_not_hold_a_worker(images, monkeypatch):
    """Two workers, asks [A, A, B]: B must start while A renders. (Before, the second A blocked the
    second worker waiting for the first, so B waited for A: one image at a time on any core count.)"""
    store = ImageStore(workers=2, processes=False)
    running, peak, lock = set(), [0], threading.Lock()
    both_running = threading.Event()
    real = ImageStore._render

    def render(self, path, resize, region):
        with lock:
            running.add(path)
            peak[0] = max(peak[0], len(running))
            if len(running) == 2:
                both_running.set()
        try:
            assert both_running.wait(10), "the two distinct images never rendered at the same time"
            return real(self, path, resize, region)
        finally:
            with lock:
                running.discard(path)

    monkeypatch.setattr(ImageStore, "_render", render)
    a, b = images[0], images[1]

    async def go():
        return await asyncio.gather(store.aget(a), store.aget(a), store.aget(b))

    ra1, ra2, rb = asyncio.run(go())
    store.close()
    assert ra1 is ra2 and rb.ref.path == b
    assert peak[0] == 2
    assert store.stats["encoded"] == 2 and store.stats["decoded"] == 2


@pytest.mark.smoke
def test_process_workers_render_the_same_bytes_once_each(images):
    resize = Resize.fit(9000)
    local = ImageStore(processes=False, workers=1)
    expected = [local.get(p, resize) for p in images] + [local.get(images[0], resize, (10, 10, 90, 70))]
    local.close()
    store = ImageStore(processes=True, workers=2, originals_cached=1)

    async def go():
        asks = [store.aget(p, resize) for p in images for _ in range(4)]
        asks.append(store.aget(images[0], resize, (10, 10, 90, 70)))
        return await asyncio.gather(*asks)

    got = asyncio.run(go())
    try:
        assert [g.data_url for g in got[::4]] == [e.data_url for e in expected]
        assert all(got[i].data_url == got[i - i % 4].data_url for i in range(12))
        assert got[12].data_url == expected[3].data_url and got[12].ref == expected[3].ref
        assert [g.ref for g in got[:12:4]] == [e.ref for e in expected[:3]]
        assert store.stats["encoded"] == 4  # 3 whole images + 1 crop, whatever the askers
        assert store.stats["decoded"] == 3  # the crop goes to the worker holding its original
    finally:
        store.close()


def test_crops_go_to_the_worker_that_decoded_their_original(images):
    """An agent's crops of an image, asked at once while two workers are free, are rendered by the worker that
    decoded the original (:mod:`insight_o3.imaging.render_pool`): one decode. (A shared queue handed them to both
    workers, and the second decoded the original again.) The bytes are a thread-mode store's."""
    resize = Resize.fit(9000)
    crops = [(10 * k, 5 * k, 10 * k + 60, 5 * k + 50) for k in range(6)]
    local = ImageStore(processes=False, workers=1)
    expected = [local.get(images[0], resize)] + [local.get(images[0], resize, c) for c in crops]
    local.close()
    store = ImageStore(processes=True, workers=2, originals_cached=2)

    async def go():
        await asyncio.gather(store.aget(images[1], resize), store.aget(images[2], resize))  # both workers started
        whole = await store.aget(images[0], resize)
        return [whole, *await asyncio.gather(*(store.aget(images[0], resize, c) for c in crops))]

    try:
        got = asyncio.run(go())
        assert [g.data_url for g in got] == [e.data_url for e in expected]
        assert [g.ref for g in got] == [e.ref for e in expected]
        assert store.stats["encoded"] == 9 and store.stats["decoded"] == 3  # images[0] once
    finally:
        store.close()


def test_worker_errors_are_image_errors(tmp_path):
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    store = ImageStore(processes=True, workers=1)
    try:
        with pytest.raises(ImageError, match="cannot decode image .*bad.png"):
            asyncio.run(store.aget(str(bad)))
        with pytest.raises(ImageError, match="image file not found"):
            asyncio.run(store.aget(str(tmp_path / "missing.png")))
    finally:
        store.close()


def test_a_cancelled_asker_does_not_cancel_the_shared_render(images):
    store = ImageStore(processes=False, workers=1)

    async def go():
        first = asyncio.ensure_future(store.aget(images[2]))
        second = asyncio.ensure_future(store.aget(images[2]))
        await asyncio.sleep(0)
        first.cancel()
        return await second

    enc = asyncio.run(go())
    store.close()
    assert enc.ref.path == images[2] and store.stats["encoded"] == 1


def test_open_image_enforces_its_limit_without_process_wide_state(images, monkeypatch, tmp_path):
    """``open_image`` runs on many threads at once: it must not change Pillow's process-wide
    ``MAX_IMAGE_PIXELS`` or the warning filters while decoding (it used to, per call), and still
    reject an image over its pixel limit, and a corrupt file, with an ImageError naming the file."""
    import warnings

    from insight_o3.imaging import images as images_mod

    seen = []
    real_open = Image.open

    def spy(*a, **kw):
        seen.append((Image.MAX_IMAGE_PIXELS, list(warnings.filters)))
        return real_open(*a, **kw)

    monkeypatch.setattr(Image, "open", spy)
    outside = (Image.MAX_IMAGE_PIXELS, list(warnings.filters))
    assert images_mod.open_image(images[0]).size == (160, 120)
    with pytest.raises(ImageError, match=r"too large to decode safely \(160x120 px > 5000 px\): .*im0.png"):
        images_mod.open_image(images[0], max_pixels=5000)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not an image")
    with pytest.raises(ImageError, match="cannot decode image .*bad.png"):
        images_mod.open_image(bad)
    assert seen == [outside] * 3
    # set once at import, so Pillow's own check never rejects what the default limit accepts
    assert Image.MAX_IMAGE_PIXELS is None or Image.MAX_IMAGE_PIXELS >= images_mod.DEFAULT_MAX_DECODE_PIXELS


def test_pillow_limit_is_only_ever_raised(monkeypatch):
    from insight_o3.imaging import images as images_mod
    from insight_o3.imaging.images import _init_worker, _raise_pillow_limit

    monkeypatch.setattr(images_mod, "_WORKER_STORE", None)  # restored after the test
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)
    _raise_pillow_limit(500)
    assert Image.MAX_IMAGE_PIXELS == 1000
    sigint = signal.getsignal(signal.SIGINT)
    try:  # a worker process's initializer applies its store's limit (and ignores Ctrl-C: its owner stops it)
        _init_worker(4000, 10**9, "JPEG", 90, 0)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:  # this process is no worker: an ignored SIGINT would be inherited by every command a later test starts
        signal.signal(signal.SIGINT, sigint)
    assert Image.MAX_IMAGE_PIXELS == 4000
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", None)  # Pillow's check switched off stays off
    _raise_pillow_limit(500)
    assert Image.MAX_IMAGE_PIXELS is None


def test_a_pipeline_view_is_the_harness_own_resizes_and_crops(images):
    """A pipeline of operations on the original (Pixel-Reasoner's crops of resized images): the file's pixels through
    exactly those PIL operations, in a worker process as in-process."""
    bicubic_op = Resample.BICUBIC
    resize = Resize((ResizeTo((200, 150), bicubic_op), Crop((10, 20, 110, 90)), ResizeTo((56, 84), bicubic_op)))
    bicubic = Image.Resampling.BICUBIC
    want = Image.open(images[0]).convert("RGB").resize((200, 150), bicubic)
    want = want.crop((10, 20, 110, 90)).resize((56, 84), bicubic)
    local = ImageStore(processes=False, workers=1, fmt="PNG")
    workers = ImageStore(processes=True, workers=1, fmt="PNG")
    try:
        got = [local.get(images[0], resize), asyncio.run(workers.aget(images[0], resize))]
    finally:
        local.close()
        workers.close()
    for enc in got:
        im = Image.open(io.BytesIO(base64.b64decode(enc.data_url.split(",", 1)[1])))
        assert im.convert("RGB").tobytes() == want.tobytes()
        assert enc.ref.size == (56, 84)
