"""Fetch a benchmark's images (and O3-Bench itself) from its Hugging Face dataset repository, verified, into the
original release's layout under the data root.

Each benchmark's :class:`~insight_o3.evaluation.benchmarks.HubSource` names the repository and the commit. The
files are fetched with ``huggingface_hub`` (``hf_hub_download`` into the data root: a file cut short is resumed
from where it stopped, a file already there and whole is not fetched again), one progress bar over them, and
every file is checked before it is used: its sha256 against the Hub's record of it at that commit (the LFS
sha256 of a large file; the git blob id of a small one kept in git), a mismatch deleted and reported. What was
fetched and each file's sha256 go into ``<folder>/.insight_o3_download.json``; with ``HF_HUB_OFFLINE=1`` nothing
is asked of the network and the files there are checked against that record instead. ``HF_ENDPOINT`` points the
client at another Hub (a mirror, or the tests' local stand-in).

A source without a confirmed commit (``revision=None``) is fetched at the commit ``main`` points to at the first
download; that commit is written to the record and every later run uses it, so a benchmark never changes under a
run once fetched. Images packed in a table or an archive are unpacked under the names the annotation uses
(:mod:`insight_o3.evaluation.benchmark_files`).
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..base.json_types import JSONObject
from ..storage.atomic import write_json_atomic
from .benchmark_files import (
    BenchmarkDataError,
    annotated_images,
    extract_archive_images,
    extract_table_images,
    git_blob_sha1,
    layout_under,
    pick_file,
    sha256_file,
)
from .benchmarks import BENCHMARKS, HubKind, HubSource

log = logging.getLogger(__name__)

#: The record of a download, in the benchmark's folder.
RECORD_NAME = ".insight_o3_download.json"
#: Where a table or an archive is kept (below the benchmark's folder) while and after its images are unpacked.
STAGING = ".hub"
_COMMIT = re.compile(r"^[0-9a-f]{40}$")
_TRUE = {"1", "ON", "YES", "TRUE"}


def offline() -> bool:
    """``HF_HUB_OFFLINE`` as ``huggingface_hub`` reads it (1/ON/YES/TRUE), read now rather than at its import."""
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in _TRUE


@dataclass(frozen=True)
class RemoteFile:
    """A file of the repository at the commit: its path, size and what its content must hash to."""

    path: str
    size: int
    sha256: str | None  # LFS files: the Hub's sha256
    git_oid: str  # every file: its git blob id (for an LFS file, that of its pointer)

    def check(self, local: Path) -> str:
        """The local file's sha256 when it is this file; BenchmarkDataError naming both digests otherwise."""
        digest = sha256_file(local)
        if self.sha256 is not None:
            if digest != self.sha256:
                raise BenchmarkDataError(
                    f"{local}: sha256 {digest} is not the Hub's {self.sha256} for {self.path}; the file was removed, "
                    "run the command again to fetch it anew"
                )
        elif git_blob_sha1(local) != self.git_oid:
            raise BenchmarkDataError(
                f"{local}: its git blob id is not the Hub's {self.git_oid} for {self.path}; the file was removed, run "
                "the command again to fetch it anew"
            )
        return digest


@dataclass
class DownloadRecord:
    """``<folder>/.insight_o3_download.json``: the repository, the commit and each file's sha256 (relative to the
    benchmark's folder), the fetched files' and the unpacked images' alike."""

    repo: str
    revision: str
    files: dict[str, str] = field(default_factory=dict)

    @classmethod
    def read(cls, folder: Path) -> DownloadRecord | None:
        path = folder / RECORD_NAME
        if not path.is_file():
            return None
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
            return cls(str(obj["repo"]), str(obj["revision"]), {str(k): str(v) for k, v in obj["files"].items()})
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise BenchmarkDataError(f"{path}: not a download record ({e}); remove it and run again") from None

    def write(self, folder: Path) -> None:
        obj: JSONObject = {"repo": self.repo, "revision": self.revision, "files": dict(sorted(self.files.items()))}
        write_json_atomic(folder / RECORD_NAME, obj)


@dataclass(frozen=True)
class Planned:
    """One file to fetch: the repository file and where it goes (relative to the benchmark's folder)."""

    remote: RemoteFile
    local: str


