"""Loading, resizing, cropping and encoding images — each (image, view, budget) once per run.

The original harness re-encoded the image for every question and trial inside the event loop
(see shared notes); here an :class:`ImageStore` encodes each distinct view once, off the event
loop, de-duplicates concurrent requests for the same view, and keeps encoded payloads in a
byte-bounded LRU cache. Records never hold pixels: they hold an :class:`ImageRef`.

Where the work runs: :meth:`ImageStore.aget` de-duplicates in the event loop (a request for a
view already being rendered waits for that render without occupying a worker) and renders in
``workers`` *processes* when ``processes=True`` (what the command-line tools use: decoding,
resampling and encoding then use every core instead of contending for the GIL), else in a thread
pool. A worker process is an in-process ``ImageStore`` of its own (same code path, its own small
cache of decoded originals, ``originals_cached`` of them), so the pixels are the same either way. Each view goes to
the worker that decoded its source last where it can (:mod:`.render_pool`): an agent's crops of an image reuse the
decoded original instead of decoding it again on another worker. Memory stays bounded: at most ``workers`` renders
run at once, results go to the byte-bounded cache, and the kept originals take at most ``workers`` x
``originals_cached`` x the largest decode allowed (``max_decode_values`` bytes; in practice the largest image's
RGB pixels: 55 MB for a 4600x3967 image).

Across runs, an ``ImageStore`` given ``image_cache`` keeps the encoded bytes of every view it renders in a
content-addressed cache on disk (:mod:`.prepared_cache`; keyed by the source file's sha256 and every setting the
bytes depend on, :meth:`ImageStore.prepared_key`), so a later run of another model on the same benchmark reads them
instead of decoding, resizing and encoding again — the same bytes, so the requests are the same. In process mode
the owner looks an entry up before it hands a view to a worker (a run whose every view is cached starts no worker),
and the worker that renders a miss stores it.

Worker processes never outlive the run, however it ends (:func:`_init_worker`): each watches the
process that made the pool (a pidfd, else its parent) and exits the moment it is gone — SIGKILL
included — and ignores SIGINT, which a terminal's Ctrl-C sends to the whole process group: the
parent stops them when it unwinds. The ``forkserver`` they are forked from and multiprocessing's
resource tracker are started with stdin, stdout and stderr on ``/dev/null``
(:func:`insight_o3.base.workers.start_helpers_detached`), so no process of the pool holds the caller's pipes:
``evaluate … | tee log`` ends when ``evaluate`` does.
"""

from __future__ import annotations

import asyncio
import base64
import functools
import hashlib
import io
import os
import signal
import sys
import threading
from collections import OrderedDict
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from PIL import Image

from ..base.json_types import JSONObject
from ..base.workers import exit_with, worker_context
from . import geometry, view_ops
from .geometry import Box, pixel_box
from .limits import DEFAULT_MAX_DECODE_PIXELS as DEFAULT_MAX_DECODE_PIXELS
from .limits import DEFAULT_MAX_DECODE_VALUES as DEFAULT_MAX_DECODE_VALUES
from .prepared_cache import (
    STAT_KEYS,
    ImageCacheSettings,
    PreparedImageCache,
    PreparedView,
    Signature,
    signature,
    source_digest,
)
from .render_pool import AffinityPool
from .view_ops import Resize as Resize

#: The longest side a JPEG can have (its header stores sides in 16 bits).
JPEG_MAX_SIDE = 65_535


class ImageError(Exception):
    """An image that cannot be used (missing, corrupt, too large); the message names the file."""


