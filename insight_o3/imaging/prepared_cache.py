"""Prepared images shared across runs: a content-addressed cache on disk of the bytes each view is sent as.

A run decodes, resizes and encodes every image it sends (an O3-Bench-sized run: ~100 CPU s), and a user runs
many models, agents and trials on the same benchmark. An entry's key is a sha256 over everything its bytes depend
on — the source file's content (:func:`source_digest`, never its path or time stamp) and the rendering parameters
the caller names (:meth:`PreparedImageCache.key`; :class:`~insight_o3.imaging.images.ImageStore` names every field
of the view's ``Resize``, the region, the encoder's settings and the versions of Pillow, its codecs and the
rendering code) — and its value is the encoded bytes with the few numbers an ``EncodedImage`` holds besides.

Safe to share between runs at once and against SIGKILL: an entry is written whole to a temporary file and renamed
into place (:func:`insight_o3.storage.atomic.atomic_writer`), and it carries the sha256 of its payload, checked on
every read — a torn or damaged entry is removed and counted as a miss, never served. Size-bounded: a hit refreshes
its entry's modification time, and once the entries exceed ``max_bytes`` the least recently used go (under the
directory's lock, :mod:`insight_o3.storage.lock`, so two runs never evict at once; a run that finds it held skips).
Nothing here raises for the cache's own sake: a directory that cannot be written turns writing off with one warning.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from ..base.json_types import JSONObject
from ..storage.atomic import OutputError, UnusableOutputDir, atomic_writer, check_output_dir
from ..storage.lock import RunLockedError, acquire

log = logging.getLogger(__name__)

#: The layout and entry format below; a change makes every old entry unreachable (a new folder).
FORMAT = "v1"
#: The first bytes of every entry.
MAGIC = b"insight-o3 prepared image v1\n"
#: The size limit when none is given (``--image_cache SIZE``).
DEFAULT_MAX_BYTES = 2 * 2**30
#: A temporary file older than this was left by a writer that died (an entry is written in well under a second).
STALE_TMP_S = 600.0
#: What ``--image_cache`` turns the cache off with.
OFF = "off"

_UNITS = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)


def default_directory() -> str:
    """``$XDG_CACHE_HOME/insight-o3/images`` (the XDG base directory rule: an unset or relative
    ``$XDG_CACHE_HOME`` is ``~/.cache``)."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "insight-o3", "images")


def parse_size(text: str) -> int | None:
    """Bytes of a size written with a unit (``500M``, ``2G``, ``1.5GiB``; powers of 1024), or None when ``text``
    is not one. A bare number is not a size (it would be a directory named so)."""
    m = _SIZE.fullmatch(text.strip())
    if m is None or not (m.group(2) or text.strip().lower().endswith("b")):
        return None
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


@dataclass(frozen=True)
class ImageCacheSettings:
    """Where the prepared-image cache lives (None: off) and how many bytes its entries may take."""

    directory: str | None = field(default_factory=default_directory)
    max_bytes: int = DEFAULT_MAX_BYTES
    #: whether the directory was chosen by the user (an unusable one is then an error, not a warning)
    explicit: bool = False

    @classmethod
    def parse(cls, values: Sequence[str] | None) -> ImageCacheSettings:
        """The settings of ``--image_cache`` given zero or more times: ``off``, a size with a unit (``4G``), or a
        directory (``./4G`` for a directory named like a size). Raises ValueError naming the value."""
        directory: str | None = default_directory()
        max_bytes, explicit, off = DEFAULT_MAX_BYTES, False, False
        for value in values or ():
            size = parse_size(value)
            if value.strip().lower() == OFF:
                off = True
            elif size is not None:
                if size < 1:
                    raise ValueError(f"image cache size must be positive: {value!r}")
                max_bytes = size
            elif value.strip():
                directory, explicit = os.path.abspath(os.path.expanduser(value)), True
            else:
                raise ValueError("image cache: an empty value (give off, a size such as 4G, or a directory)")
        return cls(None if off else directory, max_bytes, explicit and not off)

    @property
    def enabled(self) -> bool:
        return self.directory is not None

    def problem(self) -> str | None:
        """Why the directory cannot hold the cache (:func:`insight_o3.storage.atomic.check_output_dir`), or None."""
        if self.directory is None:
            return None
        try:
            check_output_dir(self.directory)
            os.makedirs(self.directory, exist_ok=True)
        except UnusableOutputDir as e:
            return str(e)
        except OSError as e:
            return f"cannot create {self.directory}: {e.strerror or e}"
        if not os.access(self.directory, os.W_OK | os.X_OK):
            return f"{self.directory} is not writable"
        return None

    def describe(self) -> str:
        if self.directory is None:
            return "off"
        return f"{self.directory} (at most {self.max_bytes / 2**30:.3g} GiB)"


