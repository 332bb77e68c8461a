"""The collage generation job (Appendix C.1, Algorithm 1 at scale): chunked, seeded, resumable.

Collages are produced in chunks of ``chunk_size`` indices; chunk ``c`` uses its own generator
(``SeedSequence([seed, 0, c])``) and its own usage counter, and collage ``i``'s first target is
``i``-th in a seeded permutation of the pool (a new permutation per pass over the pool). So the output
depends on the seed, the pool and the chunk size, never on the worker count or on where a previous run
stopped. Rows are appended (fsync'ed, one complete line) as chunks finish and the file is rewritten in
index order at the end. :func:`generate` holds the output directory's lock for the whole run.
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing as mp
import os

import numpy as np
from tqdm import tqdm

from ..run_lock import run_lock
from ..storage import RecordLog, write_json_atomic
from ..storage.atomic import OutputError, atomic_writer
from .collage import CollageConfig, CollageInfeasible, PoolArrays, plan_collage, render_collage
from .schema import CollageRow, TileRow
from .source_pool import SourceItem

DEFAULT_QUESTION_TEMPLATE = "Look at image #{tile_id} in the collage. {question}"
ROWS_FILE, FAILURES_FILE, CONFIG_FILE = "collages.jsonl", "failures.jsonl", "run_config.json"


class JobSettingsError(ValueError):
    """The output directory was generated with other settings (resuming would mix two generators)."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class Job:
    out_dir: str
    seed: int
    num_collages: int
    chunk_size: int
    target_retries: int
    question_template: str
    image_format: str
    jpeg_quality: int
    cfg: CollageConfig

    def key(self, index: int) -> str:
        return f"collage-{index:08d}"

    def image_name(self, index: int) -> str:
        return f"images/{self.key(index)}.{self.image_format}"


_POOL: PoolArrays | None = None


def _init_worker(items: list[SourceItem]) -> None:
    global _POOL
    _POOL = PoolArrays.build(items)


def _target_order(seed: int, n: int, index: int) -> int:
    epoch, pos = divmod(index, n)
    perm = np.random.default_rng(np.random.SeedSequence([seed, 1, epoch])).permutation(n)
    return int(perm[pos])


def _row(job: Job, index: int, plan, pool: PoolArrays) -> dict:
    t = pool.items[plan.target.pool_index]
    tiles = [
        TileRow(
            id=tl.tile_id,
            source_id=pool.items[tl.pool_index].id,
            image=pool.items[tl.pool_index].image,
            box_on_canvas=list(tl.box),
            crop_box_in_source=list(tl.crop),
            scale=[round(s, 8) for s in tl.scale],
            label_box=list(tl.label_box),
            is_target=tl.is_target,
        )
        for tl in plan.tiles
    ]
    tid = plan.target.tile_id
    row = CollageRow(
        sample_key=job.key(index),
        index=index,
        image=job.image_name(index),
        width=plan.width,
        height=plan.height,
        question=job.question_template.replace("{tile_id}", str(tid)).replace("{question}", t.question),
        source_question=t.question,
        options=list(t.options) if t.options else None,
        answer=t.answer,
        target_bbox=[round(v, 3) for v in plan.target_bbox],
        target_tile_id=tid,
        tiles=tiles,
        source_ids=[tl.source_id for tl in tiles],
        target_source_id=t.id,
        source=t.source,
        seed=job.seed,
        attempts=plan.attempts,
    )
    return row.to_dict()


def _save_image(im, path: str, fmt: str, quality: int) -> None:
    with atomic_writer(path, "wb") as f:
        if fmt == "png":
            im.save(f, format="PNG")
        else:
            im.save(f, format="JPEG", quality=quality)