def image_size(path: str | os.PathLike) -> tuple[int, int]:
    """An image file's ``(w, h)`` from its header, without decoding the pixels. Raises
    :class:`ImageError` (``image file not found: …`` / ``cannot decode image …``)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ImageError(f"image file not found: {path}")
    try:
        with Image.open(path) as im:
            return im.size
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"cannot decode image {path}: {e}") from None


@dataclass(frozen=True)
class ImageRef:
    """What a model was shown, without the pixels: the source file, the region of it (original
    pixels; the whole image or a crop box) and the ``(w, h)`` size it was sent at."""

    path: str
    region: tuple[float, float, float, float]
    size: tuple[int, int]

    def to_dict(self) -> JSONObject:
        d = asdict(self)
        d["region"] = [round(v, 2) for v in self.region]
        d["size"] = list(self.size)
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ImageRef:
        return cls(d["path"], tuple(d["region"]), tuple(d["size"]))


@dataclass(frozen=True)
class EncodedImage:
    ref: ImageRef
    data_url: str
    original_size: tuple[int, int]

    @property
    def nbytes(self) -> int:
        return len(self.data_url)


def _raise_pillow_limit(pixels: int) -> None:
    """Let Pillow's own decompression-bomb check (in ``Image.open``) pass images up to ``pixels``;
    :func:`open_image` enforces its limit itself. Called once at import and in each image worker
    process's initializer — never per call, since ``Image.MAX_IMAGE_PIXELS`` is process-wide and
    :func:`open_image` runs on many threads at once."""
    if Image.MAX_IMAGE_PIXELS is not None and Image.MAX_IMAGE_PIXELS < pixels:
        Image.MAX_IMAGE_PIXELS = pixels


_raise_pillow_limit(DEFAULT_MAX_DECODE_PIXELS)


#: How a decoded image becomes RGB. ``drop``: PIL's ``convert("RGB")`` (an alpha channel is dropped), what the
#: released single-model harness does (``Image.open(...).convert("RGB")``). ``white``: ``qwen_vl_utils``'
#: ``to_rgb``, an RGBA image composited on white (every other mode converted as ``drop``), what the authors'
#: verl fork does to every InSight-o3 image, the vReasoner's and the vSearcher's, in training and validation
#: (``verl/utils/vsearch.py:197`` ``fetch_image_wo_resize``; ``fetch_image`` for the policy's input).
#: ``keep``: no conversion at all, the file's own mode (DeepEyes's release crops and resizes ``Image.open(path)`` as
#: it is: a palette image resized with NEAREST, RGBA with premultiplied alpha, sent as PNG in that mode; a mode PNG
#: cannot hold, CMYK, fails at encoding).
ALPHA_MODES = ("drop", "white", "keep")


def to_rgb(im: Image.Image, alpha: str = "drop") -> Image.Image:
    """``im`` as RGB under ``alpha`` (:data:`ALPHA_MODES`; ``keep``: unchanged); an RGB image is returned as it is."""
    if alpha not in ALPHA_MODES:
        raise ValueError(f"alpha must be one of {ALPHA_MODES}, got {alpha!r}")
    if alpha == "keep":
        return im
    if alpha == "white" and im.mode == "RGBA":
        white = Image.new("RGB", im.size, (255, 255, 255))
        white.paste(im, mask=im.split()[3])  # qwen_vl_utils.vision_process.to_rgb, line for line
        return white
    return im.convert("RGB") if im.mode != "RGB" else im


def decode_values(mode: str, size: tuple[int, int]) -> int:
    """The values an image of ``mode`` and ``size`` takes to decode to RGB: pixels x the file's channels, plus
    pixels x 3 for the RGB copy a non-RGB image is converted to (both are in memory at once)."""
    w, h = size
    channels = Image.getmodebands(mode) + (3 if mode != "RGB" else 0)
    return w * h * channels


def open_image(
    path: str | os.PathLike,
    max_pixels: int = DEFAULT_MAX_DECODE_PIXELS,
    max_values: int = DEFAULT_MAX_DECODE_VALUES,
    alpha: str = "drop",
) -> Image.Image:
    """Decode an image file to RGB (``alpha``: see :data:`ALPHA_MODES`), with a clear :class:`ImageError` for
    every way it can fail.

    Both limits (pixels; values, see :func:`decode_values`) are checked from the header before any pixel is
    decoded; no process-wide Pillow setting or warning filter is touched, so this is safe from any thread."""
    path = str(path)
    if not os.path.isfile(path):
        raise ImageError(f"image file not found: {path}")
    try:
        with Image.open(path) as im:
            if im.width * im.height > max_pixels:
                raise ImageError(
                    f"image too large to decode safely ({im.width}x{im.height} px > {max_pixels} px): {path}"
                )
            values = decode_values(im.mode, im.size)
            if values > max_values:
                raise ImageError(
                    f"image too large to decode safely ({im.width}x{im.height} px, mode {im.mode}: {values} values "
                    f"> max_decode_values {max_values}): {path}"
                )
            im.load()
            # leaving the block closes only the file: the loaded pixels need no copy
            return to_rgb(im, alpha)
    except ImageError:
        raise
    except Image.DecompressionBombError as e:
        raise ImageError(f"image too large to decode safely (decompression bomb): {path}: {e}") from None
    except (OSError, SyntaxError, ValueError) as e:
        raise ImageError(f"cannot decode image {path}: {e}") from None


def encode_bytes(
    img: Image.Image, fmt: str = "JPEG", quality: int | None = None, optimize: bool = False
) -> tuple[str, bytes]:
    """``img`` encoded as JPEG or PNG: ``(MIME type, bytes)``. ``quality`` None: PIL's default (the original's)."""
    buf = io.BytesIO()
    if fmt.upper() == "JPEG":
        kw = {"quality": quality} if quality is not None else {}
        (img if img.mode == "RGB" else img.convert("RGB")).save(buf, format="JPEG", optimize=optimize, **kw)
        return "image/jpeg", buf.getvalue()
    img.save(buf, format="PNG")
    return "image/png", buf.getvalue()


def data_url(mime: str, payload: bytes) -> str:
    return f"data:{mime};base64," + base64.b64encode(payload).decode("ascii")


def encode_pil(img: Image.Image, fmt: str = "JPEG", quality: int | None = None, optimize: bool = False) -> str:
    """A ``data:`` URL of ``img`` (JPEG or PNG). ``quality`` None: PIL's default (the original's)."""
    return data_url(*encode_bytes(img, fmt, quality, optimize))


@functools.cache
def renderer_fingerprint() -> JSONObject:
    """What a view's bytes depend on besides its source and settings: the versions of Pillow and its codecs and
    the sha256 of the code that renders (this module, :mod:`.geometry` and :mod:`.view_ops`; any edit is a new fingerprint)."""
    from PIL import __version__ as pillow_version
    from PIL import features

    code = hashlib.sha256()
    for module in (sys.modules[__name__], geometry, view_ops):
        with open(str(module.__file__), "rb") as f:
            code.update(f.read())
    return {
        "pillow": pillow_version,
        "codecs": {c: features.version_codec(c) for c in sorted(features.get_supported_codecs())},
        "libjpeg_turbo": features.version_feature("libjpeg_turbo"),
        "code_sha256": code.hexdigest(),
    }


def usable_cpus() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's count)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class ImageStore:
    """Thread-safe cache of encoded views, shared by every question and trial of a run.

    ``get(path, resize, region=None)`` returns an :class:`EncodedImage`, rendered in the calling
    thread; ``aget`` is the asyncio form: it de-duplicates concurrent requests for one view in the
    event loop and renders in ``workers`` processes (``processes=True``) or threads, so the loop stays
    free for I/O. ``stats`` counts decodes, encodes, cache hits and evictions. ``image_cache``: the prepared-image
    cache on disk shared across runs (None: none); :meth:`prepared_stats` says what it did.
    """

    def __init__(
        self,
        max_cached_bytes: int = 256 * 2**20,
        workers: int | None = None,
        max_decode_pixels: int = DEFAULT_MAX_DECODE_PIXELS,
        max_decode_values: int = DEFAULT_MAX_DECODE_VALUES,
        fmt: str = "JPEG",
        quality: int | None = None,
        originals_cached: int = 2,
        processes: bool = False,
        alpha: str = "drop",
        image_cache: ImageCacheSettings | None = None,
    ):
        if alpha not in ALPHA_MODES:
            raise ValueError(f"alpha must be one of {ALPHA_MODES}, got {alpha!r}")
        self.alpha = alpha  # how originals become RGB (ALPHA_MODES): "white" on the InSight-o3 path
        self.max_cached_bytes = max_cached_bytes
        self.max_decode_pixels = max_decode_pixels
        self.max_decode_values = max_decode_values
        self.fmt, self.quality = fmt, quality
        self.workers = max(1, workers or usable_cpus())
        self.processes = processes
        self._threads: ThreadPoolExecutor | None = None  # created on the first aget
        self._processes: AffinityPool | None = None  # (processes=True)
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple, EncodedImage] = OrderedDict()
        self._renders: dict[tuple, asyncio.Future] = {}  # (loop, key) -> the render every waiter shares
        self._bytes = 0
        self._originals: OrderedDict[str, Image.Image] = OrderedDict()
        self._originals_cached = originals_cached
        self._sizes: dict[str, tuple[int, int]] = {}
        self.stats = {"decoded": 0, "encoded": 0, "cache_hits": 0, "evicted": 0}
        self.image_cache = image_cache if image_cache is not None and image_cache.enabled else None
        self._prepared = PreparedImageCache.of(self.image_cache)
        self._worker_counts = dict.fromkeys(STAT_KEYS, 0)  # what worker processes did with the prepared cache

    @classmethod
    def for_image_workers(cls, image_workers: int | None, **kwargs: Any) -> ImageStore:
        """The store of a command's ``--image_workers`` flag: None = one process per usable CPU, N > 0 = N
        processes, 0 = a thread (no worker processes)."""
        workers = usable_cpus() if image_workers is None else image_workers
        return cls(workers=max(1, workers), processes=workers > 0, **kwargs)

    # ------------------------------------------------------------------ originals
    def original(self, path: str) -> Image.Image:
        with self._lock:
            im = self._originals.get(path)
            if im is not None:
                self._originals.move_to_end(path)
                return im
        im = open_image(path, self.max_decode_pixels, self.max_decode_values, self.alpha)
        with self._lock:
            self.stats["decoded"] += 1
            self._sizes[path] = im.size
            self._originals[path] = im
            while len(self._originals) > self._originals_cached:
                self._originals.popitem(last=False)
        return im

    def size(self, path: str) -> tuple[int, int]:
        """Original ``(w, h)`` without decoding the pixels (header only)."""
        if path in self._sizes:
            return self._sizes[path]
        size = image_size(path)
        self._sizes[path] = size
        return size

    # ------------------------------------------------------------------ views
    def view(
        self, path: str | Path, resize: Resize = Resize(), region: Box | None = None
    ) -> tuple[Image.Image, ImageRef]:
        """The PIL view a model is shown (crop of the original, then resized) and its reference;
        not cached (training hands these pixels to the rollout engine)."""
        path = str(path)
        im = self.original(path)
        W, H = im.size
        if region is None:
            view, reg = im, (0.0, 0.0, float(W), float(H))
        else:
            px = pixel_box(region)
            px = (max(0, px[0]), max(0, px[1]), min(W, px[2]), min(H, px[3]))
            view, reg = im.crop(px), (float(px[0]), float(px[1]), float(px[2]), float(px[3]))
        view = resize.apply(view, crop=region is not None)
        return view, ImageRef(path, reg, view.size)

    def _file_view(self, path: str) -> EncodedImage:
        """The file's bytes as they are (:attr:`Resize.as_file`), labelled with the type its header names."""
        try:
            with open(path, "rb") as f:
                data = f.read()
            with Image.open(io.BytesIO(data)) as im:
                mime = Image.MIME.get(im.format or "", "application/octet-stream")
        except (OSError, SyntaxError, ValueError) as e:
            raise ImageError(f"cannot read image {path}: {e}") from None
        size = self.size(path)
        ref = ImageRef(path, (0.0, 0.0, float(size[0]), float(size[1])), size)
        with self._lock:
            self.stats["encoded"] += 1
        return EncodedImage(ref, f"data:{mime};base64," + base64.b64encode(data).decode("ascii"), size)

    # ------------------------------------------------------------------ the prepared-image cache
    def prepared_key(self, path: str, resize: Resize, region: Box | None) -> tuple[str, Signature] | None:
        """The prepared-image cache's key of a view and the source file's signature it was computed under; None
        without a cache, for a file's own bytes (:attr:`Resize.as_file`) and for a file that cannot be read (the
        render then says why). The key covers the file's content, every field of ``resize``, the region, this
        store's encoder settings and :func:`renderer_fingerprint`."""
        if self._prepared is None or resize.as_file:
            return None
        try:
            digest, sig = source_digest(path)
        except OSError:
            return None
        params: JSONObject = {
            "resize": resize.to_json(),
            "region": None if region is None else [float(v) for v in region],  # the reference holds it exactly
            "format": self.fmt.upper(),
            "quality": self.quality,
            "alpha": self.alpha,
            # a file over a decode limit fails in a run without the cache; a hit must not hide that
            "max_decode": [self.max_decode_pixels, self.max_decode_values],
            "renderer": renderer_fingerprint(),
        }
        return PreparedImageCache.key(digest, params), sig

    def _lookup(self, path: str, resize: Resize, region: Box | None) -> EncodedImage | None:
        """The view from the prepared-image cache, or None (no cache, a miss)."""
        found = self.prepared_key(path, resize, region)
        return None if found is None else self._load_prepared(path, found[0])

    def _load_prepared(self, path: str, key: str) -> EncodedImage | None:
        hit = self._prepared.load(key) if self._prepared is not None else None
        if hit is None:
            return None
        with self._lock:
            self._sizes.setdefault(path, hit.original_size)
        return EncodedImage(ImageRef(path, hit.region, hit.size), data_url(hit.mime, hit.payload), hit.original_size)

    def _save_prepared(self, found: tuple[str, Signature], path: str, enc: PreparedView) -> None:
        """Store a rendered view, unless its source file changed while it was rendered."""
        if self._prepared is None:
            return
        try:
            unchanged = signature(path) == found[1]
        except OSError:
            unchanged = False
        if unchanged:
            self._prepared.save(found[0], enc)

    def prepared_stats(self) -> JSONObject | None:
        """What the prepared-image cache did in this store (worker processes included): its directory and limit,
        hits, misses, bytes read and written, entries stored, damaged entries removed, entries evicted; None
        without a cache."""
        if self._prepared is None:
            return None
        with self._lock:
            counts = {k: self._prepared.stats[k] + self._worker_counts[k] for k in STAT_KEYS}
        return {"dir": self._prepared.directory, "max_bytes": self._prepared.max_bytes, **counts}

    # ------------------------------------------------------------------ rendering
    def _render(self, path: str, resize: Resize, region: Box | None, lookup: bool = True) -> EncodedImage:
        """Render one view (``lookup``: first from the prepared-image cache; a worker whose owner looked already
        skips it)."""
        if resize.as_file:
            return self._file_view(path)
        found = self.prepared_key(path, resize, region)
        if found is not None and lookup:
            hit = self._load_prepared(path, found[0])
            if hit is not None:
                return hit
        view, ref = self.view(path, resize, region)
        fmt = self.fmt
        if fmt.upper() == "JPEG" and max(view.size) > JPEG_MAX_SIDE:
            raise ImageError(
                f"cannot send a {view.width}x{view.height} view as JPEG (at most {JPEG_MAX_SIDE} px a side; the "
                f"image's aspect ratio leaves no smaller size that keeps it): {path}"
            )
        try:
            mime, payload = encode_bytes(
                view, fmt, resize.jpeg_quality if resize.jpeg_quality is not None else self.quality
            )
        except (OSError, ValueError) as e:  # the encoder's own limits: a reason, not a traceback
            raise ImageError(f"cannot encode a {view.width}x{view.height} view as {fmt}: {e}: {path}") from None
        with self._lock:
            self.stats["encoded"] += 1
        original = self.size(path)
        if found is not None:
            self._save_prepared(found, path, PreparedView(payload, mime, ref.size, ref.region, original))
        return EncodedImage(ref, data_url(mime, payload), original)

    @staticmethod
    def _key(path: str, resize: Resize, region: Box | None) -> tuple:
        return (path, resize, None if region is None else tuple(pixel_box(region)))

    def _cached(self, key: tuple) -> EncodedImage | None:
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self.stats["cache_hits"] += 1
            return hit

    def _store(self, key: tuple, enc: EncodedImage) -> None:
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = enc
            self._bytes += enc.nbytes
            while self._bytes > self.max_cached_bytes and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._bytes -= old.nbytes
                self.stats["evicted"] += 1

    def get(self, path: str | Path, resize: Resize = Resize(), region: Box | None = None) -> EncodedImage:
        """The encoded view, from the cache or rendered in the calling thread."""
        path = str(path)
        key = self._key(path, resize, region)
        hit = self._cached(key)
        if hit is not None:
            return hit
        enc = self._render(path, resize, region)
        self._store(key, enc)
        return enc

    async def aget(self, path: str | Path, resize: Resize = Resize(), region: Box | None = None) -> EncodedImage:
        """The encoded view; each distinct view is rendered once however many tasks ask for it."""
        path = str(path)
        key = self._key(path, resize, region)
        hit = self._cached(key)
        if hit is not None:
            return hit
        loop = asyncio.get_running_loop()
        slot = (id(loop), key)
        render = self._renders.get(slot)
        if render is None:  # the first asker starts the render; later ones share it
            render = self._renders[slot] = loop.create_task(self._render_async(key, path, resize, region))
            render.add_done_callback(lambda _t: self._renders.pop(slot, None))
        else:
            with self._lock:
                self.stats["cache_hits"] += 1
        # shield: a cancelled asker does not cancel the render the others wait for
        return await asyncio.shield(render)

    async def _render_async(self, key: tuple, path: str, resize: Resize, region: Box | None) -> EncodedImage:
        loop = asyncio.get_running_loop()
        if not self.processes:
            enc = await loop.run_in_executor(self._pool(), self._render, path, resize, region)
            self._store(key, enc)
            return enc
        if self._prepared is not None and not resize.as_file:  # before any worker: a hit needs none
            hit = await loop.run_in_executor(None, self._lookup, path, resize, region)
            if hit is not None:
                self._store(key, hit)
                return hit
        source = None if resize.as_file else path  # a file's own bytes decode nothing
        for attempt in range(2):
            pool = self._process_pool()
            try:
                enc, decoded, prepared = await asyncio.wrap_future(
                    pool.submit(source, _render_in_worker, path, resize, region)
                )
                break
            except BrokenProcessPool:
                # a worker died (killed for memory, or a decoder crashed): the pool replaced it, one more try
                if attempt:
                    raise ImageError(
                        f"the image worker process died twice while rendering {path} "
                        f"(out of memory, or the decoder crashed on this file)"
                    ) from None
        with self._lock:
            self.stats["encoded"] += 1
            self.stats["decoded"] += decoded
            self._sizes.setdefault(path, enc.original_size)
            for k, v in prepared.items():
                self._worker_counts[k] += v
        self._store(key, enc)
        return enc

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._threads is None:
                self._threads = ThreadPoolExecutor(max_workers=self.workers, thread_name_prefix="img")
            return self._threads

    def _process_pool(self) -> AffinityPool:
        with self._lock:
            if self._processes is None:
                self._processes = AffinityPool(self.workers, self._worker_process, self._originals_cached)
            return self._processes

    def _worker_process(self) -> ProcessPoolExecutor:
        """One image worker process (:mod:`.render_pool` routes the views), an in-process store of its own."""
        return ProcessPoolExecutor(
            max_workers=1,
            mp_context=worker_context([__name__]),
            initializer=functools.partial(
                _init_worker,
                self.max_decode_pixels,
                self.max_decode_values,
                self.fmt,
                self.quality,
                self._originals_cached,
                self.alpha,
                os.getpid(),
                self.image_cache,
            ),
        )

    def close(self) -> None:
        with self._lock:
            threads, self._threads = self._threads, None
            processes, self._processes = self._processes, None
            self._cache.clear()
            self._originals.clear()
            self._bytes = 0
        if threads is not None:
            threads.shutdown(wait=True, cancel_futures=True)
        if processes is not None:
            processes.shutdown(wait=True)
        stats = self.prepared_stats()
        if self._prepared is not None and stats is not None and stats["stored"]:
            self._prepared.evict()  # what this run added may have taken the cache over its limit


