"""The collage generation job (Appendix C.1, Algorithm 1 at scale): chunked, seeded, resumable.

Collages are produced in chunks of ``chunk_size`` indices; chunk ``c`` uses its own generator
(``SeedSequence([seed, 0, c])``) and its own usage counter, and collage ``i``'s first target is
``i``-th in a seeded permutation of the pool (a new permutation per pass over the pool). So the output
depends on the seed, the pool and the chunk size, never on the worker count or on where a previous run
stopped. Rows are appended (fsync'ed, one complete line) as chunks finish and the file is rewritten in
index order at the end. :func:`generate` runs :class:`CollageWork` through :func:`~insight_o3.jobs.execute.execute` in a run directory,
so it holds the output directory's lock for the whole run. ``run_config.json`` holds the settings the
directory's first run fixed (seed, chunk size, every generator setting, the pool's sha256) and the history of
runs; a run with others is refused (:mod:`insight_o3.jobs.integrity`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import os
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

import numpy as np
from PIL import Image

from .. import __version__
from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind, field_kinds, kind_field
from ..jobs.card_store import CardFile
from ..jobs.clients import Clients
from ..jobs.controls import RunControls
from ..jobs.execute import Emit, ItemWork, Plan, execute
from ..jobs.integrity import Invocation, git_commit
from ..jobs.run_directory import open_run
from ..storage.atomic import atomic_writer, make_output_dir
from .collage import CollageInfeasible, CollagePlan, PoolArrays, plan_collage, render_collage
from .collage_config import CollageConfig
from .schema import CollageRow, TileRow
from .source_pool import SourceItem, pool_sha256

ROWS_FILE, FAILURES_FILE, CONFIG_FILE = "collages.jsonl", "failures.jsonl", "run_config.json"
COMMAND = "generate_collages"


@dataclasses.dataclass(frozen=True, kw_only=True)
class CollageSpec:
    """What a collage run generates (picklable: sent to the worker processes with each chunk)."""

    out_dir: str = kind_field(Kind.OPERATIONAL)
    seed: int = kind_field(Kind.RESULT)
    #: how many collages the directory holds (a later run may ask for more)
    num_collages: int = kind_field(Kind.OPERATIONAL)
    #: the generator's random stream is per chunk
    chunk_size: int = kind_field(Kind.RESULT)
    target_retries: int = kind_field(Kind.RESULT)
    question_template: str = kind_field(Kind.RESULT)
    image_format: str = kind_field(Kind.RESULT)
    jpeg_quality: int = kind_field(Kind.RESULT)
    #: each of its fields a setting of its own
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


def _row(job: CollageSpec, index: int, plan: CollagePlan, pool: PoolArrays) -> JSONObject:
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


def _save_image(im: Image.Image, path: str, fmt: str, quality: int) -> None:
    with atomic_writer(path, "wb") as f:
        if fmt == "png":
            im.save(f, format="PNG")
        else:
            im.save(f, format="JPEG", quality=quality)


def run_chunk(job: CollageSpec, chunk: int, done: frozenset[int] = frozenset()) -> list[tuple[str, JSONObject]]:
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


def _chunk_task(args: tuple[CollageSpec, int, frozenset[int]]) -> list[tuple[str, JSONObject]]:
    job, chunk, done = args
    return run_chunk(job, chunk, done)


class CollageWork(ItemWork[tuple[int, frozenset[int]]]):
    """One chunk (its index and the collage indices already recorded), run in ``pool``; every collage is a record
    in the ``row`` log or, when no target was feasible, the ``failure`` log."""

    def __init__(self, spec: CollageSpec, pool: Executor):
        self.spec, self.pool = spec, pool

    def key(self, unit: tuple[int, frozenset[int]]) -> str:
        return str(unit[0])

    async def work(self, unit: tuple[int, frozenset[int]], emit: Emit) -> None:
        c, done = unit
        pairs = await asyncio.get_running_loop().run_in_executor(self.pool, _chunk_task, (self.spec, c, done))
        for name, record in pairs:  # a chunk's rows and failures, each to its log
            await emit(record, log=name)


#: The run's settings besides the spec's: its worker processes and its progress bar (neither changes a collage).
RUN_KINDS = {"num_workers": Kind.OPERATIONAL, "progress": Kind.OPERATIONAL}


def _invocation(spec: CollageSpec, items: list[SourceItem], num_workers: int, progress: bool) -> Invocation:
    """What the directory's first run fixes: the generator's settings and the pool's content."""
    settings = {f.name: getattr(spec, f.name) for f in dataclasses.fields(spec) if f.name != "cfg"}
    return Invocation(
        COMMAND,
        {**settings, **dataclasses.asdict(spec.cfg), "num_workers": num_workers, "progress": progress},
        derived={"pool_sha256": pool_sha256(items)},
        provenance={"version": __version__, "git_commit": git_commit()},
        kinds={**field_kinds(spec), **field_kinds(spec.cfg), **RUN_KINDS},
    )


def _plan(spec: CollageSpec, done: set[int]) -> Plan:
    """The chunks with a collage not recorded yet (``done``: the indices recorded)."""
    units = []
    for c in range(-(-spec.num_collages // spec.chunk_size)):
        idx = set(range(c * spec.chunk_size, min((c + 1) * spec.chunk_size, spec.num_collages)))
        if not idx <= done:
            units.append((c, frozenset(idx & done)))
    return Plan(units, spec.num_collages, [None] * len(done & set(range(spec.num_collages))))


def _pool(items: list[SourceItem], num_workers: int) -> Executor:
    """Where chunks run: ``num_workers`` forked processes (this process's worker thread when 1)."""
    if num_workers <= 1:
        _init_worker(items)
        return ThreadPoolExecutor(max_workers=1, thread_name_prefix="collages")
    return ProcessPoolExecutor(num_workers, mp.get_context("fork"), initializer=_init_worker, initargs=(items,))


async def _agenerate(spec: CollageSpec, items: list[SourceItem], num_workers: int, progress: bool) -> JSONObject:
    controls = RunControls(concurrency=max(1, num_workers), progress=progress)
    store = CardFile.under(spec.out_dir, CONFIG_FILE, [ROWS_FILE, FAILURES_FILE])
    hint = "use a new --output_dir to generate with other settings (resuming would mix two generators)"
    inv = _invocation(spec, items, num_workers, progress)
    with open_run(spec.out_dir, COMMAND, controls, store=store, invocation=inv, change_hint=hint) as run:
        make_output_dir(os.path.join(spec.out_dir, "images"))
        logs = run.open_logs({"row": ROWS_FILE, "failure": FAILURES_FILE})
        plan = _plan(spec, {int(r["index"]) for lg in logs.values() for r in lg.records.values()})
        async with Clients(run.guard) as clients:
            pool = _pool(items, num_workers)
            clients.on_close(lambda: pool.shutdown(wait=True, cancel_futures=True))
            await execute(run, plan, CollageWork(spec, pool), clients, desc="collages")
        order = [spec.key(i) for i in range(spec.num_collages)]
        logs["row"].compact(order)
        logs["failure"].compact(order)
        return {"collages": len(logs["row"].records), "failures": len(logs["failure"].records)}


def generate(spec: CollageSpec, items: list[SourceItem], *, num_workers: int = 1, progress: bool = True) -> JSONObject:
    """Generate every collage not yet in ``spec.out_dir`` (under the directory's lock)."""
    return asyncio.run(_agenerate(spec, items, num_workers, progress))
