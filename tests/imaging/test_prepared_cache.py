"""The prepared-image cache shared across runs: a later store (another run, another process) sends the same bytes
without decoding; every setting the bytes depend on and the source file's content are in the key; concurrent
writers and a writer killed mid-write never leave an entry that is served torn; the least recently used entries go
once the cache is over its size."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from insight_o3.imaging import prepared_cache as pc
from insight_o3.imaging.images import ImageStore, Resize
from insight_o3.imaging.prepared_cache import ImageCacheSettings, PreparedImageCache, PreparedView
from insight_o3.imaging.view_ops import FitPixels, Resample
from insight_o3.scripts import evaluate
from insight_o3.storage.atomic import atomic_writer
from tests.support import eval_bench as eb


@pytest.fixture
def image(tmp_path) -> str:
    p = tmp_path / "im.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 256, (90, 140, 3), dtype=np.uint8)).save(p)
    return str(p)


def _settings(tmp_path: Path, max_bytes: int = pc.DEFAULT_MAX_BYTES) -> ImageCacheSettings:
    return ImageCacheSettings(str(tmp_path / "cache"), max_bytes, explicit=True)


def _view(n: int, fill: int = 7) -> PreparedView:
    return PreparedView(bytes([fill]) * n, "image/jpeg", (4, 3), (0.0, 0.0, 4.0, 3.0), (4, 3))


def test_a_later_store_sends_the_same_bytes_without_decoding(tmp_path, image):
    budget = Resize.fit(3000)
    plain = ImageStore().get(image, budget, (10.0, 5.5, 80.0, 60.0))
    first = ImageStore(image_cache=_settings(tmp_path))
    assert first.get(image, budget, (10.0, 5.5, 80.0, 60.0)) == plain
    assert first.prepared_stats() | {"dir": None} == {
        "dir": None,
        "max_bytes": pc.DEFAULT_MAX_BYTES,
        "hits": 0,
        "misses": 1,
        "bytes_read": 0,
        "bytes_written": first.prepared_stats()["bytes_written"],
        "stored": 1,
        "damaged": 0,
        "evicted": 0,
    }
    second = ImageStore(image_cache=_settings(tmp_path))
    assert second.get(image, budget, (10.0, 5.5, 80.0, 60.0)) == plain  # data URL, reference and size alike
    assert second.stats["decoded"] == 0 and second.stats["encoded"] == 0
    assert second.prepared_stats()["hits"] == 1 and second.prepared_stats()["misses"] == 0


def test_worker_processes_store_and_a_later_run_starts_none(tmp_path, image):
    budget = Resize.fit(2000)
    plain = ImageStore().get(image, budget)
    first = ImageStore(workers=1, processes=True, image_cache=_settings(tmp_path))
    try:
        assert asyncio.run(first.aget(image, budget)) == plain
        assert first.prepared_stats()["stored"] == 1 and first.prepared_stats()["misses"] == 1
    finally:
        first.close()
    second = ImageStore(workers=1, processes=True, image_cache=_settings(tmp_path))
    try:
        assert asyncio.run(second.aget(image, budget)) == plain
        assert second._processes is None  # every view was a hit: no worker was started
        assert second.prepared_stats()["hits"] == 1
    finally:
        second.close()


@pytest.mark.parametrize(
    "other",
    [
        {"resize": Resize.fit(2001)},
        {"resize": Resize.fit(2000, jpeg_quality=90)},
        {"resize": Resize((FitPixels(2000, Resample.NEAREST),))},
        {"region": (0.0, 0.0, 50.0, 40.0)},
        {"store": {"quality": 60}},
        {"store": {"fmt": "PNG"}},
        {"store": {"alpha": "white"}},
        {"store": {"max_decode_values": 10**8}},
    ],
    ids=lambda o: json.dumps(o, default=repr),
)
def test_a_changed_setting_is_a_miss(tmp_path, image, other):
    ImageStore(image_cache=_settings(tmp_path)).get(image, Resize.fit(2000))
    store = ImageStore(image_cache=_settings(tmp_path), **other.get("store", {}))
    store.get(image, other.get("resize", Resize.fit(2000)), other.get("region"))
    assert store.prepared_stats()["hits"] == 0 and store.prepared_stats()["misses"] == 1


def test_a_changed_renderer_is_a_miss(tmp_path, image, monkeypatch):
    ImageStore(image_cache=_settings(tmp_path)).get(image)
    from insight_o3.imaging import images

    newer = {**images.renderer_fingerprint(), "pillow": "99.0.0"}
    monkeypatch.setattr(images, "renderer_fingerprint", lambda: newer)
    store = ImageStore(image_cache=_settings(tmp_path))
    store.get(image)
    assert store.prepared_stats()["misses"] == 1


def test_the_key_is_the_content_not_the_path(tmp_path, image):
    ImageStore(image_cache=_settings(tmp_path)).get(image)
    # the same bytes elsewhere: a hit
    copy = tmp_path / "copy.png"
    copy.write_bytes(Path(image).read_bytes())
    store = ImageStore(image_cache=_settings(tmp_path))
    assert store.get(str(copy)).data_url == ImageStore().get(image).data_url
    assert store.prepared_stats()["hits"] == 1
    # the file rewritten with other pixels, same size on disk: a miss, and the new pixels are sent
    img = np.asarray(Image.open(image)).copy()
    img[0, 0] ^= 0xFF
    Image.fromarray(img).save(image)
    again = ImageStore(image_cache=_settings(tmp_path))
    assert again.get(image).data_url == ImageStore().get(image).data_url
    assert again.prepared_stats()["hits"] == 0 and again.prepared_stats()["misses"] == 1


def _writer(directory: str, keys: list[str], fill: int) -> None:
    cache = PreparedImageCache(directory)
    for key in keys:
        assert cache.save(key, _view(200_000, fill))


def test_concurrent_writers_leave_whole_entries(tmp_path):
    """Four processes write the same twenty keys at once (the same view rendered by two runs): every entry is
    one writer's whole bytes, and no temporary file is left."""
    directory = str(tmp_path / "cache")
    keys = [f"{i:02x}" * 32 for i in range(20)]
    ctx = multiprocessing.get_context("fork")
    procs = [ctx.Process(target=_writer, args=(directory, keys, fill)) for fill in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    cache = PreparedImageCache(directory)
    for key in keys:
        view = cache.load(key)
        assert view is not None and len(set(view.payload)) == 1 and view.payload[0] in range(4)
    assert cache.stats["damaged"] == 0
    left = [p.name for p in Path(directory).rglob(".*") if p.is_file()]
    assert left == []


def _killed_writer(path: str, ready) -> None:
    with atomic_writer(path, "wb") as f:
        f.write(_view(100_000).to_bytes()[:50_000])
        f.flush()
        ready.set()
        time.sleep(60)


def test_a_writer_killed_mid_write_leaves_no_entry_and_its_temporary_file_is_swept(tmp_path, monkeypatch):
    cache = PreparedImageCache(str(tmp_path / "cache"), max_bytes=10**6)
    key = "ab" * 32
    os.makedirs(os.path.dirname(cache.path(key)))
    ctx = multiprocessing.get_context("fork")
    ready = ctx.Event()
    p = ctx.Process(target=_killed_writer, args=(cache.path(key), ready))
    p.start()
    assert ready.wait(30)
    os.kill(p.pid, signal.SIGKILL)
    p.join(10)
    assert cache.load(key) is None and cache.stats["misses"] == 1
    tmp = [q for q in Path(cache.path(key)).parent.iterdir() if q.name.startswith(".")]
    assert len(tmp) == 1
    monkeypatch.setattr(pc, "STALE_TMP_S", 0.0)
    cache.evict()
    assert not tmp[0].exists()


def test_a_torn_or_damaged_entry_is_removed_not_served(tmp_path):
    cache = PreparedImageCache(str(tmp_path / "cache"))
    data = _view(5000).to_bytes()
    for key, bad in [("01" * 32, data[:-1]), ("02" * 32, data[:-1] + b"\0"), ("03" * 32, b"")]:
        os.makedirs(os.path.dirname(cache.path(key)), exist_ok=True)
        Path(cache.path(key)).write_bytes(bad)
        assert cache.load(key) is None
        assert not os.path.exists(cache.path(key))
    assert cache.stats["damaged"] == 3 and cache.stats["hits"] == 0


def test_eviction_removes_the_least_recently_used_first(tmp_path):
    entry = len(_view(1000).to_bytes())
    cache = PreparedImageCache(str(tmp_path / "cache"), max_bytes=4 * entry)
    keys = [f"{i:02x}" * 32 for i in range(4)]
    for i, key in enumerate(keys):
        cache.save(key, _view(1000))
        os.utime(cache.path(key), ns=(10**18 + i * 10**9,) * 2)  # written in this order
    assert cache.load(keys[0]) is not None  # used again: now the most recent
    cache.save("ff" * 32, _view(1000))  # one over the limit: the write evicts
    assert cache.stats["evicted"] == 2  # down to 90 % of the limit: the two least recently used
    assert cache.evict() == 0
    assert [cache.load(k) is not None for k in keys] == [True, False, False, True]
    assert cache.usage() == (3, 3 * entry)


def test_writes_past_the_limit_evict_as_they_go(tmp_path):
    entry = len(_view(1000).to_bytes())
    cache = PreparedImageCache(str(tmp_path / "cache"), max_bytes=5 * entry)
    for i in range(40):
        cache.save(f"{i:064x}", _view(1000))
    assert cache.usage()[1] <= 5 * entry + cache.max_bytes // 8 + entry
    assert cache.stats["evicted"] >= 30


def test_an_unwritable_directory_turns_writing_off_and_still_renders(tmp_path, image):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = ImageStore(image_cache=ImageCacheSettings(str(blocker / "cache")))
    assert store.get(image).data_url == ImageStore().get(image).data_url
    assert store.prepared_stats()["stored"] == 0


@pytest.mark.parametrize(
    ("values", "directory", "max_bytes"),
    [
        (None, "default", pc.DEFAULT_MAX_BYTES),
        (["off"], None, pc.DEFAULT_MAX_BYTES),
        (["4G"], "default", 4 * 2**30),
        (["500MiB", "/x/c"], "/x/c", 500 * 2**20),
        (["./4G"], os.path.abspath("4G"), pc.DEFAULT_MAX_BYTES),
    ],
)
def test_the_flag_values(values, directory, max_bytes):
    s = ImageCacheSettings.parse(values)
    assert (s.directory, s.max_bytes) == (pc.default_directory() if directory == "default" else directory, max_bytes)
    assert s.explicit == (directory not in (None, "default"))


def test_the_default_directory_follows_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert pc.default_directory() == str(tmp_path / "insight-o3" / "images")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative")  # ignored, as the XDG rule says
    assert pc.default_directory() == os.path.expanduser("~/.cache/insight-o3/images")


def _image_parts(srv) -> list[str]:
    return sorted(
        part["image_url"]["url"]
        for req in srv.requests
        for msg in req["messages"]
        if isinstance(msg.get("content"), list)
        for part in msg["content"]
        if part.get("type") == "image_url"
    )


def test_a_second_evaluate_run_reads_every_image_and_sends_the_same_requests(tmp_path, openai_server, capsys):
    """Two models on one benchmark (two run directories), then a run with the cache off: the same image bytes in
    every request; the second run's card says every view was a hit."""
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    judge = openai_server(eb.judge_script())
    cache = tmp_path / "images"
    runs = {}
    for name, flag in [("a", str(cache)), ("b", str(cache)), ("c", "off")]:
        srv = openai_server(eb.model_script())
        argv = eb.evaluate_argv(ann, img_dir, tmp_path / "out", srv.base_url, judge.base_url)
        argv[argv.index("m/o3_bench")] = f"{name}/o3_bench"
        assert evaluate.main([*argv, "--image_workers", "0", "--image_cache", flag]) == 0
        card = json.loads((tmp_path / "out" / name / "o3_bench" / "run_card.json").read_text())
        runs[name] = (_image_parts(srv), card["history"][-1].get("image_cache"))
    assert runs["a"][0] == runs["b"][0] == runs["c"][0] and runs["a"][0]
    views = runs["a"][1]["misses"]
    assert views == runs["a"][1]["stored"] > 0 and runs["a"][1]["hits"] == 0
    assert runs["b"][1]["hits"] == views and runs["b"][1]["misses"] == 0 and runs["b"][1]["bytes_written"] == 0
    assert runs["c"][1] is None  # off: nothing to report


def test_a_named_directory_that_cannot_hold_the_cache_is_exit_2(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    ann, img_dir = eb.make_bench(tmp_path / "bench")
    argv = eb.evaluate_argv(ann, img_dir, tmp_path / "out", "http://127.0.0.1:9/v1", "http://127.0.0.1:9/v1")
    with pytest.raises(SystemExit) as e:
        evaluate.main([*argv, "--image_cache", str(blocker / "sub")])
    assert e.value.code == 2
    assert "--image_cache" in capsys.readouterr().err
