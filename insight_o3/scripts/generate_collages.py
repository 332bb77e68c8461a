"""Collage synthesis (Appendix C.1, Algorithm 1) and its tools.

Generate (resumable; same ``--seed`` gives byte-identical rows and images for any ``--num_workers``)::

    python -m insight_o3.scripts.generate_collages --source_pool pool.jsonl --out_dir out \\
        --num_collages 20000 --seed 0 --num_workers 8

Build a source pool from public annotations (C.1 bbox filter ``< 0.04`` applied)::

    python -m insight_o3.scripts.generate_collages pool --format viscot --input a.jsonl [b.jsonl ...] \\
        --image_root VisCoT/ --out pool.jsonl

Difficulty filter (pass@k with a vReasoner through an OpenAI-compatible API; any success removes)::

    python -m insight_o3.scripts.generate_collages filter --out_dir out --model gpt-5-mini --attempts 3

Determinism: collages are produced in chunks of ``--chunk_size`` indices; chunk ``c`` uses its own
generator (``SeedSequence([seed, 0, c])``) and its own usage counter, and collage ``i``'s first
target is ``i``-th in a seeded permutation of the pool (a new permutation per pass over the pool).
So the output depends on the seed, the pool and the chunk size, never on the worker count or on
where a previous run stopped. Rows are appended (fsync'ed, one complete line) as chunks finish and
the file is rewritten in index order at the end.

Generate and filter hold ``--out_dir``'s lock for the whole run: a second run on the same directory
(either command) exits at once with status 5; an unwritable output ends the run with status 3. Each
prints one line; finished collages are kept and a rerun resumes.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import multiprocessing as mp
import os
import sys

import numpy as np
from tqdm import tqdm

from ..api import quiet_http_logs
from ..storage.atomic import OutputError, atomic_writer
from ..data.collage import CollageConfig, CollageInfeasible, PoolArrays, plan_collage, render_collage
from ..data.schema import CollageRow, TileRow
from ..data.source_pool import SourceItem, filter_small_targets, load_pool
from ..storage import RecordLog, write_json_atomic
from ..run_guard import STOP_ERRORS, report_stop
from ..run_lock import run_lock

log = logging.getLogger("generate_collages")
DEFAULT_QUESTION_TEMPLATE = "Look at image #{tile_id} in the collage. {question}"
ROWS_FILE, FAILURES_FILE, CONFIG_FILE = "collages.jsonl", "failures.jsonl", "run_config.json"


# ----------------------------------------------------------------------------- config flags
def add_config_flags(ap: argparse.ArgumentParser) -> None:
    """One flag per :class:`CollageConfig` field; ranges take two numbers."""
    g = ap.add_argument_group("Algorithm 1 parameters (defaults in insight_o3/data/collage.py)")
    for f in dataclasses.fields(CollageConfig):
        default = f.default
        if isinstance(default, tuple):
            g.add_argument(f"--{f.name}", type=float, nargs=2, default=list(default), metavar=("MIN", "MAX"),
                           help=f"default: {default[0]:g} {default[1]:g}")
        else:
            g.add_argument(f"--{f.name}", type=type(default), default=default, help=f"default: {default}")


def config_from_args(a: argparse.Namespace) -> CollageConfig:
    kw = {}
    for f in dataclasses.fields(CollageConfig):
        v = getattr(a, f.name)
        kw[f.name] = tuple(v) if isinstance(f.default, tuple) else v
    cfg = CollageConfig(**kw)
    cfg.validate()
    return cfg


# ----------------------------------------------------------------------------- the job
@dataclasses.dataclass(frozen=True)
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
    tiles = [TileRow(id=tl.tile_id, source_id=pool.items[tl.pool_index].id, image=pool.items[tl.pool_index].image,
                     box_on_canvas=list(tl.box), crop_box_in_source=list(tl.crop),
                     scale=[round(s, 8) for s in tl.scale], label_box=list(tl.label_box), is_target=tl.is_target)
             for tl in plan.tiles]
    tid = plan.target.tile_id
    row = CollageRow(
        sample_key=job.key(index), index=index, image=job.image_name(index), width=plan.width, height=plan.height,
        question=job.question_template.replace("{tile_id}", str(tid)).replace("{question}", t.question),
        source_question=t.question, options=list(t.options) if t.options else None, answer=t.answer,
        target_bbox=[round(v, 3) for v in plan.target_bbox], target_tile_id=tid, tiles=tiles,
        source_ids=[tl.source_id for tl in tiles], target_source_id=t.id, source=t.source, seed=job.seed,
        attempts=plan.attempts)
    return row.to_dict()


def _save_image(im, path: str, fmt: str, quality: int) -> None:
    with atomic_writer(path, "wb") as f:
        if fmt == "png":
            im.save(f, format="PNG")
        else:
            im.save(f, format="JPEG", quality=quality)


def run_chunk(job: Job, chunk: int, done: frozenset[int]) -> list[tuple[str, dict]]:
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


def generate(job: Job, items: list[SourceItem], num_workers: int, progress: bool = True) -> dict:
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
    meta = {"seed": job.seed, "chunk_size": job.chunk_size, "target_retries": job.target_retries,
            "question_template": job.question_template, "image_format": job.image_format,
            "jpeg_quality": job.jpeg_quality, "pool_size": len(items), "config": dataclasses.asdict(job.cfg)}
    meta = json.loads(json.dumps(meta))
    if os.path.exists(cfg_path):
        with open(cfg_path, encoding="utf-8") as f:
            old = json.load(f)
        if old != meta:
            raise SystemExit(f"{cfg_path}: this output directory was generated with different settings; "
                             f"use a new --out_dir (resuming would mix two generators)")
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
    bar = tqdm(total=job.num_collages, initial=len(done & set(range(job.num_collages))), desc="collages",
               disable=not progress)

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


# ----------------------------------------------------------------------------- CLI
def _generate_main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python -m insight_o3.scripts.generate_collages",
                                 description="Target-and-fill collage synthesis (Algorithm 1 of the paper).")
    ap.add_argument("--source_pool", required=True, help="pool table (.jsonl or .parquet), see insight_o3/data/source_pool.py")
    ap.add_argument("--image_root", default=None, help="root of relative image paths (default: the pool's directory)")
    ap.add_argument("--out_dir", required=True)
    ap.add_argument("--num_collages", type=int, required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--num_workers", type=int, default=1, help="worker processes (output does not depend on it)")
    ap.add_argument("--chunk_size", type=int, default=16, help="collages per generator chunk (part of the seed)")
    ap.add_argument("--target_retries", type=int, default=3,
                    help="other targets tried when a target is infeasible after T attempts")
    ap.add_argument("--max_bbox_ratio", type=float, default=0.04,
                    help="C.1 pool filter area(bbox)/area(image) < this (default 0.04)")
    ap.add_argument("--question_template", default=DEFAULT_QUESTION_TEMPLATE)
    ap.add_argument("--image_format", choices=("jpg", "png"), default="jpg")
    ap.add_argument("--jpeg_quality", type=int, default=95)
    ap.add_argument("--skip_image_check", action="store_true", help="do not open every pool image header")
    ap.add_argument("--no_progress", action="store_true")
    add_config_flags(ap)
    a = ap.parse_args(argv)
    cfg = config_from_args(a)
    if "{tile_id}" not in a.question_template or "{question}" not in a.question_template:
        ap.error("--question_template must contain {tile_id} and {question}")
    items = load_pool(a.source_pool, a.image_root, check_images=not a.skip_image_check)
    kept = filter_small_targets(items, a.max_bbox_ratio)
    log.info("source pool: %d items, %d with bbox ratio < %g", len(items), len(kept), a.max_bbox_ratio)
    if not kept:
        raise SystemExit(f"{a.source_pool}: no item has a bbox ratio below {a.max_bbox_ratio}")
    job = Job(out_dir=a.out_dir, seed=a.seed, num_collages=a.num_collages, chunk_size=a.chunk_size,
              target_retries=a.target_retries, question_template=a.question_template,
              image_format=a.image_format, jpeg_quality=a.jpeg_quality, cfg=cfg)
    try:
        stats = generate(job, kept, a.num_workers, progress=not a.no_progress)
    except STOP_ERRORS as e:
        return report_stop(e, results=os.path.join(a.out_dir, ROWS_FILE))
    print(json.dumps(stats))
    return 0


def _pool_main(argv: list[str]) -> int:
    from ..data.source_pool import convert_viscot, convert_vstar, write_pool
    ap = argparse.ArgumentParser(prog="python -m insight_o3.scripts.generate_collages pool",
                                 description="Build a source pool from Visual CoT / V* annotations.")
    ap.add_argument("--format", choices=("viscot", "vstar"), required=True)
    ap.add_argument("--input", nargs="+", required=True)
    ap.add_argument("--image_root", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--max_bbox_ratio", type=float, default=0.04)
    a = ap.parse_args(argv)
    conv = convert_viscot if a.format == "viscot" else convert_vstar
    items = [it for path in a.input for it in conv(path, os.path.abspath(a.image_root))]  # absolute paths
    kept = filter_small_targets(items, a.max_bbox_ratio)
    write_pool(kept, a.out)
    print(json.dumps({"read": len(items), "kept": len(kept), "out": a.out}))
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    quiet_http_logs()
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "pool":
        try:
            return _pool_main(argv[1:])
        except OutputError as e:
            return report_stop(e)
    if argv and argv[0] == "filter":
        from ..data.difficulty import main as filter_main
        return filter_main(argv[1:])
    return _generate_main(argv)


if __name__ == "__main__":
    sys.exit(main())