def run_chunk(job: Job, chunk: int, done: frozenset[int] = frozenset()) -> list[tuple[str, dict]]:
    """Plan every collage of a chunk (so RNG and usage state match a fresh run), render and save
    those not yet done. Returns ``[("row"|"failure", record), ...]``."""
    pool = _POOL
    assert pool is not None, "worker not initialised"
    rng = np.random.default_rng(np.random.SeedSequence([job.seed, 0, chunk]))
    usage = np.zeros(len(pool), dtype=np.float64)
    out = []
    start, stop = chunk * job.chunk_size, min((chunk + 1) * job.chunk_size, job.num_collages)
    for index in range(start, stop):
        target = _target_order(job.seed, len(pool), index)
        plan, reasons = None, {}
        for _ in range(job.target_retries + 1):
            try:
                plan = plan_collage(pool, target, job.cfg, rng, usage)
                break
            except CollageInfeasible as e:
                reasons[pool.items[target].id] = e.reasons
                target = int(rng.integers(len(pool)))
        if index in done:
            continue
        if plan is None:
            out.append(("failure", {"sample_key": job.key(index), "index": index, "reasons": reasons}))
            continue
        im = render_collage(plan, pool)
        _save_image(im, os.path.join(job.out_dir, job.image_name(index)), job.image_format, job.jpeg_quality)
        out.append(("row", _row(job, index, plan, pool)))
    return out


def _chunk_task(args):
    job, chunk, done = args
    return run_chunk(job, chunk, done)


def generate(job: Job, items: list[SourceItem], *, num_workers: int = 1, progress: bool = True) -> dict:
    """Generate every collage not yet in ``job.out_dir`` (under the directory's lock)."""
    with run_lock(job.out_dir, "generate_collages"):
        return _generate_locked(job, items, num_workers, progress)


def _generate_locked(job: Job, items: list[SourceItem], num_workers: int, progress: bool) -> dict:
    images_dir = os.path.join(job.out_dir, "images")
    try:
        os.makedirs(images_dir, exist_ok=True)
    except OSError as e:
        raise OutputError.from_os_error(images_dir, e, "create") from None
    cfg_path = os.path.join(job.out_dir, CONFIG_FILE)
    meta = {
        "seed": job.seed,
        "chunk_size": job.chunk_size,
        "target_retries": job.target_retries,
        "question_template": job.question_template,
        "image_format": job.image_format,
        "jpeg_quality": job.jpeg_quality,
        "pool_size": len(items),
        "config": dataclasses.asdict(job.cfg),
    }
    meta = json.loads(json.dumps(meta))
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            old = json.load(f)
        if old != meta:
            raise JobSettingsError(
                f"{cfg_path}: this output directory was generated with different settings; "
                f"use a new --output_dir (resuming would mix two generators)"
            )
    else:
        write_json_atomic(cfg_path, meta)
    rows = RecordLog.open(os.path.join(job.out_dir, ROWS_FILE))
    fails = RecordLog.open(os.path.join(job.out_dir, FAILURES_FILE))
    done = {int(r["index"]) for r in rows.records.values()} | {int(r["index"]) for r in fails.records.values()}
    n_chunks = -(-job.num_collages // job.chunk_size)
    tasks = []
    for c in range(n_chunks):
        idx = set(range(c * job.chunk_size, min((c + 1) * job.chunk_size, job.num_collages)))
        if not idx <= done:
            tasks.append((job, c, frozenset(idx & done)))
    bar = tqdm(
        total=job.num_collages, initial=len(done & set(range(job.num_collages))), desc="collages", disable=not progress
    )

    def consume(results):
        for kind, rec in results:
            (rows if kind == "row" else fails).append(rec)
            bar.update(1)

    try:
        if num_workers <= 1:
            _init_worker(items)
            for t in tasks:
                consume(_chunk_task(t))
        else:
            with mp.get_context("fork").Pool(num_workers, initializer=_init_worker, initargs=(items,)) as p:
                for res in p.imap_unordered(_chunk_task, tasks):
                    consume(res)
        order = [job.key(i) for i in range(job.num_collages)]
        rows.compact(order)
        fails.compact(order)
    finally:
        bar.close()
        rows.close()
        fails.close()
    return {"collages": len(rows.records), "failures": len(fails.records)}