# ---------------------------------------------------------------------- worker processes
_WORKER_STORE: ImageStore | None = None


def _init_worker(
    max_decode_pixels: int,
    max_decode_values: int,
    fmt: str,
    quality: int | None,
    originals_cached: int,
    alpha: str = "drop",
    owner_pid: int | None = None,
    image_cache: ImageCacheSettings | None = None,
) -> None:
    global _WORKER_STORE
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the owner stops the pool
    if owner_pid is not None:
        exit_with(owner_pid)
    _raise_pillow_limit(max_decode_pixels)
    _WORKER_STORE = ImageStore(
        max_cached_bytes=0,
        workers=1,
        max_decode_pixels=max_decode_pixels,
        max_decode_values=max_decode_values,
        fmt=fmt,
        quality=quality,
        originals_cached=originals_cached,
        alpha=alpha,
        image_cache=image_cache,
    )


def _render_in_worker(path: str, resize: Resize, region: Box | None) -> tuple[EncodedImage, int, dict[str, int]]:
    """One render in a worker process (its owner looked the prepared-image cache up already); returns the view,
    how many decodes it took (0 or 1) and what it did with the prepared-image cache (counters)."""
    store = _WORKER_STORE
    assert store is not None, "image worker not initialised"
    before = store.stats["decoded"]
    cache = store._prepared
    counts = dict(cache.stats) if cache is not None else {}
    enc = store._render(path, resize, region, lookup=False)
    after = cache.stats if cache is not None else {}
    return enc, store.stats["decoded"] - before, {k: after[k] - counts[k] for k in counts}