# ---------------------------------------------------------------------------------------------- source files
#: (st_dev, st_ino, st_size, st_mtime_ns, st_ctime_ns) of a file: any write changes it.
Signature = tuple[int, int, int, int, int]

_DIGESTS: dict[str, tuple[Signature, str]] = {}
_DIGESTS_LOCK = threading.Lock()


def signature(path: str) -> Signature:
    st = os.stat(path)
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def source_digest(path: str) -> tuple[str, Signature]:
    """The sha256 of a file's content and the :data:`Signature` it was read under; hashed once per process while
    the signature holds (any write to the file changes it). Raises OSError."""
    sig = signature(path)
    with _DIGESTS_LOCK:
        known = _DIGESTS.get(path)
    if known is not None and known[0] == sig:
        return known[1], sig
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    digest = h.hexdigest()
    if signature(path) == sig:  # unchanged while it was read: safe to remember
        with _DIGESTS_LOCK:
            _DIGESTS[path] = (sig, digest)
    return digest, sig


# ---------------------------------------------------------------------------------------------- entries
@dataclass(frozen=True)
class PreparedView:
    """What an entry holds: the encoded bytes, their MIME type, and the numbers of the ``EncodedImage`` they came
    from (the size sent, the region of the original, the original's size)."""

    payload: bytes
    mime: str
    size: tuple[int, int]
    region: tuple[float, float, float, float]
    original_size: tuple[int, int]

    def to_bytes(self) -> bytes:
        meta = {
            "payload_sha256": hashlib.sha256(self.payload).hexdigest(),
            "payload_bytes": len(self.payload),
            "mime": self.mime,
            "size": list(self.size),
            "region": list(self.region),
            "original_size": list(self.original_size),
        }
        return MAGIC + json.dumps(meta, sort_keys=True).encode("ascii") + b"\n" + self.payload

    @classmethod
    def from_bytes(cls, data: bytes) -> PreparedView | None:
        """The view an entry's bytes hold, or None when they are not a whole, intact entry."""
        if not data.startswith(MAGIC):
            return None
        end = data.find(b"\n", len(MAGIC))
        if end < 0:
            return None
        try:
            meta = json.loads(data[len(MAGIC) : end])
            payload = data[end + 1 :]
            if len(payload) != meta["payload_bytes"] or hashlib.sha256(payload).hexdigest() != meta["payload_sha256"]:
                return None
            w, h = meta["size"]
            x0, y0, x1, y1 = meta["region"]
            ow, oh = meta["original_size"]
            return cls(payload, str(meta["mime"]), (int(w), int(h)), (x0, y0, x1, y1), (int(ow), int(oh)))
        except (ValueError, KeyError, TypeError):
            return None


#: The counters of :attr:`PreparedImageCache.stats`.
STAT_KEYS = ("hits", "misses", "bytes_read", "bytes_written", "stored", "damaged", "evicted")


