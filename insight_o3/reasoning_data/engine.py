"""The data engine's steps as functions over a work directory (the API of :mod:`insight_o3.reasoning_data`).

Each function runs one step to the end (or to a stop), resumably: it takes the work directory's lock, refuses
settings that differ from those its step's first run fixed (:class:`~insight_o3.jobs.integrity.SettingsChanged`,
nothing written), appends one durable record per item and returns the step's :class:`~insight_o3.jobs.execute.JobResult`
(``summary``; ``exit_code`` 1 while items failed: call again to retry them). The command ``build_reasoning_data``
is these functions behind flags; a round driver calls them directly.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .. import __version__
from ..base.json_types import JSONObject
from ..base.setting_kinds import Kind, field_kinds
from ..endpoints.endpoint import Endpoint
from ..endpoints.usage import CostModel
from ..evaluation.samples import load_samples
from ..jobs.controls import RunControls
from ..jobs.execute import JobResult
from ..jobs.integrity import Invocation, read_card, settle
from ..storage.atomic import write_json_atomic
from ..storage.lock import run_lock
from . import export as exp
from . import prompts
from .assessment import run_check, run_score
from .generation import run_generate, units_for
from .settings import CheckSettings, ExportSettings, GenerateSettings, ModelAccess, ScoreSettings, controls_settings
from .steps import EngineRun, read_records
from .workspace import EXPORT_FILES, WorkDir


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_sha(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


#: the prompts each step sends (their sha256 are fixed settings of the step)
STEP_PROMPTS = {
    "generate": ("STEP_SYSTEM_PROMPT", "PREFILL", "CONTINUE_PROMPT", "REPAIR_PROMPT", "FINAL_PROMPT"),
    "check": ("CHECK_SYSTEM_PROMPT", "CHECK_USER_TEMPLATE", "NO_ANSWER"),
    "score": ("SCORE_PROMPT",),
}


def prompts_sha256(step: str) -> dict[str, str]:
    return {name: _sha(getattr(prompts, name)) for name in STEP_PROMPTS[step]}


def _invocation(step: str, settings: JSONObject, kinds: Mapping[str, Kind], **derived: Any) -> Invocation:
    return Invocation(f"build_reasoning_data {step}", settings, derived, {"version": __version__}, kinds)


def _client_settings(m: ModelAccess, prefix: str = "") -> JSONObject:
    return {**m.settings(prefix), "max_retries": m.api.max_retries, "client_timeout": m.api.timeout}


def _client_kinds(prefix: str = "") -> dict[str, Kind]:
    """The kinds of :func:`_client_settings` (its retries and timeout are the endpoint's, unprefixed)."""
    return {**ModelAccess.kinds(prefix), **field_kinds(Endpoint)}


#: Where ``generate``'s questions are (paths: what the annotation file holds is fixed through ``ann_sha256``).
INPUT_KINDS = {"ann_file": Kind.OPERATIONAL, "img_dir": Kind.OPERATIONAL}


def generate(
    work: str | os.PathLike,
    ann_file: str,
    img_dir: str,
    generator: ModelAccess,
    settings: GenerateSettings = GenerateSettings(),
    run: RunControls = RunControls(),
    *,
    allow_outside_img_dir: bool = False,
) -> JobResult[JSONObject]:
    """Step ``generate``: ``settings.num_chains`` chains for every question of ``ann_file`` (the benchmark annotation
    format, images under ``img_dir``). Raises :class:`~insight_o3.protocol.sample.AnnotationError` for bad input."""
    ws = WorkDir.at(work)
    samples = load_samples(ann_file, img_dir, allow_outside=allow_outside_img_dir)
    inv = _invocation(
        "generate",
        {
            **_client_settings(generator),
            "ann_file": ann_file,
            "img_dir": img_dir,
            **settings.settings(),
            **controls_settings(run),
        },
        {**_client_kinds(), **INPUT_KINDS, **field_kinds(settings), **field_kinds(run)},
        ann_sha256=_file_sha(ann_file),
        prompts_sha256=prompts_sha256("generate"),
        sampling=dict(prompts.GENERATION_KWARGS),
    )
    card = {
        "model": generator.settings(),
        "prompts_sha256": prompts_sha256("generate"),
        "settings": settings.settings(),
    }
    cost = CostModel.from_file(run.price_file, {"generator": generator.model})
    step = EngineRun(ws, run, inv, card, cost)
    return asyncio.run(run_generate(step, generator, settings, units_for(samples, settings.num_chains)))


def _generated(ws: WorkDir) -> dict[str, JSONObject]:
    return read_records(ws.require("generate"), "generate")


def check(
    work: str | os.PathLike,
    judge: ModelAccess,
    settings: CheckSettings = CheckSettings(),
    run: RunControls = RunControls(),
) -> JobResult[JSONObject]:
    """Step ``check`` (tier 1) over every well-formed chain of ``generate``."""
    ws = WorkDir.at(work)
    chains = [g for g in _generated(ws).values() if g.get("status") == "ok"]
    inv = _invocation(
        "check",
        {**_client_settings(judge, "judge_"), **settings.settings(), **controls_settings(run)},
        {**_client_kinds("judge_"), **field_kinds(settings), **field_kinds(run)},
        prompts_sha256=prompts_sha256("check"),
        sampling=dict(prompts.CHECK_KWARGS),
    )
    card = {"judge": judge.settings(), "prompts_sha256": prompts_sha256("check")}
    cost = CostModel.from_file(run.price_file, {"checker": judge.model})
    return asyncio.run(run_check(EngineRun(ws, run, inv, card, cost), judge, settings, chains))


def score(
    work: str | os.PathLike,
    scorer: ModelAccess,
    settings: ScoreSettings = ScoreSettings(),
    run: RunControls = RunControls(),
) -> JobResult[JSONObject]:
    """Step ``score`` (tier 2) over every chain that passed ``check``."""
    ws = WorkDir.at(work)
    checks = read_records(ws.require("check"), "check")
    chains = [g for k, g in _generated(ws).items() if checks.get(k, {}).get("passed") is True]
    inv = _invocation(
        "score",
        {**_client_settings(scorer, "scorer_"), **settings.settings(), **controls_settings(run)},
        {**_client_kinds("scorer_"), **field_kinds(settings), **field_kinds(run)},
        prompts_sha256=prompts_sha256("score"),
        sampling=dict(prompts.SCORE_KWARGS),
    )
    card = {
        "scorer": scorer.settings(),
        "prompts_sha256": prompts_sha256("score"),
        "rubric": list(prompts.SCORE_RUBRIC),
    }
    cost = CostModel.from_file(run.price_file, {"scorer": scorer.model})
    return asyncio.run(run_score(EngineRun(ws, run, inv, card, cost), scorer, settings, chains))


@dataclass(frozen=True)
class ExportResult:
    """What ``export`` wrote: the files by name, the counts (per tier, per set)."""

    files: dict[str, str]
    counts: JSONObject


def export(work: str | os.PathLike, settings: ExportSettings = ExportSettings()) -> ExportResult:
    """Step ``export``: rank the assessed chains and write the SFT sets, the DPO pairs and the ranking
    (:mod:`.export`) under ``<work>/export``. Its settings are fixed by its first run (another ratio: another work
    directory, or remove ``export/``); the files are rewritten from the records each time (a later call after more
    chains were assessed brings them up to date)."""
    ws = WorkDir.at(work)
    with run_lock(str(ws.root), "build_reasoning_data export"):
        generated = _generated(ws)
        checks = read_records(ws.require("check"), "check")
        scores = read_records(ws.records("score"), "score") if ws.records("score").exists() else {}
        ws.step("export").mkdir(parents=True, exist_ok=True)
        path = ws.card("export")
        inv = _invocation("export", settings.settings(), field_kinds(settings))
        card = settle(read_card(str(path)), {}, inv, where=str(path), hint="use another work directory")
        write_json_atomic(path, card)
        rows = exp.build(exp.assess(generated, checks, scores, settings.min_score), settings)
        files = {name: str(ws.export_file(name)) for name in EXPORT_FILES}
        sha = exp.write(rows, files)
        write_json_atomic(path, {**card, "settings": settings.settings(), "counts": rows["counts"], "sha256": sha})
    return ExportResult(files, rows["counts"])