class Hub:
    """The few Hub calls a download makes (``huggingface_hub``), at ``HF_ENDPOINT`` when it is set."""

    def __init__(self, endpoint: str | None = None) -> None:
        from huggingface_hub import HfApi

        self.endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
        self.api = HfApi(endpoint=self.endpoint)

    def commit_of(self, repo: str, revision: str) -> str:
        sha = self.api.dataset_info(repo, revision=revision).sha
        if not sha:
            raise BenchmarkDataError(f"{repo}: the Hub gave no commit for {revision!r}")
        return sha

    def tree(self, repo: str, revision: str) -> dict[str, RemoteFile]:
        from huggingface_hub.hf_api import RepoFile

        out: dict[str, RemoteFile] = {}
        for entry in self.api.list_repo_tree(repo, repo_type="dataset", revision=revision, recursive=True):
            if isinstance(entry, RepoFile):
                lfs = entry.lfs
                sha = lfs.sha256 if lfs is not None else None
                out[entry.path] = RemoteFile(entry.path, int(entry.size), sha, entry.blob_id)
        return out

    def fetch(self, repo: str, revision: str, path: str, local_dir: Path) -> Path:
        from huggingface_hub import hf_hub_download

        return Path(
            hf_hub_download(
                repo, path, repo_type="dataset", revision=revision, local_dir=local_dir, endpoint=self.endpoint
            )
        )


def _file_bars(on: bool) -> None:
    """``huggingface_hub``'s own per-file progress bars on or off (on for a single large file only)."""
    from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

    (enable_progress_bars if on else disable_progress_bars)()


@dataclass
class Outcome:
    """What a download did: files fetched, files already there and whole, images unpacked, the commit."""

    revision: str
    fetched: int = 0
    kept: int = 0
    unpacked: int = 0
    notes: list[str] = field(default_factory=list)


def plan(name: str, source: HubSource, tree: dict[str, RemoteFile], root: Path) -> list[Planned]:
    """The repository files that ``name`` needs, and where each goes below its folder."""
    where = f"{source.repo}@{source.revision or 'main'}"
    if source.kind is HubKind.FILES and source.prefix:
        files = [f for p, f in sorted(tree.items()) if p.startswith(source.prefix)]
        if not files:
            raise BenchmarkDataError(f"{where}: no file under {source.prefix}")
        return [Planned(f, f.path) for f in files]
    if source.kind is HubKind.FILES:
        out, missing = [], []
        for image in sorted(set(annotated_images(name, root).values())):
            repo_path = image[len(source.strip) :] if source.strip and image.startswith(source.strip) else image
            if repo_path in tree:
                out.append(Planned(tree[repo_path], repo_path))
            else:
                missing.append(repo_path)
        if missing:
            raise BenchmarkDataError(
                f"{where}: {len(missing)} image(s) the annotation names are not in the repository: "
                f"{', '.join(missing[:5])}"
            )
        return out
    path = pick_file(sorted(tree), source.table, where)
    return [Planned(tree[path], f"{STAGING}/{path}")]


def _local_dir(source: HubSource, root: Path, item: Planned) -> Path:
    folder = root / source.folder
    return folder / STAGING if item.local.startswith(STAGING + "/") else folder


def download(
    name: str,
    root: str | os.PathLike,
    *,
    revision: str | None = None,
    hub: Hub | None = None,
    workers: int = 8,
    progress: bool = True,
    say: Callable[[str], None] = print,
) -> Outcome:
    """Fetch benchmark ``name`` into the data root ``root`` (its annotation must be in place, except O3-Bench's,
    which comes with it): every file checked, the record written; ``revision`` overrides the source's commit.
    Raises :class:`BenchmarkDataError` (a file that is not what the Hub says, a repository without a needed file, an
    offline run with files missing) and ``huggingface_hub``'s errors (the Hub unreachable, a revision not found)."""
    source = BENCHMARKS[name].source
    base = Path(root)
    folder = base / source.folder
    record = DownloadRecord.read(folder)
    if offline():
        return _verify_offline(name, source, folder, record)
    hub = hub or Hub()
    rev = revision or source.revision or (record.revision if record and record.repo == source.repo else None)
    outcome = Outcome(revision="")
    if rev is None:
        rev = hub.commit_of(source.repo, "main")
        outcome.notes.append(
            f"{source.repo}: no commit confirmed in the code; main is {rev}, recorded in {folder / RECORD_NAME} and "
            "used from now on"
        )
    elif not _COMMIT.match(rev):
        rev = hub.commit_of(source.repo, rev)
    outcome.revision = rev
    tree = hub.tree(source.repo, rev)
    items = plan(name, source, tree, base)
    if record is None or record.repo != source.repo or record.revision != rev:
        record = DownloadRecord(source.repo, rev)
    _fetch_all(source, base, items, record, outcome, hub, workers, progress)
    folder.mkdir(parents=True, exist_ok=True)
    record.write(folder)
    if source.kind is not HubKind.FILES:
        outcome.unpacked = _unpack(name, source, base, items[0], record)
        record.write(folder)
        staged = folder / items[0].local
        say(
            f"{name}: the {'table' if source.kind is HubKind.TABLE else 'archive'} stays in {staged} "
            f"({staged.stat().st_size / 2**20:.0f} MiB; delete it once the images are checked)"
        )
    return outcome