class PreparedImageCache:
    """The cache in one directory (see the module's docstring); thread-safe, one per process. ``stats`` counts
    this process's hits, misses, bytes read and written, entries stored, damaged entries removed and entries
    evicted."""

    def __init__(self, directory: str, max_bytes: int = DEFAULT_MAX_BYTES):
        self.directory = os.path.abspath(directory)
        self.root = os.path.join(self.directory, FORMAT)
        self.max_bytes = max_bytes
        self.stats = dict.fromkeys(STAT_KEYS, 0)
        self._lock = threading.Lock()
        self._writable = True
        self._written_since_evict = 0

    @classmethod
    def of(cls, settings: ImageCacheSettings | None) -> PreparedImageCache | None:
        if settings is None or settings.directory is None:
            return None
        return cls(settings.directory, settings.max_bytes)

    @staticmethod
    def key(source_sha256: str, params: JSONObject) -> str:
        """The entry key of a source file's content rendered with ``params`` (JSON: every setting the bytes
        depend on)."""
        text = json.dumps({"source_sha256": source_sha256, "params": params}, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def path(self, key: str) -> str:
        return os.path.join(self.root, key[:2], key)

    def _count(self, **deltas: int) -> None:
        with self._lock:
            for k, v in deltas.items():
                self.stats[k] += v

    def load(self, key: str) -> PreparedView | None:
        """The entry of ``key``, or None (a miss). A damaged entry is removed and is a miss."""
        path = self.path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            self._count(misses=1)
            return None
        view = PreparedView.from_bytes(data)
        if view is None:
            _remove(path)
            self._count(misses=1, damaged=1)
            log.warning("prepared-image cache: removed a damaged entry %s", path)
            return None
        try:
            os.utime(path)  # the least recently used go first
        except OSError:
            pass
        self._count(hits=1, bytes_read=len(data))
        return view

    def save(self, key: str, view: PreparedView) -> bool:
        """Store ``view`` under ``key`` (atomically); False when it was not stored (larger than the limit, or the
        directory refuses writes: then writing stops for this process, with one warning)."""
        data = view.to_bytes()
        if not self._writable or len(data) > self.max_bytes:
            return False
        path = self.path(key)
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with atomic_writer(path, "wb") as f:
                f.write(data)
        except (OSError, OutputError) as e:
            self._writable = False
            log.warning("prepared-image cache: cannot write to %s (%s); not storing more this run", self.directory, e)
            return False
        with self._lock:
            self.stats["stored"] += 1
            self.stats["bytes_written"] += len(data)
            self._written_since_evict += len(data)
            due = self._written_since_evict > self.max_bytes // 8
            if due:
                self._written_since_evict = 0
        if due:
            self.evict()
        return True

    def evict(self) -> int:
        """Remove the least recently used entries until the rest fit in ``max_bytes`` (to 90 % of it, so the next
        writes do not evict again at once), and temporary files their writers left; how many entries went. Skipped
        (0) while another process evicts."""
        if not os.path.isdir(self.root):
            return 0
        try:
            lock = acquire(self.directory, "prepared-image cache eviction")
        except (RunLockedError, OutputError, UnusableOutputDir):
            return 0
        try:
            entries, total = self._scan()
            removed = 0
            if total > self.max_bytes:
                entries.sort()  # oldest first
                goal = self.max_bytes * 9 // 10
                for _mtime, size, path in entries:
                    if total <= goal:
                        break
                    if _remove(path):
                        removed += 1
                    total -= size
            self._count(evicted=removed)
            return removed
        finally:
            lock.release()

    def _scan(self) -> tuple[list[tuple[int, int, str]], int]:
        """(mtime_ns, bytes, path) of every entry and their total; removes stale temporary files on the way."""
        entries: list[tuple[int, int, str]] = []
        total, now = 0, time.time()
        for sub in _listdir(self.root):
            folder = os.path.join(self.root, sub)
            for name in _listdir(folder):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                if name.startswith("."):  # a writer's temporary file
                    if now - st.st_mtime > STALE_TMP_S:
                        _remove(path)
                    continue
                entries.append((st.st_mtime_ns, st.st_size, path))
                total += st.st_size
        return entries, total

    def usage(self) -> tuple[int, int]:
        """(entries, bytes) in the directory now."""
        entries, total = self._scan()
        return len(entries), total


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:
        return []


def _remove(path: str) -> bool:
    try:
        os.remove(path)
        return True
    except OSError:
        return False