def _fetch_all(
    source: HubSource,
    base: Path,
    items: list[Planned],
    record: DownloadRecord,
    outcome: Outcome,
    hub: Hub,
    workers: int,
    progress: bool,
) -> None:
    """Fetch what is not already there and whole, each file checked; a failed check removes the file and, once the
    others are done, raises."""
    from tqdm import tqdm

    folder = base / source.folder
    todo: list[Planned] = []
    for item in items:
        local = folder / item.local
        if local.is_file() and os.path.getsize(local) == item.remote.size:
            try:
                record.files[item.local] = item.remote.check(local)
                outcome.kept += 1
                continue
            except BenchmarkDataError:
                local.unlink()
        todo.append(item)
    bar = tqdm(
        total=sum(i.remote.size for i in todo),
        unit="B",
        unit_scale=True,
        desc=f"{source.repo} ({len(todo)} of {len(items)} files)",
        disable=not progress or len(todo) < 2,
    )
    _file_bars(progress and len(todo) == 1)  # a single file (a table, an archive) shows its own bar

    def fetch(item: Planned) -> str:
        path = hub.fetch(source.repo, record.revision, item.remote.path, _local_dir(source, base, item))
        try:
            return item.remote.check(path)
        except BenchmarkDataError:
            path.unlink(missing_ok=True)
            raise

    errors: list[str] = []
    with bar, ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        for item, result in zip(todo, pool.map(_catching(fetch), todo)):
            if isinstance(result, BenchmarkDataError):
                errors.append(str(result))
            elif isinstance(result, BaseException):
                raise result
            else:
                record.files[item.local] = result
                outcome.fetched += 1
            bar.update(item.remote.size)
    if errors:
        record.write(folder)  # what did arrive is kept and need not be checked against the Hub again
        raise BenchmarkDataError(f"{len(errors)} file(s) failed their check; first: {errors[0]}")


def _catching(fn: Callable[[Planned], str]) -> Callable[[Planned], str | BaseException]:
    def call(item: Planned) -> str | BaseException:
        try:
            return fn(item)
        except Exception as e:  # reported (a check) or re-raised (the Hub) by the caller, in order
            return e

    return call


def _unpack(name: str, source: HubSource, base: Path, staged: Planned, record: DownloadRecord) -> int:
    """Unpack the images of a table or archive under the annotation's names and record each one's sha256."""
    path = base / source.folder / staged.local
    if source.kind is HubKind.TABLE:
        n = extract_table_images(name, path, base, key=source.key)
    else:
        n = extract_archive_images(name, path, base)
    img_dir = Path(layout_under(name, base).img_dir)
    folder = base / source.folder
    for image in set(annotated_images(name, base).values()):
        local = img_dir / image
        if local.is_file():
            record.files[str(local.relative_to(folder))] = sha256_file(local)
    return n


def _verify_offline(name: str, source: HubSource, folder: Path, record: DownloadRecord | None) -> Outcome:
    """HF_HUB_OFFLINE: no request; the files there are checked against the record of the last download."""
    if record is None:
        raise BenchmarkDataError(
            f"{name}: HF_HUB_OFFLINE is set and {folder} holds no download record ({RECORD_NAME}); download it once "
            "online (or unset HF_HUB_OFFLINE)"
        )
    missing, wrong = [], []
    for rel, digest in sorted(record.files.items()):
        local = folder / rel
        if not local.is_file():
            missing.append(rel)
        elif sha256_file(local) != digest:
            wrong.append(rel)
    if missing or wrong:
        first = (missing or wrong)[0]
        raise BenchmarkDataError(
            f"{name}: HF_HUB_OFFLINE is set and {len(missing)} file(s) are missing, {len(wrong)} differ from the "
            f"record of {record.repo}@{record.revision} (first: {first}); run again online"
        )
    return Outcome(revision=record.revision, kept=len(record.files), notes=[f"{name}: offline; checked the record"])
